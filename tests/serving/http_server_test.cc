#include "runtime/serving/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

struct Response {
  bool ok = false;  // a whole response was read
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
  std::vector<std::string> chunks;  // for chunked responses
};

// A minimal blocking HTTP/1.1 client over loopback, every read bounded by a
// timeout so a broken server fails the test instead of hanging it.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Client() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }

  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  // Reads one response. stop_after_chunks > 0: return after that many
  // chunks of a chunked body (ok stays false).
  Response Read(int stop_after_chunks = 0) {
    Response r;
    std::string line;
    if (!ReadLine(&line)) return r;
    if (line.rfind("HTTP/1.1 ", 0) != 0 || line.size() < 12) return r;
    r.status = std::stoi(line.substr(9, 3));
    while (true) {
      if (!ReadLine(&line)) return r;
      if (line.empty()) break;
      size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = line.find_first_not_of(' ', colon + 1);
      r.headers[name] = v == std::string::npos ? "" : line.substr(v);
    }
    if (r.headers.count("transfer-encoding")) {
      while (true) {
        if (!ReadLine(&line)) return r;
        size_t size = std::stoul(line, nullptr, 16);
        std::string data;
        if (!ReadN(size + 2, &data)) return r;
        if (size == 0) break;
        r.chunks.push_back(data.substr(0, size));
        r.body += r.chunks.back();
        if (stop_after_chunks > 0 && static_cast<int>(r.chunks.size()) >= stop_after_chunks)
          return r;
      }
    } else if (r.headers.count("content-length")) {
      if (!ReadN(std::stoul(r.headers["content-length"]), &r.body)) return r;
    }
    r.ok = true;
    return r;
  }

  // True if the server closes the connection within timeout_ms.
  bool WaitClosed(int timeout_ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  bool Fill() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return false;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    buf_.append(buf, static_cast<size_t>(n));
    return true;
  }
  bool ReadLine(std::string* line) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos)
      if (!Fill()) return false;
    *line = buf_.substr(0, eol);
    buf_.erase(0, eol + 2);
    return true;
  }
  bool ReadN(size_t n, std::string* out) {
    while (buf_.size() < n)
      if (!Fill()) return false;
    *out = buf_.substr(0, n);
    buf_.erase(0, n);
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

std::string Get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n";
}

std::string Post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options);
    server_->Handle("GET", "/hello", [](const HttpRequest& req, ResponseWriter& w) {
      w.Send(200, "text/plain", "hello " + req.query, {{"X-Test", "1"}});
    });
    server_->Handle("POST", "/echo", [](const HttpRequest& req, ResponseWriter& w) {
      w.Send(200, "application/octet-stream", req.body);
    });
    server_->Handle("GET", "/stream", [](const HttpRequest&, ResponseWriter& w) {
      w.StartStream(200, "text/event-stream");
      for (int i = 0; i < 3; ++i) w.Write("data: " + std::to_string(i) + "\n\n");
      w.End();
    });
    server_->Handle("GET", "/forever", [this](const HttpRequest&, ResponseWriter& w) {
      w.StartStream(200, "text/event-stream");
      int writes = 0;
      while (w.Write("data: tick\n\n")) {
        ++writes;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (writes > 4000) break;  // ~20 s: the test has failed by then
      }
      std::lock_guard<std::mutex> lock(mu_);
      stream_stopped_ = true;
      stopped_cv_.notify_all();
    });
    server_->Handle("GET", "/silent", [](const HttpRequest&, ResponseWriter&) {});
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_GT(server_->port(), 0);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::unique_ptr<HttpServer> server_;
  std::mutex mu_;
  std::condition_variable stopped_cv_;
  bool stream_stopped_ = false;
};

TEST_F(HttpServerTest, GetAndPostWithBodies) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Get("/hello?name=x")));
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello name=x");
  EXPECT_EQ(r.headers["content-type"], "text/plain");
  EXPECT_EQ(r.headers["x-test"], "1");

  std::string big(200000, 'z');
  big[123] = '\0';
  ASSERT_TRUE(c.Send(Post("/echo", big)));
  r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, big);
}

TEST_F(HttpServerTest, KeepAliveTwoRequestsOnOneConnection) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Get("/hello?1")));
  Response a = c.Read();
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(a.headers["connection"], "keep-alive");
  ASSERT_TRUE(c.Send(Post("/echo", "second")));
  Response b = c.Read();
  ASSERT_TRUE(b.ok);
  EXPECT_EQ(b.body, "second");
  // Pipelined, the last asking to close.
  ASSERT_TRUE(c.Send(Get("/hello?3") + Get("/hello?4", "Connection: close\r\n")));
  EXPECT_EQ(c.Read().body, "hello 3");
  Response d = c.Read();
  EXPECT_EQ(d.body, "hello 4");
  EXPECT_EQ(d.headers["connection"], "close");
  EXPECT_TRUE(c.WaitClosed(2000));
}

TEST_F(HttpServerTest, NotFoundAndMethodNotAllowed) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Get("/nope")));
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_NE(r.body.find("\"error\": {\"message\": "), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"code\": \"not_found\""), std::string::npos) << r.body;
  // The connection survives a 404.
  ASSERT_TRUE(c.Send(Post("/hello", "")));
  r = c.Read();
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET");
  // A handler that does not answer: 500.
  ASSERT_TRUE(c.Send(Get("/silent")));
  EXPECT_EQ(c.Read().status, 500);
}

TEST_F(HttpServerTest, BodyTooLargeIs413) {
  HttpServerOptions options;
  options.limits.max_body_bytes = 1000;
  StartServer(options);
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Post("/echo", std::string(5000, 'x'))));
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.headers["connection"], "close");
  EXPECT_NE(r.body.find("\"code\": \"request_too_large\""), std::string::npos) << r.body;
  EXPECT_TRUE(c.WaitClosed(3000));
}

TEST_F(HttpServerTest, HeadersTooLargeIs431) {
  HttpServerOptions options;
  options.limits.max_header_bytes = 1024;
  StartServer(options);
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Get("/hello", "X-Big: " + std::string(4000, 'a') + "\r\n")));
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 431);
  EXPECT_NE(r.body.find("\"type\": \"invalid_request_error\""), std::string::npos) << r.body;
  // Malformed: 400 with the JSON shape too.
  Client d(server_->port());
  ASSERT_TRUE(d.Send("GET / HTTP/1.1\nHost: a\n\n"));
  r = d.Read();
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("\"code\": \"bad_request\""), std::string::npos) << r.body;
  // Chunked request bodies are refused with 501.
  Client e(server_->port());
  ASSERT_TRUE(e.Send("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"));
  EXPECT_EQ(e.Read().status, 501);
}

TEST_F(HttpServerTest, ApiKey) {
  HttpServerOptions options;
  options.api_key = "sk-secret";
  StartServer(options);
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Get("/hello")));
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_NE(r.body.find("\"code\": \"invalid_api_key\""), std::string::npos) << r.body;
  ASSERT_TRUE(c.Send(Get("/hello", "Authorization: Bearer sk-wrong\r\n")));
  EXPECT_EQ(c.Read().status, 401);
  ASSERT_TRUE(c.Send(Get("/hello", "Authorization: Bearer sk-secret\r\n")));
  r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello ");
  ASSERT_TRUE(c.Send(Get("/hello", "authorization: bearer sk-secret\r\n")));
  EXPECT_EQ(c.Read().status, 200);
}

TEST_F(HttpServerTest, StreamedResponseReadAsChunks) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Get("/stream")));
  Response r = c.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
  ASSERT_EQ(r.chunks.size(), 3u);
  EXPECT_EQ(r.chunks[0], "data: 0\n\n");
  EXPECT_EQ(r.chunks[2], "data: 2\n\n");
  // Keep-alive after a stream.
  ASSERT_TRUE(c.Send(Get("/hello")));
  EXPECT_EQ(c.Read().status, 200);
}

TEST_F(HttpServerTest, ClientDisconnectStopsTheStream) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Get("/forever")));
  Response r = c.Read(/*stop_after_chunks=*/2);
  ASSERT_EQ(r.chunks.size(), 2u);
  auto closed_at = Clock::now();
  c.Close();
  std::unique_lock<std::mutex> lock(mu_);
  ASSERT_TRUE(stopped_cv_.wait_for(lock, std::chrono::seconds(2), [&] { return stream_stopped_; }))
      << "Write() did not return false after the client went away";
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - closed_at).count();
  EXPECT_LT(ms, 1000);
}

TEST_F(HttpServerTest, StopWhileAConnectionIsIdle) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Get("/hello")));
  ASSERT_TRUE(c.Read().ok);
  Client idle(server_->port());  // connected, never sent anything
  ASSERT_TRUE(idle.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = Clock::now();
  server_->Stop();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EXPECT_LT(ms, 1500);
  EXPECT_TRUE(c.WaitClosed(1000));
  EXPECT_TRUE(idle.WaitClosed(1000));
  server_->Stop();  // idempotent
}

TEST_F(HttpServerTest, OverTheConnectionBoundIs503) {
  HttpServerOptions options;
  options.max_connections = 1;
  StartServer(options);
  Client first(server_->port());
  ASSERT_TRUE(first.Send(Get("/hello")));
  ASSERT_TRUE(first.Read().ok);  // the first is served and stays open
  Client second(server_->port());
  ASSERT_TRUE(second.Send(Get("/hello")));
  Response r = second.Read();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("\"type\": \"server_error\""), std::string::npos) << r.body;
  first.Close();
  // Once the first has gone, a new connection is served.
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    Client next(server_->port());
    next.Send(Get("/hello"));
    served = next.Read().status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
}

// A client at the bound that closes a connection and opens the next at
// once is served, not refused (the bench's concurrency 64 against the
// default bound of 64 lost requests to 503s that way).
TEST_F(HttpServerTest, ReconnectAtTheBoundRightAfterACloseIsServed) {
  HttpServerOptions options;
  options.max_connections = 1;
  StartServer(options);
  int refused = 0;
  for (int i = 0; i < 200; ++i) {
    Client c(server_->port());
    ASSERT_TRUE(c.Send(Get("/hello")));
    const Response r = c.Read();
    ASSERT_TRUE(r.ok);
    refused += r.status == 503;
    c.Close();
  }
  EXPECT_EQ(refused, 0);
}

TEST_F(HttpServerTest, IdleTimeoutClosesAndExpectContinue) {
  HttpServerOptions options;
  options.idle_timeout_ms = 200;
  StartServer(options);
  Client c(server_->port());
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
  Response interim = c.Read();
  EXPECT_EQ(interim.status, 100);
  ASSERT_TRUE(c.Send("abc"));
  Response r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "abc");
  EXPECT_TRUE(c.WaitClosed(2000));  // idle past 200 ms
}

TEST(HttpServer, BindErrorsAndJsonEscaping) {
  HttpServerOptions options;
  options.host = "not a host name";
  options.port = 0;
  HttpServer server(options);
  EXPECT_FALSE(server.Start().ok());
  EXPECT_EQ(HttpJsonError("a \"q\"\n", "t", "c"),
            "{\"error\": {\"message\": \"a \\\"q\\\"\\n\", \"type\": \"t\", \"code\": \"c\"}}");
}

}  // namespace
}  // namespace kiln

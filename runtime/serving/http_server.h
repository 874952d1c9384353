// A small HTTP/1.1 server for `kiln serve`: POSIX sockets, a thread per
// connection, keep-alive, a router, and streamed (chunked) responses for
// Server-Sent Events.
//
//   HttpServer server({.host = "127.0.0.1", .port = 0, .api_key = "sk-..."});
//   server.Handle("GET", "/v1/models", [](const HttpRequest& req, ResponseWriter& w) {
//     w.Send(200, "application/json", R"({"data": []})");
//   });
//   server.Handle("POST", "/v1/completions", [](const HttpRequest& req, ResponseWriter& w) {
//     w.StartStream(200, "text/event-stream");
//     while (generating) if (!w.Write("data: ...\n\n")) break;  // client gone
//     w.End();
//   });
//   absl::Status s = server.Start();   // binds; server.port() is the real port
//   ...
//   server.Stop();                     // or the destructor
//
// Behaviour:
//   - Requests are read with HttpRequestParser (see http_request.h); its
//     errors are answered with their status and an OpenAI-style JSON error
//     body, then the connection is closed.
//   - With an API key set, every request needs `Authorization: Bearer KEY`
//     (else 401, JSON error, code "invalid_api_key").
//   - The router matches method and exact path (the query is not part of it):
//     unknown path 404, known path with another method 405 (with Allow).
//   - A handler that returns without answering gets a 500; a stream left
//     open is ended.
//   - At most max_connections connections are served at once; one more is
//     answered 503 and closed.
//   - Connections idle for idle_timeout_ms between requests are closed.
//   - Writes never raise SIGPIPE (MSG_NOSIGNAL). A write that fails (EPIPE,
//     ECONNRESET, the send timeout), or a poll showing the peer has closed or
//     hung up, marks the client gone: Write() then returns false.
//   - Stop() wakes the accept loop and the idle connections, shuts down the
//     sockets of busy ones (their Write() returns false), and joins every
//     thread. Handlers should return promptly once Write() fails.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "runtime/serving/http_request.h"

namespace kiln {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// {"error": {"message": ..., "type": ..., "code": ...}} (OpenAI's shape).
std::string HttpJsonError(std::string_view message, std::string_view type,
                          std::string_view code);

// What a handler answers with: exactly one of Send() or StartStream() ...
// Write()* ... End(). Not thread-safe: one handler thread uses it.
class ResponseWriter {
 public:
  // A whole response with Content-Length. False if the client is gone or a
  // response was already started.
  bool Send(int status, std::string_view content_type, std::string_view body,
            const HttpHeaders& extra_headers = {});
  // Send() of HttpJsonError(message, type, code) as application/json.
  bool SendError(int status, std::string_view message, std::string_view type,
                 std::string_view code);
  // Starts a streamed response: chunked transfer encoding for HTTP/1.1
  // clients (raw bytes and connection close for HTTP/1.0), with
  // Cache-Control: no-cache. False if the client is gone.
  bool StartStream(int status, std::string_view content_type,
                   const HttpHeaders& extra_headers = {});
  // Sends one chunk now (no buffering). Returns false once the client has
  // gone away; an empty chunk only checks that.
  bool Write(std::string_view chunk);
  // Ends the stream (the last chunk). False if the client is gone.
  bool End();

  // True once a write failed or the peer was seen to close.
  bool client_gone() const { return gone_; }
  // Checks the socket now (poll): true if the peer has closed or reset.
  bool CheckClientGone();
  bool started() const { return started_; }

 private:
  friend class HttpServer;
  ResponseWriter(int fd, const HttpRequest* request, bool keep_alive)
      : fd_(fd), request_(request), keep_alive_(keep_alive) {}
  bool SendAll(std::string_view bytes);
  std::string Head(int status, std::string_view content_type, const HttpHeaders& extra,
                   std::string_view framing);

  int fd_;
  const HttpRequest* request_;
  bool keep_alive_;  // connection stays open after this response
  bool started_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool ended_ = false;
  bool gone_ = false;
};

using HttpHandler = std::function<void(const HttpRequest&, ResponseWriter&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // numeric IPv4/IPv6 address or a name
  int port = 8080;                  // 0: a free port, see port()
  int max_connections = 64;         // connections served at once
  HttpParseLimits limits;
  std::string api_key;              // empty: no authentication
  int idle_timeout_ms = 60000;      // keep-alive wait for the next request
  int send_timeout_ms = 30000;      // a blocked write longer than this: gone
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes `method` `path` (exact match) to handler. Call before Start().
  void Handle(std::string method, std::string path, HttpHandler handler);

  // Binds, listens and starts the accept thread.
  absl::Status Start();
  // The bound port (the real one when options.port was 0); 0 before Start().
  int port() const { return port_; }
  // Stops accepting, closes connections, joins all threads. Idempotent.
  void Stop();

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  struct Route {
    std::string method, path;
    HttpHandler handler;
  };

  void AcceptLoop();
  void Serve(Connection* conn);
  void Dispatch(const HttpRequest& request, ResponseWriter& writer);
  void ReapFinished(bool all);

  HttpServerOptions options_;
  std::vector<Route> routes_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};  // written once by Stop(): wakes every poll
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::thread accept_thread_;
  std::mutex mu_;  // guards connections_
  std::list<std::unique_ptr<Connection>> connections_;
};

}  // namespace kiln

#include "runtime/serving/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

namespace kiln {
namespace {

#ifdef POLLRDHUP
constexpr short kPollPeerClosed = POLLRDHUP;
#else
constexpr short kPollPeerClosed = 0;
#endif

std::string ErrnoText(int err) { return std::string(std::strerror(err)); }

bool SafeHeaderText(std::string_view s) {
  for (char c : s)
    if (c == '\r' || c == '\n' || c == '\0') return false;
  return true;
}

std::string_view ErrorCodeFor(int status) {
  switch (status) {
    case 400: return "bad_request";
    case 401: return "invalid_api_key";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 413: return "request_too_large";
    case 431: return "headers_too_large";
    case 500: return "internal_error";
    case 501: return "not_implemented";
    case 503: return "server_busy";
    case 505: return "http_version_not_supported";
    default: return "error";
  }
}

std::string_view ErrorTypeFor(int status) {
  return status >= 500 && status != 501 && status != 505 ? "server_error"
                                                         : "invalid_request_error";
}

// A whole error response (JSON body) that closes the connection.
std::string ErrorResponse(int status, std::string_view message) {
  std::string body = HttpJsonError(message, ErrorTypeFor(status), ErrorCodeFor(status));
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(HttpReasonPhrase(status)) +
                    "\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  out += body;
  return out;
}

bool SendBytes(int fd, std::string_view bytes, int extra_flags = 0) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | extra_flags);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;  // EPIPE, ECONNRESET, EAGAIN after SO_SNDTIMEO, ...
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Closes after sending: half-closes, then reads and drops what the client is
// still sending for up to linger_ms, so that its unread request does not turn
// our close into a reset that loses the response on its side.
void LingerClose(int fd, int linger_ms) {
  ::shutdown(fd, SHUT_WR);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(linger_ms);
  char sink[4096];
  size_t drained = 0;
  while (drained < (1u << 20)) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

std::string HttpJsonError(std::string_view message, std::string_view type,
                          std::string_view code) {
  auto quote = [](std::string_view s) {
    std::string out = "\"";
    for (unsigned char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", c);
            out += esc;
          } else {
            out += static_cast<char>(c);
          }
      }
    }
    return out + "\"";
  };
  return "{\"error\": {\"message\": " + quote(message) + ", \"type\": " + quote(type) +
         ", \"code\": " + quote(code) + "}}";
}

// ---------------------------------------------------------------------------
// ResponseWriter

bool ResponseWriter::SendAll(std::string_view bytes) {
  if (gone_) return false;
  if (!SendBytes(fd_, bytes)) gone_ = true;
  return !gone_;
}

bool ResponseWriter::CheckClientGone() {
  if (gone_) return true;
  pollfd p{fd_, static_cast<short>(POLLIN | kPollPeerClosed), 0};
  int r = ::poll(&p, 1, 0);
  if (r > 0) {
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | kPollPeerClosed)) {
      gone_ = true;
    } else if (p.revents & POLLIN) {
      char c;
      ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) gone_ = true;
      // n > 0: the client sent more (a pipelined request); still there.
    }
  }
  return gone_;
}

std::string ResponseWriter::Head(int status, std::string_view content_type,
                                 const HttpHeaders& extra, std::string_view framing) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(HttpReasonPhrase(status)) + "\r\n";
  if (!content_type.empty() && SafeHeaderText(content_type))
    out += "Content-Type: " + std::string(content_type) + "\r\n";
  out += framing;
  out += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : extra)
    if (!name.empty() && SafeHeaderText(name) && SafeHeaderText(value))
      out += name + ": " + value + "\r\n";
  out += "\r\n";
  return out;
}

bool ResponseWriter::Send(int status, std::string_view content_type, std::string_view body,
                          const HttpHeaders& extra_headers) {
  if (started_ || gone_) return false;
  started_ = true;
  ended_ = true;
  std::string out = Head(status, content_type, extra_headers,
                         "Content-Length: " + std::to_string(body.size()) + "\r\n");
  if (request_ == nullptr || request_->method != "HEAD") out.append(body.data(), body.size());
  return SendAll(out);
}

bool ResponseWriter::SendError(int status, std::string_view message, std::string_view type,
                               std::string_view code) {
  return Send(status, "application/json", HttpJsonError(message, type, code));
}

bool ResponseWriter::StartStream(int status, std::string_view content_type,
                                 const HttpHeaders& extra_headers) {
  if (started_ || gone_) return false;
  started_ = true;
  streaming_ = true;
  chunked_ = request_ == nullptr || request_->version_minor >= 1;
  if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the close ends the body
  std::string framing = "Cache-Control: no-cache\r\n";
  if (chunked_) framing += "Transfer-Encoding: chunked\r\n";
  return SendAll(Head(status, content_type, extra_headers, framing));
}

bool ResponseWriter::Write(std::string_view chunk) {
  if (!streaming_ || ended_ || gone_) return false;
  if (CheckClientGone()) return false;
  if (chunk.empty()) return true;
  if (!chunked_) return SendAll(chunk);
  char size_line[24];
  int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", chunk.size());
  std::string out;
  out.reserve(static_cast<size_t>(n) + chunk.size() + 2);
  out.append(size_line, static_cast<size_t>(n));
  out.append(chunk.data(), chunk.size());
  out += "\r\n";
  return SendAll(out);
}

bool ResponseWriter::End() {
  if (!streaming_ || ended_) return false;
  ended_ = true;
  if (gone_) return false;
  return chunked_ ? SendAll("0\r\n\r\n") : true;
}

// ---------------------------------------------------------------------------
// HttpServer

HttpServer::HttpServer(HttpServerOptions options) : options_(std::move(options)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string method, std::string path, HttpHandler handler) {
  routes_.push_back({std::move(method), std::move(path), std::move(handler)});
}

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer already started");
  if (options_.port < 0 || options_.port > 65535)
    return absl::InvalidArgumentError("port out of range: " + std::to_string(options_.port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(options_.port);
  int gai = ::getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(),
                          port_text.c_str(), &hints, &found);
  if (gai != 0)
    return absl::InvalidArgumentError("cannot resolve host '" + options_.host +
                                      "': " + ::gai_strerror(gai));
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last_error = "socket: " + ErrnoText(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) break;
    last_error = "bind/listen: " + ErrnoText(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  if (fd < 0)
    return absl::UnavailableError("cannot listen on " + options_.host + ":" + port_text + ": " +
                                  last_error);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    ::close(fd);
    return absl::InternalError("getsockname: " + ErrnoText(errno));
  }
  port_ = bound.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
              : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(fd);
    return absl::InternalError("pipe: " + ErrnoText(errno));
  }
  listen_fd_ = fd;
  started_ = true;
  stopping_ = false;
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (!started_ || stopping_.exchange(true)) return;
  char byte = 1;
  while (::write(wake_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::unique_ptr<Connection>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& conn : connections_)
      if (conn->fd >= 0) ::shutdown(conn->fd, SHUT_RDWR);  // busy ones: writes fail
    all.swap(connections_);
  }
  for (auto& conn : all)
    if (conn->thread.joinable()) conn->thread.join();
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
  listen_fd_ = wake_pipe_[0] = wake_pipe_[1] = -1;
  started_ = false;
}

void HttpServer::ReapFinished(bool all) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (all || (*it)->done.load()) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void HttpServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    int r = ::poll(fds, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0 || stopping_.load()) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;  // EAGAIN, ECONNABORTED, EINTR, ...
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (options_.send_timeout_ms > 0) {
      timeval tv{};
      tv.tv_sec = options_.send_timeout_ms / 1000;
      tv.tv_usec = (options_.send_timeout_ms % 1000) * 1000;
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    // A client that closes one connection and opens the next at once often
    // arrives before the closed one's thread has seen the close: at the
    // bound, finishing connections get a moment before this one is refused.
    ReapFinished(false);
    std::unique_lock<std::mutex> lock(mu_);
    for (int wait = 0; wait < 20 && static_cast<int>(connections_.size()) >= options_.max_connections; ++wait) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ReapFinished(false);
      lock.lock();
    }
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      lock.unlock();
      SendBytes(fd, ErrorResponse(503, "too many connections; try again later"), MSG_DONTWAIT);
      LingerClose(fd, 100);
      ::close(fd);
      continue;
    }
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    Connection* raw = conn.get();
    connections_.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void HttpServer::Serve(Connection* conn) {
  const int fd = conn->fd;
  HttpRequestParser parser(options_.limits);
  char buf[16 * 1024];
  bool graceful = false;  // answered an error: linger before closing
  while (!stopping_.load()) {
    HttpParseResult r = parser.Parse("");
    bool closed = false;
    while (r.kind == HttpParseResult::kNeedMore) {
      if (r.send_continue && !SendBytes(fd, "HTTP/1.1 100 Continue\r\n\r\n")) {
        closed = true;
        break;
      }
      pollfd fds[2] = {{fd, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
      int pr = ::poll(fds, 2, options_.idle_timeout_ms > 0 ? options_.idle_timeout_ms : -1);
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0 || fds[1].revents != 0) {  // error, idle timeout, or Stop()
        closed = true;
        break;
      }
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        closed = true;
        break;
      }
      r = parser.Parse(std::string_view(buf, static_cast<size_t>(n)));
    }
    if (closed) break;
    if (r.kind == HttpParseResult::kError) {
      SendBytes(fd, ErrorResponse(r.status, r.message));
      graceful = true;
      break;
    }
    const HttpRequest& request = r.request;
    ResponseWriter writer(fd, &request, request.keep_alive && !stopping_.load());
    Dispatch(request, writer);
    if (!writer.started_) {
      writer.SendError(500, "the handler did not answer", "server_error", "internal_error");
    } else if (writer.streaming_ && !writer.ended_) {
      writer.End();
    }
    if (writer.gone_ || !writer.keep_alive_) {
      graceful = !writer.gone_;
      break;
    }
  }
  if (graceful) LingerClose(fd, 500);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ::close(fd);
    conn->fd = -1;
  }
  conn->done.store(true);
}

void HttpServer::Dispatch(const HttpRequest& request, ResponseWriter& writer) {
  if (!options_.api_key.empty()) {
    std::optional<std::string_view> auth = request.Header("authorization");
    bool ok = false;
    if (auth.has_value() && auth->size() > 7) {
      std::string scheme(auth->substr(0, 7));
      for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      ok = scheme == "bearer " && ConstantTimeEquals(auth->substr(7), options_.api_key);
    }
    if (!ok) {
      writer.Send(401, "application/json",
                  HttpJsonError(auth.has_value() ? "Incorrect API key provided."
                                                 : "Missing API key: send 'Authorization: Bearer KEY'.",
                                "invalid_request_error", "invalid_api_key"),
                  {{"WWW-Authenticate", "Bearer"}});
      return;
    }
  }
  std::string allow;
  for (const Route& route : routes_) {
    if (route.path != request.path) continue;
    if (route.method == request.method) {
      try {
        route.handler(request, writer);
      } catch (const std::exception& e) {
        if (!writer.started_)
          writer.SendError(500, std::string("handler failed: ") + e.what(), "server_error",
                           "internal_error");
      }
      return;
    }
    if (!allow.empty()) allow += ", ";
    allow += route.method;
  }
  if (!allow.empty()) {
    writer.Send(405, "application/json",
                HttpJsonError("method " + request.method + " not allowed on " + request.path,
                              "invalid_request_error", "method_not_allowed"),
                {{"Allow", allow}});
    return;
  }
  writer.SendError(404, "no route for " + request.method + " " + request.path,
                   "invalid_request_error", "not_found");
}

}  // namespace kiln

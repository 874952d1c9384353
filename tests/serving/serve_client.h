// A `kiln serve` child process on a free loopback port and a minimal HTTP/1.1
// client for it, for the serving tests that go through the real binary.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace kiln::testing {

// Starts `kiln serve ARGS --port 0` and waits for its "listening on" line;
// port() is 0 when it did not start. SIGTERM and reaped on destruction.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& args) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      std::vector<std::string> all = {KILN_EXE, "serve"};
      all.insert(all.end(), args.begin(), args.end());
      all.insert(all.end(), {"--port", "0"});
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(KILN_EXE, argv.data());
      _exit(127);
    }
    close(out[1]);
    fd_ = out[0];
    std::string line;
    char c;
    while (read(fd_, &c, 1) == 1) {
      if (c != '\n') {
        line += c;
        continue;
      }
      banner_ += line + "\n";
      constexpr char kListening[] = "listening on http://127.0.0.1:";
      if (const size_t at = line.find(kListening); at != std::string::npos) {
        port_ = std::atoi(line.c_str() + at + sizeof(kListening) - 1);
        break;
      }
      line.clear();
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status;
      waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  int port() const { return port_; }
  // What it printed up to the listening line.
  const std::string& banner() const { return banner_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int fd_ = -1;
  std::string banner_;
};

struct HttpReply {
  int status = 0;
  std::string body;  // de-chunked
};

// A connected loopback socket to `port`, or -1.
inline int LoopbackConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One request on a fresh loopback connection (Connection: close), read to
// the end; status 0 when nothing came back. `extra_headers`: whole lines,
// each ending in CRLF.
inline HttpReply HttpCall(int port, const std::string& method, const std::string& path,
                          const std::string& body = "", const std::string& extra_headers = "") {
  HttpReply r;
  const int fd = LoopbackConnect(port);
  if (fd < 0) return r;
  const std::string req = method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" +
                          extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.size() < 12) return r;
  r.status = std::atoi(raw.c_str() + 9);
  const std::string rest = raw.substr(head_end + 4);
  if (raw.substr(0, head_end).find("chunked") == std::string::npos) {
    r.body = rest;
    return r;
  }
  for (size_t pos = 0; pos < rest.size();) {
    const size_t eol = rest.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::strtoul(rest.c_str() + pos, nullptr, 16);
    if (len == 0) break;
    r.body += rest.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return r;
}

}  // namespace kiln::testing

// An incremental, strict HTTP/1.1 request parser (RFC 9112 subset) for the
// `kiln serve` HTTP server.
//
//   HttpRequestParser parser({.max_header_bytes = 16384, .max_body_bytes = 1 << 20});
//   HttpParseResult r = parser.Parse(bytes_from_socket);
//   switch (r.kind) {
//     case HttpParseResult::kNeedMore: read more, Parse(more); break;
//     case HttpParseResult::kComplete: handle r.request; Parse("") again for
//                                      pipelined bytes already buffered; break;
//     case HttpParseResult::kError:    answer r.status, r.message; close.
//   }
//
// Bytes may arrive split anywhere; the result does not depend on the split.
// What is accepted:
//   - request line `METHOD SP origin-form SP HTTP/1.x` (method a token, target
//     starting with '/', visible ASCII only); HTTP/1.0 and HTTP/1.1 (1.x with
//     x > 1 is read as 1.1); another major version is 505. Empty lines before
//     the request line are skipped (RFC 9112 2.2).
//   - lines end with CRLF; a bare LF or CR is 400.
//   - header fields `token ":" OWS value OWS`; names are compared
//     case-insensitively (stored lower-cased); whitespace before the colon,
//     obs-fold continuation lines and control characters in values are 400.
//   - HTTP/1.1 needs exactly one Host header (400 otherwise).
//   - bodies by Content-Length only (digits; repeated headers must agree).
//     Transfer-Encoding (chunked) request bodies are NOT supported: 501, or
//     400 when Content-Length is also present (smuggling guard). A request
//     without Content-Length has an empty body.
//   - limits: the request line plus headers (through the empty line) over
//     max_header_bytes is 431; a Content-Length over max_body_bytes is 413,
//     reported as soon as the headers end, before the body is read.
// 404/405 are left to the router. After an error the parser stays in error:
// the connection should be answered and closed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

struct HttpParseLimits {
  size_t max_header_bytes = 16 * 1024;       // request line + headers + CRLFs
  size_t max_body_bytes = 8 * 1024 * 1024;   // Content-Length bound
};

struct HttpRequest {
  std::string method;   // as sent (case-sensitive), e.g. "GET"
  std::string target;   // the whole request-target, e.g. "/v1/models?x=1"
  std::string path;     // target before '?', e.g. "/v1/models"
  std::string query;    // target after '?', without it ("" when none)
  int version_minor = 1;  // HTTP/1.<minor>: 0 or 1
  // In order of arrival; names lower-cased, values trimmed of OWS.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool keep_alive = true;  // from the version and the Connection header
  bool expect_continue = false;  // sent "Expect: 100-continue"

  // First value of the header `name` (any case), or nullopt.
  std::optional<std::string_view> Header(std::string_view name) const;
};

struct HttpParseResult {
  enum Kind { kNeedMore, kComplete, kError };
  Kind kind = kNeedMore;
  HttpRequest request;      // kComplete
  int status = 0;           // kError: 400, 413, 431, 501, 505
  std::string message;      // kError: why, for the client
  // kNeedMore, once per request: the headers are in, asked for
  // "100-continue", and the body has not all arrived; the server should send
  // "HTTP/1.1 100 Continue\r\n\r\n".
  bool send_continue = false;
};

class HttpRequestParser {
 public:
  explicit HttpRequestParser(HttpParseLimits limits = {});

  // Appends `bytes` and parses as far as possible. On kComplete the request's
  // bytes are consumed; bytes after it stay buffered for the next call
  // (pipelining), so call Parse("") before reading more from the socket.
  HttpParseResult Parse(std::string_view bytes);

  // Bytes buffered and not yet part of a returned request.
  size_t buffered() const { return buf_.size(); }
  // True once an error was returned (every later call returns it again).
  bool failed() const { return error_status_ != 0; }

 private:
  enum class Stage { kRequestLine, kHeaders, kBody };
  HttpParseResult Fail(int status, std::string message);
  HttpParseResult ParseRequestLine(std::string_view line);
  HttpParseResult ParseHeaderLine(std::string_view line);
  HttpParseResult FinishHeaders();
  void ResetForNext();

  HttpParseLimits limits_;
  std::string buf_;
  size_t pos_ = 0;           // parsed up to here in buf_
  Stage stage_ = Stage::kRequestLine;
  HttpRequest req_;
  size_t content_length_ = 0;
  bool has_content_length_ = false;
  bool has_transfer_encoding_ = false;
  int host_count_ = 0;
  bool continue_sent_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

// The reason phrase of a status code ("Not Found"), "Unknown" if not known.
std::string_view HttpReasonPhrase(int status);

}  // namespace kiln

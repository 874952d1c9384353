#include "runtime/serving/http_request.h"

#include <cstdint>
#include <limits>

namespace kiln {
namespace {

bool IsTchar(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!IsTchar(c)) return false;
  return true;
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string LowerCopy(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (Lower(a[i]) != Lower(b[i])) return false;
  return true;
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls f(token) for each comma-separated element of a header list value.
template <typename F>
void ForEachListElement(std::string_view value, F f) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = TrimOws(value.substr(0, comma));
    if (!item.empty()) f(item);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
}

}  // namespace

std::optional<std::string_view> HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (EqualsIgnoreCase(key, name)) return std::string_view(value);
  return std::nullopt;
}

HttpRequestParser::HttpRequestParser(HttpParseLimits limits) : limits_(limits) {}

HttpParseResult HttpRequestParser::Fail(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
  HttpParseResult r;
  r.kind = HttpParseResult::kError;
  r.status = error_status_;
  r.message = error_message_;
  return r;
}

void HttpRequestParser::ResetForNext() {
  pos_ = 0;
  stage_ = Stage::kRequestLine;
  req_ = HttpRequest();
  content_length_ = 0;
  has_content_length_ = false;
  has_transfer_encoding_ = false;
  host_count_ = 0;
  continue_sent_ = false;
}

HttpParseResult HttpRequestParser::Parse(std::string_view bytes) {
  if (error_status_ != 0) {
    HttpParseResult r;
    r.kind = HttpParseResult::kError;
    r.status = error_status_;
    r.message = error_message_;
    return r;
  }
  buf_.append(bytes.data(), bytes.size());

  // Request line and headers, one CRLF-terminated line at a time.
  while (stage_ != Stage::kBody) {
    size_t eol = buf_.find_first_of("\r\n", pos_);
    if (eol == std::string::npos || (buf_[eol] == '\r' && eol + 1 == buf_.size())) {
      // No complete line yet: the partial line already counts.
      if (buf_.size() > limits_.max_header_bytes)
        return Fail(431, "request line and headers exceed " +
                             std::to_string(limits_.max_header_bytes) + " bytes");
      return HttpParseResult{};
    }
    // Bytes the parser holds before it can judge this line end (one past a
    // CR): beyond the limit, byte-by-byte arrival would have failed with 431
    // first, so the whole-buffer case must too.
    if ((buf_[eol] == '\n' ? eol : eol + 1) > limits_.max_header_bytes)
      return Fail(431, "request line and headers exceed " +
                           std::to_string(limits_.max_header_bytes) + " bytes");
    if (buf_[eol] == '\n') return Fail(400, "line ends with a bare LF (CRLF required)");
    if (buf_[eol + 1] != '\n') return Fail(400, "bare CR in the request head");
    std::string_view line(buf_.data() + pos_, eol - pos_);
    pos_ = eol + 2;
    if (pos_ > limits_.max_header_bytes)
      return Fail(431, "request line and headers exceed " +
                           std::to_string(limits_.max_header_bytes) + " bytes");
    HttpParseResult r;
    if (stage_ == Stage::kRequestLine) {
      if (line.empty()) continue;  // empty lines before a request are ignored
      r = ParseRequestLine(line);
      if (r.kind == HttpParseResult::kError) return r;
      stage_ = Stage::kHeaders;
    } else if (line.empty()) {
      r = FinishHeaders();
      if (r.kind == HttpParseResult::kError) return r;
      stage_ = Stage::kBody;
    } else {
      r = ParseHeaderLine(line);
      if (r.kind == HttpParseResult::kError) return r;
    }
  }

  // Body by Content-Length.
  if (buf_.size() - pos_ < content_length_) {
    HttpParseResult r;
    if (req_.expect_continue && !continue_sent_) {
      continue_sent_ = true;
      r.send_continue = true;
    }
    return r;
  }
  HttpParseResult r;
  r.kind = HttpParseResult::kComplete;
  req_.body = buf_.substr(pos_, content_length_);
  buf_.erase(0, pos_ + content_length_);
  r.request = std::move(req_);
  ResetForNext();
  return r;
}

HttpParseResult HttpRequestParser::ParseRequestLine(std::string_view line) {
  size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return Fail(400, "malformed request line");
  std::string_view method = line.substr(0, sp1);
  if (!IsToken(method)) return Fail(400, "malformed request method");
  size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return Fail(400, "malformed request line");
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (target.empty() || target.front() != '/')
    return Fail(400, "request target must be an absolute path (origin-form)");
  for (unsigned char c : target)
    if (c < 0x21 || c > 0x7e) return Fail(400, "invalid character in request target");
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !digit(version[5]) ||
      version[6] != '.' || !digit(version[7]))
    return Fail(400, "malformed HTTP version");
  if (version[5] != '1') return Fail(505, "HTTP version not supported (HTTP/1.x only)");
  req_.method = std::string(method);
  req_.target = std::string(target);
  size_t q = target.find('?');
  req_.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) req_.query = std::string(target.substr(q + 1));
  req_.version_minor = version[7] == '0' ? 0 : 1;
  return HttpParseResult{};
}

HttpParseResult HttpRequestParser::ParseHeaderLine(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t')
    return Fail(400, "obsolete header line folding is not accepted");
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return Fail(400, "header line without ':'");
  std::string_view name = line.substr(0, colon);
  if (!IsToken(name)) return Fail(400, "malformed header name");
  std::string_view value = TrimOws(line.substr(colon + 1));
  for (unsigned char c : value)
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return Fail(400, "control character in header value");
  std::string key = LowerCopy(name);

  if (key == "content-length") {
    if (value.empty()) return Fail(400, "empty Content-Length");
    size_t n = 0;
    bool overflow = false;
    for (char c : value) {
      if (c < '0' || c > '9') return Fail(400, "malformed Content-Length");
      size_t d = static_cast<size_t>(c - '0');
      if (n > (std::numeric_limits<size_t>::max() - d) / 10) overflow = true;
      else n = n * 10 + d;
    }
    if (overflow) n = std::numeric_limits<size_t>::max();
    if (has_content_length_ && n != content_length_)
      return Fail(400, "conflicting Content-Length headers");
    has_content_length_ = true;
    content_length_ = n;
  } else if (key == "transfer-encoding") {
    has_transfer_encoding_ = true;
  } else if (key == "host") {
    ++host_count_;
  } else if (key == "expect") {
    if (EqualsIgnoreCase(value, "100-continue")) req_.expect_continue = true;
  }
  req_.headers.emplace_back(std::move(key), std::string(value));
  return HttpParseResult{};
}

HttpParseResult HttpRequestParser::FinishHeaders() {
  if (has_transfer_encoding_) {
    if (has_content_length_)
      return Fail(400, "both Transfer-Encoding and Content-Length");
    return Fail(501, "Transfer-Encoding request bodies (chunked) are not supported; "
                     "send Content-Length");
  }
  if (req_.version_minor == 1 && host_count_ != 1)
    return Fail(400, host_count_ == 0 ? "missing Host header" : "more than one Host header");
  if (host_count_ > 1) return Fail(400, "more than one Host header");
  if (content_length_ > limits_.max_body_bytes)
    return Fail(413, "request body exceeds " + std::to_string(limits_.max_body_bytes) +
                         " bytes");
  bool close = false, keep = false;
  for (const auto& [key, value] : req_.headers) {
    if (key != "connection") continue;
    ForEachListElement(value, [&](std::string_view token) {
      if (EqualsIgnoreCase(token, "close")) close = true;
      if (EqualsIgnoreCase(token, "keep-alive")) keep = true;
    });
  }
  req_.keep_alive = !close && (req_.version_minor == 1 || keep);
  return HttpParseResult{};
}

std::string_view HttpReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace kiln

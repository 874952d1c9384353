// Feeds arbitrary bytes to the HTTP request parser, whole and in pieces (cut
// where the first byte says, and one byte at a time), and checks that the
// outcome does not depend on the split: the same requests, then the same
// final state and error status. Statuses must be ones the parser documents.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/serving/http_request.h"

namespace {

struct Outcome {
  std::vector<kiln::HttpRequest> requests;
  kiln::HttpParseResult::Kind last = kiln::HttpParseResult::kNeedMore;
  int status = 0;
};

Outcome Run(std::string_view input, size_t step) {
  kiln::HttpRequestParser parser({.max_header_bytes = 2048, .max_body_bytes = 4096});
  Outcome out;
  for (size_t start = 0; start < input.size() || start == 0; start += step) {
    kiln::HttpParseResult r = parser.Parse(input.substr(start, step));
    while (r.kind == kiln::HttpParseResult::kComplete) {
      out.requests.push_back(std::move(r.request));
      r = parser.Parse("");
    }
    out.last = r.kind;
    out.status = r.status;
    if (r.kind == kiln::HttpParseResult::kError) {
      if (r.message.empty()) __builtin_trap();
      break;
    }
    if (input.empty()) break;
  }
  return out;
}

bool Same(const Outcome& a, const Outcome& b) {
  if (a.last != b.last || a.status != b.status || a.requests.size() != b.requests.size())
    return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const kiln::HttpRequest& x = a.requests[i];
    const kiln::HttpRequest& y = b.requests[i];
    if (x.method != y.method || x.target != y.target || x.path != y.path ||
        x.query != y.query || x.version_minor != y.version_minor || x.headers != y.headers ||
        x.body != y.body || x.keep_alive != y.keep_alive)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const Outcome whole = Run(input, input.size() + 1);
  switch (whole.status) {
    case 0: case 400: case 413: case 431: case 501: case 505: break;
    default: __builtin_trap();
  }
  for (const kiln::HttpRequest& r : whole.requests) {
    if (r.body.size() > 4096 || r.path.empty() || r.path[0] != '/') __builtin_trap();
  }
  const size_t step = size > 0 ? 1 + data[0] % 64 : 1;
  if (!Same(whole, Run(input, step))) __builtin_trap();
  if (size <= 4096 && !Same(whole, Run(input, 1))) __builtin_trap();
  return 0;
}

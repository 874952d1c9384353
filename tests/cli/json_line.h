// The JSON object a kiln command prints with --output-format json: the one
// line of its output that starts with '{' (stderr, merged in by RunKiln,
// carries progress lines).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/util/json.h"

namespace kiln::testing {

inline absl::StatusOr<JsonValue> JsonLine(const std::string& output) {
  for (size_t start = 0; start < output.size();) {
    const size_t end = output.find('\n', start);
    const std::string line = output.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!line.empty() && line[0] == '{') return ParseJson(line);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return absl::NotFoundError("no JSON line in the output");
}

}  // namespace kiln::testing

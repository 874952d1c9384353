#include "tools/kiln/input_file.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace kiln::cli {

absl::StatusOr<std::string> ReadInputFile(const std::string& path, const std::string& what) {
  const bool from_stdin = path == "-";
  std::FILE* f = from_stdin ? stdin : std::fopen(path.c_str(), "rb");
  const std::string error = absl::StrCat(from_stdin ? "standard input" : path, ": cannot read",
                                         what.empty() ? "" : absl::StrCat(" the ", what));
  if (f == nullptr) return absl::NotFoundError(error);
  std::string bytes;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) bytes.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  if (!from_stdin) std::fclose(f);
  if (failed) return absl::DataLossError(error);
  return bytes;
}

}  // namespace kiln::cli

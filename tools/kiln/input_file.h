// Reading a whole input file for a subcommand (a prompt, a text to tokenize,
// the peers' notes): its bytes as they are, "-" meaning standard input.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kiln::cli {

// The bytes of `path` ("-": standard input, read to its end), or an error
// "PATH: cannot read" (with "the WHAT" after it where `what` is given).
absl::StatusOr<std::string> ReadInputFile(const std::string& path, const std::string& what = "");

}  // namespace kiln::cli

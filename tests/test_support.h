// Locating shared test data and skipping cleanly where it is absent.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kiln::testing {

// ../shared/testdata (or $KILN_TESTDATA).
std::filesystem::path TestDataDir();
// TestDataDir() / rel; empty path if the file does not exist.
std::filesystem::path TestDataFile(const std::string& rel);
// $KILN_MODELS or ~/.cache/kiln/models.
std::filesystem::path ModelCacheDir();
std::string ReadFileOrDie(const std::filesystem::path& path);
// A fresh empty folder under the build tree for one test.
std::filesystem::path ScratchDir(const std::string& name);

}  // namespace kiln::testing

// Skips the current test (with the reason) when a data file is missing.
#define KILN_REQUIRE_TESTDATA(var, rel)                                              \
  const std::filesystem::path var = ::kiln::testing::TestDataFile(rel);              \
  if (var.empty()) {                                                                 \
    GTEST_SKIP() << "test data " << (rel) << " not found under "                   \
                 << ::kiln::testing::TestDataDir() << " (set KILN_TESTDATA)";        \
  }

namespace kiln::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs the built `kiln` binary with `args` (a shell-quoted string).
CommandResult RunKiln(const std::string& args);
// Shell-quotes one argument.
std::string Quote(const std::string& s);

}  // namespace kiln::testing

// Locating shared test data and skipping cleanly where it is absent.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

// ../shared/testdata (or $KILN_TESTDATA).
std::filesystem::path TestDataDir();
// TestDataDir() / rel; empty path if the file does not exist.
std::filesystem::path TestDataFile(const std::string& rel);
// $KILN_MODELS or ~/.cache/kiln/models.
std::filesystem::path ModelCacheDir();
std::string ReadFileOrDie(const std::filesystem::path& path);
// ||got - want|| / ||want|| in double (||got - want|| where want is all zero).
double RelativeL2(std::span<const float> got, std::span<const float> want);
// A fresh empty folder under the build tree, unique to the running test and
// process (`name` makes it readable).
std::filesystem::path ScratchDir(const std::string& name);

// Sets (or, with nullptr, unsets) an environment variable for its lifetime
// and puts the earlier value back when it ends, so a test that stops at a
// failed ASSERT leaves no switch on for the tests after it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_old_ = false;
};

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

namespace kiln::testing {

// ---- Writing model files ----

// One tensor of a safetensors file: `data` holds its raw little-endian bytes.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  std::string data;
};

// A well-formed safetensors file the way the reference writer lays it out:
// tensors back to back in order, header (with `metadata` as __metadata__ when
// non-empty) padded with spaces to a multiple of 8.
std::string SafetensorsBytes(const std::vector<SafetensorsEntry>& tensors,
                             const std::vector<std::pair<std::string, std::string>>& metadata = {});
// The raw bytes of `values` (native, i.e. little-endian, F32).
std::string F32Bytes(const std::vector<float>& values);
// Writes `bytes` to `path`, replacing it; ADD_FAILURE on error.
void WriteBinaryFile(const std::filesystem::path& path, const std::string& bytes);

}  // namespace kiln::testing

// Skips a test that needs the compiler in a kiln built without it (tests
// get KILN_OPT, the kiln-opt path, when the compiler is built).
#ifndef KILN_OPT
#define SKIP_WITHOUT_COMPILER() GTEST_SKIP() << "kiln was built without the compiler (KILN_BUILD_COMPILER=OFF)"
#else
#define SKIP_WITHOUT_COMPILER() (void)0
#endif

#include "tests/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "runtime/util/json.h"

namespace kiln::testing {

std::filesystem::path TestDataDir() {
  if (const char* env = std::getenv("KILN_TESTDATA"); env != nullptr && *env != '\0') return env;
  return KILN_DEFAULT_TESTDATA;
}

std::filesystem::path TestDataFile(const std::string& rel) {
  std::filesystem::path p = TestDataDir() / rel;
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

std::filesystem::path ModelCacheDir() {
  if (const char* env = std::getenv("KILN_MODELS"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home ? home : "/tmp") / ".cache/kiln/models";
}

std::string ReadFileOrDie(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name); old != nullptr) {
    had_old_ = true;
    old_ = old;
  }
  if (value != nullptr) {
    ::setenv(name, value, 1);
  } else {
    ::unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (had_old_) {
    ::setenv(name_.c_str(), old_.c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

std::filesystem::path ScratchDir(const std::string& name) {
  // ctest runs the tests of one binary in parallel processes: the folder is
  // unique per test and process, whatever name the test asks for.
  std::string unique = name;
  if (const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    unique += std::string("-") + info->test_suite_name() + "." + info->name();
  }
  for (char& c : unique) {
    if (c == '/') c = '_';
  }
  unique += "-" + std::to_string(::getpid());
  std::filesystem::path p = std::filesystem::path(KILN_BINARY_DIR) / "test-scratch" / unique;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace kiln::testing

namespace kiln::testing {

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

CommandResult RunKiln(const std::string& args) {
  CommandResult r;
  const std::string cmd = std::string(KILN_EXE) + " " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace kiln::testing

namespace kiln::testing {

std::string SafetensorsBytes(const std::vector<SafetensorsEntry>& tensors,
                             const std::vector<std::pair<std::string, std::string>>& metadata) {
  JsonValue header = JsonValue::MakeObject();
  if (!metadata.empty()) {
    JsonValue meta = JsonValue::MakeObject();
    for (const auto& [key, value] : metadata) meta.Insert(key, JsonValue::String(value));
    header.Insert("__metadata__", std::move(meta));
  }
  std::string data;
  for (const SafetensorsEntry& tensor : tensors) {
    JsonValue entry = JsonValue::MakeObject();
    entry.Insert("dtype", JsonValue::String(tensor.dtype));
    JsonValue shape = JsonValue::MakeArray();
    for (int64_t dim : tensor.shape) shape.array().push_back(JsonValue::Int(dim));
    entry.Insert("shape", std::move(shape));
    entry.Insert("data_offsets",
                 JsonValue::MakeArray({JsonValue::Int(static_cast<int64_t>(data.size())),
                                       JsonValue::Int(static_cast<int64_t>(data.size() + tensor.data.size()))}));
    header.Insert(tensor.name, std::move(entry));
    data += tensor.data;
  }
  std::string header_text = ToJson(header);
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  file += header_text;
  file += data;
  return file;
}

std::string F32Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

void WriteBinaryFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

double RelativeL2(std::span<const float> got, std::span<const float> want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace kiln::testing

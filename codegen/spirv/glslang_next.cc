#include "codegen/spirv/glslang_next.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kiln::codegen::spirv {
namespace {

// slang-glslang's request (its glslang_CompileRequest_1_2; the layout is
// that library's ABI, versioned by the function name).
using OutputFunc = void (*)(const void* data, size_t size, void* user);
struct SpirvVersion {
  int major, minor, patch;
};
struct CompileRequest {
  size_t size_in_bytes;
  const char* source_path;
  const void* input_begin;
  const void* input_end;
  OutputFunc diagnostic_func;
  void* diagnostic_user;
  OutputFunc output_func;
  void* output_user;
  int slang_stage;  // 6: compute
  unsigned action;  // 0: GLSL to SPIR-V
  unsigned optimization_level;
  unsigned debug_info_type;
  const char* spirv_target_name;
  SpirvVersion spirv_version;
  const char* entry_point_name;
};
using CompileFn = int (*)(CompileRequest*);
using ValidateFn = bool (*)(const uint32_t*, int);

struct Library {
  absl::Status status;
  CompileFn compile = nullptr;
  ValidateFn validate = nullptr;
};

std::string DefaultPath() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = cache != nullptr ? std::string(cache) : std::string(home != nullptr ? home : "") + "/.cache";
  const std::string pattern = dir + "/kiln/slang/slangpy/libslang-glslang-*.so";
  glob_t g{};
  std::string found;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) found = g.gl_pathv[0];
  globfree(&g);
  return found.empty() ? pattern : found;
}

const Library& Load() {
  static const Library* const lib = [] {
    auto* l = new Library;
    const char* env = std::getenv("KILN_SLANG_GLSLANG");
    const std::string path = env != nullptr && *env != '\0' ? std::string(env) : DefaultPath();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      l->status = absl::UnavailableError(absl::StrCat("no libslang-glslang at ", path, " (scripts/setup.sh fetches it)"));
      return l;
    }
    l->compile = reinterpret_cast<CompileFn>(dlsym(handle, "glslang_compile_1_2"));
    l->validate = reinterpret_cast<ValidateFn>(dlsym(handle, "glslang_validateSPIRV"));
    if (l->compile == nullptr || l->validate == nullptr) {
      l->status = absl::UnavailableError(absl::StrCat(path, " lacks glslang_compile_1_2 / glslang_validateSPIRV"));
    }
    return l;
  }();
  return *lib;
}

void Append(const void* data, size_t size, void* user) {
  static_cast<std::string*>(user)->append(static_cast<const char*>(data), size);
}

}  // namespace

absl::Status GlslangNextAvailable() { return Load().status; }

absl::StatusOr<std::vector<uint32_t>> CompileGlslNext(const std::string& source, const std::string& name) {
  const Library& lib = Load();
  if (!lib.status.ok()) return lib.status;
  std::string out, diagnostics;
  CompileRequest r{};
  r.size_in_bytes = sizeof(r);
  r.source_path = name.c_str();
  r.input_begin = source.data();
  r.input_end = source.data() + source.size();
  r.diagnostic_func = Append;
  r.diagnostic_user = &diagnostics;
  r.output_func = Append;
  r.output_user = &out;
  r.slang_stage = 6;
  r.action = 0;
  r.optimization_level = 2;
  r.spirv_version = {1, 6, 0};  // cooperative_matrix2 needs SPIR-V 1.6
  r.entry_point_name = "main";
  // One compile at a time: the library keeps glslang's process state.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (lib.compile(&r) != 0 || out.empty() || out.size() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GLSL does not compile (libslang-glslang):\n", diagnostics));
  }
  std::vector<uint32_t> words(out.size() / 4);
  std::memcpy(words.data(), out.data(), out.size());
  return words;
}

absl::Status ValidateNext(const std::vector<uint32_t>& words) {
  const Library& lib = Load();
  if (!lib.status.ok()) return lib.status;
  if (!lib.validate(words.data(), static_cast<int>(words.size()))) {
    return absl::InvalidArgumentError("SPIR-V fails validation (libslang-glslang's SPIRV-Tools)");
  }
  return absl::OkStatus();
}

}  // namespace kiln::codegen::spirv

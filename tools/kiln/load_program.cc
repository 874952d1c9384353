#include "tools/kiln/load_program.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/kiln/commands.h"

namespace kiln::cli {
namespace {
InMemoryCompiler g_compiler = nullptr;
KernelCompiler g_kernel_compiler = nullptr;
}  // namespace

void SetInMemoryKernelCompiler(KernelCompiler compiler) { g_kernel_compiler = compiler; }

absl::StatusOr<SelectedBackend> StartBackend(Program& program, const BackendOptions& options) {
  if (program.artifact != nullptr) return CreateExecutor(program, options);
  return CreateExecutor(program, options, g_kernel_compiler);
}

void SetInMemoryCompiler(InMemoryCompiler compiler) { g_compiler = compiler; }

absl::Status CheckKvType(const std::string& kv_type) {
  if (kv_type == "f32" || kv_type == "f16") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("--kv-type: '%s' is not f32 or f16", kv_type));
}

absl::StatusOr<Program> LoadProgram(const std::string& model, const CompileChoices& choices,
                                    const std::string& weights) {
  if (LooksLikeArtifact(model)) {
    if (!choices.empty()) {
      // The artifact's plan fixed them when it was compiled.
      std::vector<std::string> given;
      if (!choices.quant.empty()) given.push_back("--quant");
      if (!choices.overrides.empty()) given.push_back("--override");
      if (!choices.kv_type.empty()) given.push_back("--kv-type");
      return absl::InvalidArgumentError(
          absl::StrCat(absl::StrJoin(given, ", "), given.size() == 1 ? " applies" : " apply",
                       " when compiling a GGUF; this is a compiled artifact (kiln inspect shows its weight types "
                       "and KV cache)"));
    }
    return LoadArtifactProgram(model, weights);
  }
  if (!choices.kv_type.empty()) {
    if (absl::Status s = CheckKvType(choices.kv_type); !s.ok()) return s;
  }
  if (!weights.empty()) return absl::InvalidArgumentError("--weights is for program-only artifacts, not model files");
  if (g_compiler == nullptr) {
    return absl::FailedPreconditionError(
        "this kiln was built without the compiler: compile the model elsewhere (kiln compile -o model.kiln) and run "
        "the artifact");
  }
  std::fprintf(stderr, "kiln: compiling %s in memory...", model.c_str());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> plan = g_compiler(model, choices);
  std::fprintf(stderr, plan.ok() ? " done (%.2f s)\n" : "\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!plan.ok()) return plan.status();
  return LoadGgufProgram(model, *plan);
}

ArgParser& AddModelOptions(ArgParser& args) {
  return args.Option("quant", "TYPE", "when compiling a GGUF: weight storage policy (as kiln compile --quant)")
      .Option("override", "LIST", "when compiling a GGUF: per-tensor storage, NAME_SUBSTRING=TYPE,...")
      .Option("kv-type", "TYPE", "when compiling a GGUF: KV cache element type, f32 | f16 (as kiln compile --kv-type)")
      .Option("threads", "N", "CPU threads (0: all cores)", "0")
      .Option("backend", "NAME", "auto (the fastest present: cuda, vulkan, then cpu) | cpu | cuda | vulkan", "auto")
      .Option("device", "N", "GPU index for the cuda and vulkan backends", "0")
      .Option("weights", "FILE", "for a program-only artifact: the model file to bind the weights from");
}

}  // namespace kiln::cli

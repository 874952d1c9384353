// The subcommands of the `kiln` binary. Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/program.h"

namespace kiln::cli {

int RunInspect(int argc, char** argv);
int RunTokenize(int argc, char** argv);
int RunSynth(int argc, char** argv);
// compiler/CompileCommand.cpp; only in a kiln built with the compiler.
int RunCompile(int argc, char** argv);
int RunRun(int argc, char** argv);
int RunServe(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunPerplexity(int argc, char** argv);
// What `kiln run` and `kiln serve` pass on when they compile a model in
// memory: the --quant policy, the comma-separated --override list and the
// --kv-type (empty: kiln compile's defaults).
struct CompileChoices {
  std::string quant, overrides, kv_type;
  bool empty() const { return quant.empty() && overrides.empty() && kv_type.empty(); }
};
// The KV cache element types kiln compile --kv-type takes (f32, f16).
absl::Status CheckKvType(const std::string& kv_type);
// Compiles a GGUF file or HF folder in memory to a kiln-plan-v1 JSON plan
// with the given choices. Only a kiln built with the compiler has one;
// main() hands it to `run` and `serve`.
using InMemoryCompiler = absl::StatusOr<std::string> (*)(const std::string& model, const CompileChoices& choices);
void SetInMemoryCompiler(InMemoryCompiler compiler);
absl::StatusOr<std::string> CompileToPlanJson(const std::string& model, const CompileChoices& choices);
// Compiles a plan's kernels for one GPU target in memory (codegen), saying so
// on stderr; main() hands it to the backend start of a model compiled in
// memory, so `kiln run model.gguf` runs on the GPU that is here.
// Kernels compiled before for the same plan, target and kiln binary come
// from a cache (KernelCachePath).
absl::StatusOr<std::vector<uint8_t>> CompileKernelsInMemory(const Program& program, const std::string& target);
void SetInMemoryKernelCompiler(KernelCompiler compiler);
// compile in a runtime-only kiln: says where to compile instead.
int RunCompileAbsent(int argc, char** argv);

}  // namespace kiln::cli

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
// Compiles a GGUF file or HF folder in memory to a kiln-plan-v1 JSON plan
// with the given --quant policy and comma-separated --override list. Only a kiln built with the compiler has one;
// main() hands it to `run`.
using InMemoryCompiler = absl::StatusOr<std::string> (*)(const std::string& model, const std::string& quant,
                                                         const std::string& overrides);
void SetInMemoryCompiler(InMemoryCompiler compiler);
absl::StatusOr<std::string> CompileToPlanJson(const std::string& model, const std::string& quant,
                                              const std::string& overrides);
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

// The subcommands of the `kiln` binary. Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit code.
#pragma once

#include <string>

#include "absl/status/statusor.h"

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
// compile in a runtime-only kiln: says where to compile instead.
int RunCompileAbsent(int argc, char** argv);

}  // namespace kiln::cli

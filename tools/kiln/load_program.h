// Loading a model for run and serve: a .kiln artifact directly, or a GGUF
// file (or HF folder) compiled in memory when this kiln has the compiler.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/program.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

namespace kiln::cli {

// `choices` apply only when compiling (an artifact is already compiled:
// asking for them there is an error). Prints a progress line to stderr
// while compiling.
// `weights` is the model file a program-only artifact binds its weights from.
absl::StatusOr<Program> LoadProgram(const std::string& model, const CompileChoices& choices = {},
                                    const std::string& weights = "");

// Adds the options of a command that runs a model (run, perplexity):
// --quant, --override and --kv-type for a GGUF compiled in memory, then
// --threads, --backend, --device and --weights.
ArgParser& AddModelOptions(ArgParser& args);

// Starts the backend for `program` (CreateExecutor). A model compiled in
// memory gets the kernels of the GPU backend that starts compiled here too,
// when this kiln has the compiler (commands.h: SetInMemoryKernelCompiler).
absl::StatusOr<SelectedBackend> StartBackend(Program& program, const BackendOptions& options);

}  // namespace kiln::cli

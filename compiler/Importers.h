//===- Importers.h - model files to kiln IR ---------------------*- C++ -*-===//
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/LlamaModelSpec.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace kiln {
class GgufFile;
struct HfModel;
}  // namespace kiln

namespace kiln::compiler {

// The model spec of a GGUF file: hyperparameters from its metadata, weights
// by their GGUF names. An unsupported architecture or a missing or misshapen
// tensor is an error naming what was expected.
absl::StatusOr<LlamaModelSpec> SpecFromGguf(const GgufFile& gguf);

// The same for a Hugging Face folder (config.json + safetensors).
absl::StatusOr<LlamaModelSpec> SpecFromHf(const HfModel& model, const std::string& dir);

// Builds the module: one `func.func @step` over a ragged batch (see
// docs/architecture.md, "The step function"). `max_context` bounds the KV
// cache per sequence (0: the model's trained context).
absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildStepModule(mlir::MLIRContext& context,
                                                                   const LlamaModelSpec& spec,
                                                                   int64_t max_context = 0);

// Opens a .gguf file or a Hugging Face folder and imports it.
absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> ImportModel(mlir::MLIRContext& context, const std::string& path,
                                                              int64_t max_context = 0);

}  // namespace kiln::compiler

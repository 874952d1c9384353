//===- Pipeline.h - kiln's pass pipeline ------------------------*- C++ -*-===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mlir/IR/BuiltinOps.h"

namespace kiln::compiler {

struct PipelineOptions {
  std::string quant;                   // kiln-quantize policy ("" keeps the file's types)
  std::vector<std::string> overrides;  // "NAME_SUBSTRING=TYPE"
  int64_t group_size = 128;
  int64_t page_size = 16;
  std::string kv_type = "f32";         // the KV page pool's element type: f32 | f16
  std::vector<int64_t> buckets;        // empty: the pass's default
  // Where to write the IR: one file per pass, NN-<pass>.mlir in pipeline
  // order (00-import.mlir first); empty writes nothing.
  std::string dump_dir;
  // Print remarks (quantization fallbacks, arena peaks) to stderr.
  bool print_remarks = true;
};

// The passes in order, as a textual pipeline (what --print-pipeline shows).
std::string DescribePipeline(const PipelineOptions& options);

// Runs import-to-plan passes on `module`; errors carry the diagnostics.
absl::Status RunPipeline(mlir::ModuleOp module, const PipelineOptions& options);

}  // namespace kiln::compiler

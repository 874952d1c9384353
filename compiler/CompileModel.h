//===- CompileModel.h - model file to plan, in memory ----------*- C++ -*-===//
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/Pipeline.h"

namespace kiln::compiler {

struct CompiledModel {
  std::string plan_json;  // kiln-plan-v1 (runtime/executor/plan.h)
  std::string ir_text;    // the final IR, for `kiln inspect`
  double import_seconds = 0;
  double pass_seconds = 0;
};

// Imports `path` (GGUF file or HF folder), runs the pipeline and exports the plan.
absl::StatusOr<CompiledModel> CompileModel(const std::string& path, const PipelineOptions& options,
                                           int64_t max_context = 0);

}  // namespace kiln::compiler

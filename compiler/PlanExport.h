//===- PlanExport.h - the launch plan as the runtime reads it ---*- C++ -*-===//
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "mlir/IR/BuiltinOps.h"

namespace kiln::compiler {

// Serialises the module's kiln.plan (after kiln-emit-plan) and what the
// runtime needs besides it (the step function's inputs, the KV pool, every
// weight with its storage and repack) as JSON in the "kiln-plan-v1" format
// that runtime/executor/plan.h parses. The runtime never sees MLIR.
absl::StatusOr<std::string> ExportPlan(mlir::ModuleOp module);

}  // namespace kiln::compiler

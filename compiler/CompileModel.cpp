//===- CompileModel.cpp - model file to plan, in memory -------------------===//

#include "compiler/CompileModel.h"

#include <chrono>

#include "compiler/Importers.h"
#include "compiler/PlanExport.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/MLIRContext.h"

namespace kiln::compiler {

absl::StatusOr<CompiledModel> CompileModel(const std::string& path, const PipelineOptions& options,
                                           int64_t max_context) {
  using Clock = std::chrono::steady_clock;
  mlir::MLIRContext context;
  const auto start = Clock::now();
  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> module = ImportModel(context, path, max_context);
  if (!module.ok()) return module.status();
  CompiledModel out;
  out.import_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto passes = Clock::now();
  if (absl::Status s = RunPipeline(**module, options); !s.ok()) return s;
  out.pass_seconds = std::chrono::duration<double>(Clock::now() - passes).count();
  absl::StatusOr<std::string> plan = ExportPlan(**module);
  if (!plan.ok()) return plan.status();
  out.plan_json = *std::move(plan);
  llvm::raw_string_ostream os(out.ir_text);
  (*module)->print(os);
  return out;
}

}  // namespace kiln::compiler

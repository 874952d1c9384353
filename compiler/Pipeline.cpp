//===- Pipeline.cpp - kiln's pass pipeline ----------------------------------===//
//
// fuse → quantize → paged-attention → plan-memory → emit-plan. Fusion runs
// first so quantization sees the final weight groups; paging must precede
// memory planning because it changes the attention ops' operands; the plan
// is emitted last, from the planned arena.
//
//===----------------------------------------------------------------------===//

#include "compiler/Pipeline.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "passes/Passes.h"

namespace kiln::compiler {
namespace {

absl::Status WriteModule(mlir::Operation* op, const std::string& path) {
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec, llvm::sys::fs::OF_Text);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write: ", ec.message()));
  op->print(out);
  out << "\n";
  return absl::OkStatus();
}

// Writes the module after each top-level pass as NN-<flag>.mlir.
class DumpAfterEachPass : public mlir::PassInstrumentation {
 public:
  DumpAfterEachPass(std::string dir, absl::Status* status) : dir_(std::move(dir)), status_(status) {}
  void runAfterPass(mlir::Pass* pass, mlir::Operation* op) override {
    if (!llvm::isa<mlir::ModuleOp>(op) || !status_->ok()) return;
    const std::string path = absl::StrFormat("%s/%02d-%s.mlir", dir_, ++index_, pass->getArgument().str());
    *status_ = WriteModule(op, path);
  }

 private:
  std::string dir_;
  absl::Status* status_;
  int index_ = 0;
};

std::string BucketList(const std::vector<int64_t>& buckets) { return absl::StrJoin(buckets, ","); }

}  // namespace

// The passes as the comma-separated list a module-level pass manager parses.
static std::string PassList(const PipelineOptions& o) {
  std::string quant = absl::StrFormat("kiln-quantize{quant=%s group-size=%d", o.quant, o.group_size);
  if (!o.overrides.empty()) absl::StrAppend(&quant, " override=", absl::StrJoin(o.overrides, ","));
  absl::StrAppend(&quant, "}");
  std::string plan = "kiln-plan-memory";
  if (!o.buckets.empty()) plan = absl::StrCat(plan, "{buckets=", BucketList(o.buckets), "}");
  return absl::StrCat("kiln-fuse,", quant, ",kiln-paged-attention{page-size=", o.page_size, " kv-type=", o.kv_type,
                      "},", plan, ",kiln-emit-plan");
}

std::string DescribePipeline(const PipelineOptions& o) { return absl::StrCat("builtin.module(", PassList(o), ")"); }

absl::Status RunPipeline(mlir::ModuleOp module, const PipelineOptions& options) {
  mlir::MLIRContext* ctx = module->getContext();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(ctx, [&](mlir::Diagnostic& diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error) {
      llvm::raw_string_ostream os(diagnostics);
      os << diag.getLocation() << ": " << diag << "\n";
    } else if (diag.getSeverity() == mlir::DiagnosticSeverity::Warning ||
               (diag.getSeverity() == mlir::DiagnosticSeverity::Remark && options.print_remarks)) {
      // Remarks (quantization fallbacks, arena peaks) and warnings are for the user now.
      llvm::errs() << (diag.getSeverity() == mlir::DiagnosticSeverity::Warning ? "warning: " : "remark: ") << diag
                   << "\n";
    }
    return mlir::success();
  });

  absl::Status dump_status = absl::OkStatus();
  if (!options.dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.dump_dir, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat(options.dump_dir, ": cannot create: ", ec.message()));
    if (absl::Status s = WriteModule(module, options.dump_dir + "/00-import.mlir"); !s.ok()) return s;
  }

  static const bool registered = [] {
    mlir::kiln::registerKilnPasses();
    return true;
  }();
  (void)registered;
  mlir::PassManager pm(ctx);
  if (!options.dump_dir.empty()) {
    pm.addInstrumentation(std::make_unique<DumpAfterEachPass>(options.dump_dir, &dump_status));
  }
  if (mlir::failed(mlir::parsePassPipeline(PassList(options), pm))) {
    return absl::InvalidArgumentError(absl::StrCat("bad pass options: ", diagnostics));
  }
  if (mlir::failed(pm.run(module))) {
    return absl::InvalidArgumentError(absl::StrCat("compilation failed:\n", diagnostics));
  }
  return dump_status;
}

}  // namespace kiln::compiler

// Being written: the pass skeleton only, so the tree builds.
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNPLANMEMORYPASS
#include "passes/Passes.h.inc"

namespace {
struct KilnPlanMemoryPass : impl::KilnPlanMemoryPassBase<KilnPlanMemoryPass> {
  using KilnPlanMemoryPassBase::KilnPlanMemoryPassBase;
  void runOnOperation() override {}
};
}  // namespace
}  // namespace mlir::kiln

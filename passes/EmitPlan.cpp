// Being written: the pass skeleton only, so the tree builds.
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNEMITPLANPASS
#include "passes/Passes.h.inc"

namespace {
struct KilnEmitPlanPass : impl::KilnEmitPlanPassBase<KilnEmitPlanPass> {
  using KilnEmitPlanPassBase::KilnEmitPlanPassBase;
  void runOnOperation() override {}
};
}  // namespace
}  // namespace mlir::kiln

// Being written: the pass skeleton only, so the tree builds.
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNFUSEPASS
#include "passes/Passes.h.inc"

namespace {
struct KilnFusePass : impl::KilnFusePassBase<KilnFusePass> {
  using KilnFusePassBase::KilnFusePassBase;
  void runOnOperation() override {}
};
}  // namespace
}  // namespace mlir::kiln

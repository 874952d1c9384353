// Being written: the pass skeleton only, so the tree builds.
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNQUANTIZEPASS
#include "passes/Passes.h.inc"

namespace {
struct KilnQuantizePass : impl::KilnQuantizePassBase<KilnQuantizePass> {
  using KilnQuantizePassBase::KilnQuantizePassBase;
  void runOnOperation() override {}
};
}  // namespace
}  // namespace mlir::kiln

// Being written: the pass skeleton only, so the tree builds.
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNPAGEDATTENTIONPASS
#include "passes/Passes.h.inc"

namespace {
struct KilnPagedAttentionPass : impl::KilnPagedAttentionPassBase<KilnPagedAttentionPass> {
  using KilnPagedAttentionPassBase::KilnPagedAttentionPassBase;
  void runOnOperation() override {}
};
}  // namespace
}  // namespace mlir::kiln

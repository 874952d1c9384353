//===- PagedAttention.cpp - kiln-paged-attention: contiguous cache to page pool -===//
//
// In every function:
//   - each !kiln.kv_cache argument becomes a !kiln.page_pool with the same
//     layers, kv heads and head dim, `page-size` positions per page and the
//     element type `kv-type` names (f32 or f16; empty keeps the cache's);
//     the cache's positions per slot stay on the argument as
//     `kiln.max_tokens`, since they bound how many pages a sequence may hold
//     (the width of its block-table row);
//   - each argument read as `cache_slots` by a kiln.attention, or marked
//     kiln.role = "cache_slots", becomes `block_tables` (tensor<?x?xi32>,
//     kiln.role = "block_tables");
//   - each kiln.attention becomes a kiln.paged_attention with the same
//     operands and every attribute (layer, heads, scale, rope, and any other).
// The arguments change type in place, so only attention ops may read them;
// everything is checked before anything changes, so a failure leaves the
// function as it was.
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNPAGEDATTENTIONPASS
#include "passes/Passes.h.inc"

static constexpr StringLiteral kRole = "kiln.role";

// The argument of `func` that `v` is, or null when `v` is anything else.
static BlockArgument FunctionArgument(func::FuncOp func, Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &func.getBody().front()) return nullptr;
  return arg;
}

// Every user of `arg` must be a kiln.attention reading it only through the
// operand `slot` picks (the cache or the slots): any other reader would be
// left with a value whose type changed under it.
static LogicalResult OnlyAttentionReads(func::FuncOp func, BlockArgument arg,
                                        function_ref<OpOperand&(AttentionOp)> slot, StringRef what) {
  for (OpOperand& use : arg.getUses()) {
    auto attention = dyn_cast<AttentionOp>(use.getOwner());
    if (attention && &slot(attention) == &use) continue;
    return func.emitError() << "kiln-paged-attention: " << what << " argument #" << arg.getArgNumber() << " of @"
                            << func.getSymName() << " is read by " << use.getOwner()->getName() << " as operand #"
                            << use.getOperandNumber() << "; only kiln.attention may read it";
  }
  return success();
}

namespace {

struct KilnPagedAttentionPass : impl::KilnPagedAttentionPassBase<KilnPagedAttentionPass> {
  using KilnPagedAttentionPassBase::KilnPagedAttentionPassBase;

  void runOnOperation() override {
    if (pageSize <= 0) {
      getOperation().emitError() << "kiln-paged-attention: page-size must be positive, got "
                                 << static_cast<int64_t>(pageSize);
      return signalPassFailure();
    }
    if (kvType != "" && kvType != "f32" && kvType != "f16") {
      getOperation().emitError() << "kiln-paged-attention: kv-type must be f32 or f16, got '" << kvType << "'";
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal()) continue;
      if (failed(Rewrite(func))) return signalPassFailure();
    }
  }

  LogicalResult Rewrite(func::FuncOp func) {
    SmallVector<AttentionOp> attentions;
    func.walk([&](AttentionOp op) { attentions.push_back(op); });

    SmallVector<BlockArgument> caches, slots;
    for (BlockArgument arg : func.getArguments()) {
      if (isa<KVCacheType>(arg.getType())) caches.push_back(arg);
      auto role = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kRole);
      if (role && role.getValue() == "cache_slots") slots.push_back(arg);
    }
    if (!attentions.empty() && caches.empty()) {
      return func.emitError() << "kiln-paged-attention: @" << func.getSymName()
                              << " has kiln.attention but no !kiln.kv_cache argument to turn into a page pool";
    }
    for (AttentionOp op : attentions) {
      if (!FunctionArgument(func, op.getCache())) {
        return op.emitError() << "kiln-paged-attention: the KV cache must be an argument of @" << func.getSymName();
      }
      BlockArgument slot = FunctionArgument(func, op.getCacheSlots());
      if (!slot) {
        return op.emitError() << "kiln-paged-attention: cache_slots must be an argument of @" << func.getSymName()
                              << " to become block tables";
      }
      if (!llvm::is_contained(slots, slot)) slots.push_back(slot);
    }
    auto cacheOperand = [](AttentionOp op) -> OpOperand& { return op.getCacheMutable(); };
    auto slotsOperand = [](AttentionOp op) -> OpOperand& { return op.getCacheSlotsMutable(); };
    for (BlockArgument arg : caches) {
      if (failed(OnlyAttentionReads(func, arg, cacheOperand, "the KV cache"))) return failure();
    }
    for (BlockArgument arg : slots) {
      if (failed(OnlyAttentionReads(func, arg, slotsOperand, "the cache_slots"))) return failure();
    }

    OpBuilder builder(func.getContext());
    for (BlockArgument arg : caches) {
      auto cache = cast<KVCacheType>(arg.getType());
      Type element = kvType == "f16"   ? Type(builder.getF16Type())
                     : kvType == "f32" ? Type(builder.getF32Type())
                                       : cache.getElementType();
      arg.setType(PagePoolType::get(func.getContext(), cache.getLayers(), cache.getKvHeads(), cache.getHeadDim(),
                                    pageSize, element));
      func.setArgAttr(arg.getArgNumber(), "kiln.max_tokens", builder.getI64IntegerAttr(cache.getMaxTokens()));
    }
    auto tables = RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic}, builder.getI32Type());
    for (BlockArgument arg : slots) {
      arg.setType(tables);
      func.setArgAttr(arg.getArgNumber(), kRole, builder.getStringAttr("block_tables"));
    }
    func.setType(builder.getFunctionType(func.getBody().getArgumentTypes(), func.getResultTypes()));

    for (AttentionOp op : attentions) {
      builder.setInsertionPoint(op);
      auto paged = builder.create<PagedAttentionOp>(op.getLoc(), op.getType(), op->getOperands(), op->getAttrs());
      op.replaceAllUsesWith(paged.getResult());
      op.erase();
    }
    return success();
  }
};

}  // namespace
}  // namespace mlir::kiln

//===- Fuse.cpp - kiln-fuse: norm prologues, sibling matmuls, epilogues, rope -===//
//
// Four phases, each a greedy application of its own patterns, in this order:
//   1. an rms_norm read only by matmuls becomes the prologue of one
//      kiln.fused_matmul over all their weights (QKV and gate/up horizontal
//      fusion; the head's lone matmul too);
//   2. silu(gate) * up of such a two-weight op becomes epilogue silu_mul;
//   3. add(x, matmul) becomes epilogue residual_add;
//   4. rope of q and k read only by kiln.attention becomes its `rope`.
// Phase 1 runs first because phase 2 matches what it creates, and because a
// residual epilogue taken first would hide a matmul from its norm: phase 3
// instead accepts a one-weight fused_matmul whose only extra is the prologue.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNFUSEPASS
#include "passes/Passes.h.inc"

namespace {

// One matmul of one weight with no epilogue: a kiln.matmul, or a one-weight
// kiln.fused_matmul that adds only a norm prologue (what phase 1 makes of the
// head, or of any lone matmul after a norm).
struct SingleMatmul {
  Operation* op;
  Value input;
  Value norm;
  FloatAttr eps;
  Value weight;
};

std::optional<SingleMatmul> AsSingleMatmul(Value product) {
  if (auto mm = product.getDefiningOp<MatmulOp>()) {
    return SingleMatmul{mm, mm.getInput(), Value(), FloatAttr(), mm.getWeight()};
  }
  auto fm = product.getDefiningOp<FusedMatmulOp>();
  if (fm && fm.getEpilogue() == Epilogue::none && fm.getWeights().size() == 1) {
    return SingleMatmul{fm, fm.getInput(), fm.getNorm(), fm.getEpsAttr(), fm.getWeights()[0]};
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Phase 1: norm prologue and horizontal fusion
//===----------------------------------------------------------------------===//

// rms_norm(x, g) -> matmul(., w1) ... matmul(., wn)
//   => fused_matmul x norm(g) weights(w1, ..., wn) {epilogue none}
struct RmsNormMatmulsToFusedMatmul : OpRewritePattern<RmsNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RmsNormOp norm, PatternRewriter& rewriter) const override {
    SmallVector<MatmulOp> matmuls;
    for (Operation* user : norm->getUsers()) {
      auto mm = dyn_cast<MatmulOp>(user);
      if (!mm || mm->getBlock() != norm->getBlock()) {
        return rewriter.notifyMatchFailure(norm, "a user is not a matmul in the norm's block");
      }
      matmuls.push_back(mm);
    }
    if (matmuls.empty()) return rewriter.notifyMatchFailure(norm, "no matmul users");
    // Results follow the matmuls' block order, so QKV stays q, k, v.
    llvm::sort(matmuls, [](MatmulOp a, MatmulOp b) { return a->isBeforeInBlock(b); });

    // The fused op takes the first matmul's place: every weight must exist there.
    Operation* first = matmuls.front();
    DominanceInfo dominance;
    SmallVector<Value> weights;
    SmallVector<Type> types;
    SmallVector<Location> locs{norm.getLoc()};
    for (MatmulOp mm : matmuls) {
      if (!dominance.properlyDominates(mm.getWeight(), first)) {
        return rewriter.notifyMatchFailure(mm, "weight defined after the first sibling matmul");
      }
      weights.push_back(mm.getWeight());
      types.push_back(mm.getType());
      locs.push_back(mm.getLoc());
    }

    rewriter.setInsertionPoint(first);
    auto fused = rewriter.create<FusedMatmulOp>(rewriter.getFusedLoc(locs), types, norm.getInput(), norm.getGamma(),
                                                weights, /*residual=*/Value(), norm.getEpsAttr(), Epilogue::none);
    for (auto [mm, result] : llvm::zip_equal(matmuls, fused.getResults())) rewriter.replaceOp(mm, result);
    rewriter.eraseOp(norm);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Phase 2: SiLU-mul epilogue
//===----------------------------------------------------------------------===//

// mul(silu(p#i), p#j), p = fused_matmul x .. weights(wa, wb) {epilogue none}
//   => fused_matmul x .. weights(w_i, w_j) {epilogue silu_mul}
struct MulSiluOfFusedPairToSiluMulEpilogue : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter& rewriter) const override {
    for (auto [gateSide, upSide] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())}) {
      auto silu = gateSide.getDefiningOp<SiluOp>();
      if (!silu || !silu->hasOneUse()) continue;
      auto gate = dyn_cast<OpResult>(silu.getInput());
      auto up = dyn_cast<OpResult>(upSide);
      if (!gate || !up || gate.getOwner() != up.getOwner() || gate == up) continue;
      auto fm = dyn_cast<FusedMatmulOp>(gate.getOwner());
      if (!fm || fm.getEpilogue() != Epilogue::none || fm.getNumResults() != 2) continue;
      if (!gate.hasOneUse() || !up.hasOneUse()) continue;

      // silu_mul reads weight 0 as the gate: reorder when the gate came second.
      Value weights[] = {fm.getWeights()[gate.getResultNumber()], fm.getWeights()[up.getResultNumber()]};
      rewriter.replaceOpWithNewOp<FusedMatmulOp>(
          mul, mul.getType(), fm.getInput(), fm.getNorm(), weights, /*residual=*/Value(), fm.getEpsAttr(),
          Epilogue::silu_mul);
      rewriter.eraseOp(silu);
      rewriter.eraseOp(fm);
      return success();
    }
    return rewriter.notifyMatchFailure(mul, "not silu(gate) * up of one two-weight fused_matmul");
  }
};

//===----------------------------------------------------------------------===//
// Phase 3: residual-add epilogue
//===----------------------------------------------------------------------===//

// add(x, matmul(y, w)) or add(matmul(y, w), x), also with y's norm prologue
//   => fused_matmul y [norm(g)] weights(w) residual(x) {epilogue residual_add}
struct AddMatmulToResidualAddEpilogue : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter& rewriter) const override {
    // The right operand first: the importer writes the residual stream on the left.
    for (auto [residual, product] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      std::optional<SingleMatmul> mm = AsSingleMatmul(product);
      if (!mm || !product.hasOneUse()) continue;
      rewriter.replaceOpWithNewOp<FusedMatmulOp>(add, add.getType(), mm->input, mm->norm, ValueRange{mm->weight},
                                                 residual, mm->eps, Epilogue::residual_add);
      rewriter.eraseOp(mm->op);
      return success();
    }
    return rewriter.notifyMatchFailure(add, "no operand is a single matmul read only by this add");
  }
};

//===----------------------------------------------------------------------===//
// Phase 4: rope into the attention front
//===----------------------------------------------------------------------===//

// attention(rope(q), rope(k), v, ...) with equal rope configs
//   => attention(q, k, v, ...) {rope = config}
struct AttentionOfRopesToAttentionRope : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp attn, PatternRewriter& rewriter) const override {
    if (attn.getRopeAttr()) return rewriter.notifyMatchFailure(attn, "already ropes its inputs");
    auto qRope = attn.getQ().getDefiningOp<RopeOp>();
    auto kRope = attn.getK().getDefiningOp<RopeOp>();
    if (!qRope || !kRope || qRope == kRope || !qRope->hasOneUse() || !kRope->hasOneUse()) {
      return rewriter.notifyMatchFailure(attn, "q and k are not ropes read only by this attention");
    }
    if (qRope.getConfig() != kRope.getConfig()) return rewriter.notifyMatchFailure(attn, "rope configs differ");
    // The fused rope rotates with the attention's positions and head geometry.
    if (qRope.getPositions() != attn.getPositions() || kRope.getPositions() != attn.getPositions()) {
      return rewriter.notifyMatchFailure(attn, "rope positions differ from the attention's");
    }
    if (qRope.getNumHeads() != attn.getNumHeads() || kRope.getNumHeads() != attn.getNumKvHeads() ||
        qRope.getHeadDim() != attn.getHeadDim() || kRope.getHeadDim() != attn.getHeadDim()) {
      return rewriter.notifyMatchFailure(attn, "rope head geometry differs from the attention's");
    }

    rewriter.modifyOpInPlace(attn, [&] {
      attn.getQMutable().assign(qRope.getInput());
      attn.getKMutable().assign(kRope.getInput());
      attn.setRopeAttr(qRope.getConfig());
    });
    rewriter.eraseOp(qRope);
    rewriter.eraseOp(kRope);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

struct KilnFusePass : impl::KilnFusePassBase<KilnFusePass> {
  using KilnFusePassBase::KilnFusePassBase;

  LogicalResult initialize(MLIRContext* ctx) override {
    RewritePatternSet norm(ctx), siluMul(ctx), residual(ctx), rope(ctx);
    norm.add<RmsNormMatmulsToFusedMatmul>(ctx);
    siluMul.add<MulSiluOfFusedPairToSiluMulEpilogue>(ctx);
    residual.add<AddMatmulToResidualAddEpilogue>(ctx);
    rope.add<AttentionOfRopesToAttentionRope>(ctx);
    phases = {FrozenRewritePatternSet(std::move(norm)), FrozenRewritePatternSet(std::move(siluMul)),
              FrozenRewritePatternSet(std::move(residual)), FrozenRewritePatternSet(std::move(rope))};
    return success();
  }

  void runOnOperation() override {
    // Fusion never changes control flow: leave the blocks as they are. (The
    // driver still erases dead pure ops, unused kiln.weight ops included.)
    GreedyRewriteConfig config;
    config.enableRegionSimplification = GreedySimplifyRegionLevel::Disabled;
    for (const FrozenRewritePatternSet& phase : phases) {
      if (failed(applyPatternsAndFoldGreedily(getOperation(), phase, config))) return signalPassFailure();
    }
  }

  SmallVector<FrozenRewritePatternSet, 4> phases;
};
}  // namespace
}  // namespace mlir::kiln

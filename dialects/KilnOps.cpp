//===- KilnOps.cpp - op verifiers -----------------------------------------===//
//
// Each verifier says precisely which operand disagrees with which, and how.
//
//===----------------------------------------------------------------------===//

#include "dialects/KilnDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::kiln;

#define GET_OP_CLASSES
#include "dialects/KilnOps.cpp.inc"

namespace {

// The static feature width of an activation (tensor<?xNxf32>), or failure
// with a diagnostic when it is dynamic.
FailureOr<int64_t> Width(Operation* op, Value v, StringRef what) {
  auto t = cast<RankedTensorType>(v.getType());
  if (t.isDynamicDim(1)) {
    op->emitOpError() << what << " must have a static feature width, got " << t;
    return failure();
  }
  return t.getDimSize(1);
}

LogicalResult SameTokens(Operation* op, Value a, StringRef an, Value b, StringRef bn) {
  const int64_t ta = cast<RankedTensorType>(a.getType()).getDimSize(0);
  const int64_t tb = cast<RankedTensorType>(b.getType()).getDimSize(0);
  if (!ShapedType::isDynamic(ta) && !ShapedType::isDynamic(tb) && ta != tb) {
    return op->emitOpError() << an << " has " << ta << " tokens but " << bn << " has " << tb;
  }
  return success();
}

LogicalResult ExpectWidth(Operation* op, Value v, StringRef what, int64_t expected, StringRef why) {
  FailureOr<int64_t> w = Width(op, v, what);
  if (failed(w)) return failure();
  if (*w != expected) {
    return op->emitOpError() << what << " width " << *w << " does not match " << why << " (" << expected << ")";
  }
  return success();
}

LogicalResult VerifyRopeConfig(Operation* op, DictionaryAttr config, int64_t headDim) {
  auto theta = config.getAs<FloatAttr>("theta");
  auto dims = config.getAs<IntegerAttr>("dims");
  auto style = config.getAs<StringAttr>("style");
  if (!theta || !dims || !style) {
    return op->emitOpError() << "rope config needs theta (float), dims (integer) and style (string), got "
                             << config;
  }
  if (theta.getValueAsDouble() <= 0) return op->emitOpError() << "rope theta must be positive";
  const int64_t d = dims.getInt();
  if (d <= 0 || d % 2 != 0 || d > headDim) {
    return op->emitOpError() << "rope dims " << d << " must be even and at most the head dimension " << headDim;
  }
  if (style.getValue() != "interleaved" && style.getValue() != "half") {
    return op->emitOpError() << "rope style must be \"interleaved\" or \"half\", got " << style;
  }
  return success();
}

template <typename AttnOp>
LogicalResult VerifyAttention(AttnOp op, int64_t kvHeads, int64_t headDim, int64_t layers) {
  const int64_t h = op.getNumHeads(), hkv = op.getNumKvHeads(), d = op.getHeadDim();
  if (h <= 0 || hkv <= 0 || d <= 0) return op.emitOpError() << "head counts and head_dim must be positive";
  if (h % hkv != 0) {
    return op.emitOpError() << "num_heads " << h << " is not a multiple of num_kv_heads " << hkv;
  }
  if (failed(ExpectWidth(op, op.getQ(), "q", h * d, "num_heads * head_dim")) ||
      failed(ExpectWidth(op, op.getK(), "k", hkv * d, "num_kv_heads * head_dim")) ||
      failed(ExpectWidth(op, op.getV(), "v", hkv * d, "num_kv_heads * head_dim")) ||
      failed(ExpectWidth(op, op.getResult(), "result", h * d, "num_heads * head_dim"))) {
    return failure();
  }
  if (failed(SameTokens(op, op.getQ(), "q", op.getK(), "k")) ||
      failed(SameTokens(op, op.getQ(), "q", op.getV(), "v")) ||
      failed(SameTokens(op, op.getQ(), "q", op.getResult(), "result"))) {
    return failure();
  }
  if (kvHeads != hkv || headDim != d) {
    return op.emitOpError() << "cache holds " << kvHeads << " kv heads of " << headDim << " but the op uses "
                            << hkv << " of " << d;
  }
  if (op.getLayer() >= static_cast<uint64_t>(layers)) {
    return op.emitOpError() << "layer " << op.getLayer() << " is outside the cache's " << layers << " layers";
  }
  if (auto rope = op.getRopeAttr()) return VerifyRopeConfig(op, rope, d);
  return success();
}

}  // namespace

LogicalResult EmbeddingOp::verify() {
  auto table = cast<WeightType>(getTable().getType());
  if (failed(ExpectWidth(*this, getResult(), "result", table.cols(), "the embedding table's row length"))) {
    return failure();
  }
  const int64_t tokens = cast<RankedTensorType>(getTokens().getType()).getDimSize(0);
  const int64_t rows = cast<RankedTensorType>(getResult().getType()).getDimSize(0);
  if (!ShapedType::isDynamic(tokens) && !ShapedType::isDynamic(rows) && tokens != rows) {
    return emitOpError() << "has " << tokens << " tokens but " << rows << " result rows";
  }
  return success();
}

LogicalResult RmsNormOp::verify() {
  auto gamma = cast<WeightType>(getGamma().getType());
  if (failed(ExpectWidth(*this, getInput(), "input", gamma.cols(), "the gamma length"))) return failure();
  if (getInput().getType() != getResult().getType()) {
    return emitOpError() << "result type " << getResult().getType() << " differs from input type "
                         << getInput().getType();
  }
  if (getEps().convertToDouble() <= 0) return emitOpError() << "eps must be positive";
  return success();
}

LogicalResult MatmulOp::verify() {
  auto w = cast<WeightType>(getWeight().getType());
  if (failed(ExpectWidth(*this, getInput(), "input", w.cols(), "the weight's row length (K)")) ||
      failed(ExpectWidth(*this, getResult(), "result", w.rows(), "the weight's row count (N)"))) {
    return failure();
  }
  return SameTokens(*this, getInput(), "input", getResult(), "result");
}

LogicalResult BiasAddOp::verify() {
  auto b = cast<WeightType>(getBias().getType());
  if (failed(ExpectWidth(*this, getInput(), "input", b.cols(), "the bias length"))) return failure();
  if (getInput().getType() != getResult().getType()) {
    return emitOpError() << "result type differs from input type";
  }
  return success();
}

LogicalResult RopeOp::verify() {
  if (getNumHeads() <= 0 || getHeadDim() <= 0) return emitOpError() << "num_heads and head_dim must be positive";
  if (failed(ExpectWidth(*this, getInput(), "input", getNumHeads() * getHeadDim(), "num_heads * head_dim"))) {
    return failure();
  }
  if (getInput().getType() != getResult().getType()) return emitOpError() << "result type differs from input type";
  if (failed(SameTokens(*this, getInput(), "input", getPositions(), "positions"))) return failure();
  return VerifyRopeConfig(*this, getConfig(), getHeadDim());
}

LogicalResult AttentionOp::verify() {
  auto cache = cast<KVCacheType>(getCache().getType());
  return VerifyAttention(*this, cache.getKvHeads(), cache.getHeadDim(), cache.getLayers());
}

LogicalResult PagedAttentionOp::verify() {
  auto pool = cast<PagePoolType>(getPool().getType());
  if (pool.getPageSize() <= 0) return emitOpError() << "page size must be positive";
  return VerifyAttention(*this, pool.getKvHeads(), pool.getHeadDim(), pool.getLayers());
}

LogicalResult GatherRowsOp::verify() {
  if (getInput().getType().getDimSize(1) != getResult().getType().getDimSize(1)) {
    return emitOpError() << "result width " << getResult().getType().getDimSize(1) << " differs from input width "
                         << getInput().getType().getDimSize(1);
  }
  return SameTokens(*this, getRows(), "rows", getResult(), "result");
}

LogicalResult FusedMatmulOp::verify() {
  auto weights = getWeights();
  if (weights.empty()) return emitOpError() << "needs at least one weight";
  FailureOr<int64_t> k = Width(*this, getInput(), "input");
  if (failed(k)) return failure();
  if (getNorm()) {
    auto gamma = cast<WeightType>(getNorm().getType());
    if (gamma.cols() != *k) {
      return emitOpError() << "norm length " << gamma.cols() << " does not match the input width " << *k;
    }
    if (!getEps()) return emitOpError() << "a norm prologue needs eps";
  } else if (getEps()) {
    return emitOpError() << "eps is set without a norm prologue";
  }
  for (auto [i, w] : llvm::enumerate(weights)) {
    auto wt = cast<WeightType>(w.getType());
    if (wt.cols() != *k) {
      return emitOpError() << "weight #" << i << " has rows of " << wt.cols() << " but the input width is " << *k;
    }
  }
  auto width = [&](unsigned i) { return cast<WeightType>(weights[i].getType()).rows(); };
  switch (getEpilogue()) {
    case Epilogue::none:
      if (getResidual()) return emitOpError() << "epilogue none takes no residual";
      if (getNumResults() != weights.size()) {
        return emitOpError() << "epilogue none returns one result per weight: " << weights.size() << " weights, "
                             << getNumResults() << " results";
      }
      for (unsigned i = 0; i < weights.size(); ++i) {
        if (failed(ExpectWidth(*this, getResult(i), "result", width(i), "its weight's row count"))) return failure();
      }
      return success();
    case Epilogue::silu_mul:
      if (weights.size() != 2 || getNumResults() != 1 || getResidual()) {
        return emitOpError() << "epilogue silu_mul takes two weights (gate, up), no residual, and returns one result";
      }
      if (width(0) != width(1)) {
        return emitOpError() << "gate and up weights differ in row count: " << width(0) << " vs " << width(1);
      }
      return ExpectWidth(*this, getResult(0), "result", width(0), "the gate/up row count");
    case Epilogue::residual_add:
      if (weights.size() != 1 || getNumResults() != 1 || !getResidual()) {
        return emitOpError() << "epilogue residual_add takes one weight and a residual, and returns one result";
      }
      if (getResidual().getType() != getResult(0).getType()) {
        return emitOpError() << "residual type " << getResidual().getType() << " differs from the result type "
                             << getResult(0).getType();
      }
      return ExpectWidth(*this, getResult(0), "result", width(0), "the weight's row count");
  }
  return success();
}

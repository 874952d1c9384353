//===- PlanMemory.cpp - kiln-plan-memory: arena offsets per batch bucket -===//
//
// Every result of a kiln op other than kiln.weight (an activation
// tensor<?xNxf32>, or a per-token vector such as argmax's tensor<?xi32>,
// whose width is 1) gets a buffer in one arena per bucket. Function
// arguments and weights live elsewhere.
//
// Liveness is taken in block order: a buffer lives from its defining op to
// its last user, both included, so no result shares memory with an operand
// of its own op (kernels do not work in place); a returned value lives to
// the end. Its size for a bucket of T tokens is rows x width x element bytes
// rounded up to `alignment`, rows being T (also after gather_rows, which
// keeps at most one row per token) or the static row count where the type
// has one. Each bucket is allocated on its own: buffers in decreasing size,
// ties in definition order, each placed in the smallest gap between the
// buffers already placed that it overlaps in time, else above them all.
//
// Attributes written:
//   - on each producing op, `kiln.arena`: `array<i64: offset per bucket>`
//     for a one-result op; `[array<i64: ...>, ...]`, one per result in
//     result order, for an op with several results (fused_matmul);
//   - on the function, `kiln.memory_plan = {buckets = array<i64: ...>,
//     peak_bytes = array<i64: ...>}`, peak_bytes being the arena size each
//     bucket needs;
//   - a remark on the function listing the peak per bucket.
// A step function is a func.func with a body holding a kiln op other than
// kiln.weight; other functions are left alone.
//
//===----------------------------------------------------------------------===//

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNPLANMEMORYPASS
#include "passes/Passes.h.inc"

namespace {

// One arena buffer: the value, its live range as op indices in the block,
// and what its size per bucket is made of.
struct Buffer {
  Value value;
  int64_t first;
  int64_t last;
  int64_t staticRows;  // ShapedType::kDynamic: as many rows as the bucket has tokens
  int64_t rowBytes;
};

}  // namespace

static bool IsKernelOp(Operation& op) { return isa_and_present<KilnDialect>(op.getDialect()) && !isa<WeightOp>(op); }

static bool IsStepFunction(func::FuncOp func) {
  return !func.isExternal() && llvm::any_of(func.getBody().getOps(), IsKernelOp);
}

// The buffer of `v` (a 1-D or 2-D tensor of static width and int/float
// elements), its live range not yet set, or failure with a diagnostic on its
// producer.
static FailureOr<Buffer> BufferOf(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  Operation* op = v.getDefiningOp();
  const unsigned resultNumber = cast<OpResult>(v).getResultNumber();
  if (!type || type.getRank() > 2 || (type.getRank() == 2 && type.isDynamicDim(1)) ||
      !type.getElementType().isIntOrFloat()) {
    return op->emitOpError() << "result #" << resultNumber
                             << " cannot be planned: kiln-plan-memory needs a 1-D or 2-D tensor of static width, got "
                             << v.getType();
  }
  const int64_t width = type.getRank() == 2 ? type.getDimSize(1) : 1;
  const int64_t elementBytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
  return Buffer{v, 0, 0, type.getDimSize(0), width * elementBytes};
}

// The buffers of `func`'s single block with their live ranges.
static FailureOr<SmallVector<Buffer>> CollectBuffers(func::FuncOp func) {
  if (!func.getBody().hasOneBlock()) {
    return func.emitError() << "kiln-plan-memory: @" << func.getSymName() << " must have a single block";
  }
  Block& block = func.getBody().front();
  DenseMap<Operation*, int64_t> index;
  for (Operation& op : block) index[&op] = static_cast<int64_t>(index.size());
  const int64_t end = static_cast<int64_t>(index.size());

  SmallVector<Buffer> buffers;
  for (Operation& op : block) {
    if (!IsKernelOp(op)) continue;
    for (Value result : op.getResults()) {
      FailureOr<Buffer> buffer = BufferOf(result);
      if (failed(buffer)) return failure();
      buffer->first = buffer->last = index[&op];
      for (Operation* user : result.getUsers()) {
        Operation* top = block.findAncestorOpInBlock(*user);
        buffer->last = std::max(buffer->last, isa<func::ReturnOp>(top) ? end : index[top]);
      }
      buffers.push_back(*buffer);
    }
  }
  return buffers;
}

// Offsets of buffers of the given sizes; `peak` receives the arena size.
static SmallVector<int64_t> Allocate(ArrayRef<Buffer> buffers, ArrayRef<int64_t> sizes, int64_t& peak) {
  SmallVector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  llvm::sort(order, [&](size_t a, size_t b) { return sizes[a] != sizes[b] ? sizes[a] > sizes[b] : a < b; });

  SmallVector<int64_t> offsets(buffers.size(), 0);
  SmallVector<size_t> placed;
  peak = 0;
  for (size_t b : order) {
    SmallVector<size_t> conflicts;
    for (size_t p : placed) {
      if (buffers[p].first <= buffers[b].last && buffers[b].first <= buffers[p].last) conflicts.push_back(p);
    }
    llvm::sort(conflicts, [&](size_t x, size_t y) { return offsets[x] < offsets[y]; });
    int64_t cursor = 0, best = -1, bestGap = 0;
    for (size_t c : conflicts) {
      const int64_t gap = offsets[c] - cursor;
      if (gap >= sizes[b] && (best < 0 || gap < bestGap)) {
        best = cursor;
        bestGap = gap;
      }
      cursor = std::max(cursor, offsets[c] + sizes[c]);
    }
    offsets[b] = best >= 0 ? best : cursor;
    peak = std::max(peak, offsets[b] + sizes[b]);
    placed.push_back(b);
  }
  return offsets;
}

// Plans `func` for buckets of `tokens` tokens and writes the attributes.
static LogicalResult PlanFunction(func::FuncOp func, ArrayRef<int64_t> tokens, int64_t align) {
  FailureOr<SmallVector<Buffer>> buffers = CollectBuffers(func);
  if (failed(buffers)) return failure();

  // offsets[b][k]: offset of buffer b in bucket k.
  SmallVector<SmallVector<int64_t>> offsets(buffers->size());
  SmallVector<int64_t> peaks;
  for (int64_t t : tokens) {
    SmallVector<int64_t> sizes;
    for (const Buffer& b : *buffers) {
      const int64_t rows = ShapedType::isDynamic(b.staticRows) ? t : b.staticRows;
      sizes.push_back(static_cast<int64_t>(llvm::alignTo(rows * b.rowBytes, align)));
    }
    int64_t peak = 0;
    SmallVector<int64_t> placed = Allocate(*buffers, sizes, peak);
    for (auto [b, offset] : llvm::enumerate(placed)) offsets[b].push_back(offset);
    peaks.push_back(peak);
  }

  Builder builder(func.getContext());
  DenseMap<Operation*, SmallVector<Attribute>> perOp;
  for (auto [b, buffer] : llvm::enumerate(*buffers)) {
    perOp[buffer.value.getDefiningOp()].push_back(builder.getDenseI64ArrayAttr(offsets[b]));
  }
  for (auto& [op, arrays] : perOp) {
    op->setAttr("kiln.arena", op->getNumResults() == 1 ? arrays.front() : builder.getArrayAttr(arrays));
  }
  func->setAttr("kiln.memory_plan",
                builder.getDictionaryAttr({builder.getNamedAttr("buckets", builder.getDenseI64ArrayAttr(tokens)),
                                           builder.getNamedAttr("peak_bytes", builder.getDenseI64ArrayAttr(peaks))}));

  InFlightDiagnostic remark = func.emitRemark() << "arena peak per bucket: ";
  for (auto [i, t] : llvm::enumerate(tokens)) {
    remark << (i ? ", " : "") << t << " tokens: " << peaks[i] << " bytes";
  }
  return success();
}

namespace {

struct KilnPlanMemoryPass : impl::KilnPlanMemoryPassBase<KilnPlanMemoryPass> {
  using KilnPlanMemoryPassBase::KilnPlanMemoryPassBase;

  void runOnOperation() override {
    SmallVector<int64_t> tokens(buckets.begin(), buckets.end());
    if (tokens.empty()) {
      for (int64_t t = 1; t <= 512; t *= 2) tokens.push_back(t);
    }
    for (auto [i, t] : llvm::enumerate(tokens)) {
      if (t <= 0 || (i > 0 && t <= tokens[i - 1])) {
        InFlightDiagnostic error = getOperation().emitError()
                                   << "kiln-plan-memory: buckets must be positive and increasing, got ";
        llvm::interleaveComma(tokens, error);
        return signalPassFailure();
      }
    }
    const int64_t align = alignment;
    if (align <= 0 || !llvm::isPowerOf2_64(align)) {
      getOperation().emitError() << "kiln-plan-memory: alignment must be a power of two, got " << align;
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (IsStepFunction(func) && failed(PlanFunction(func, tokens, align))) return signalPassFailure();
    }
  }
};

}  // namespace
}  // namespace mlir::kiln

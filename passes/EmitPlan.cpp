//===- EmitPlan.cpp - kiln-emit-plan: the kernel launches of each step function -===//
//
// After each step function @f (a func.func whose body holds a kiln op other
// than kiln.weight) comes `kiln.plan @f`, with the buckets and arena sizes of
// @f's kiln.memory_plan and one kiln.launch per kiln op other than
// kiln.weight, in block order. The function stays as the readable form.
//
// kernel: the op name, then its variant, then the storage of its weights,
// joined by dots:
//   - matrix weights (embedding, matmul, fused_matmul): their storage, once
//     when they agree, else one per weight in operand order (one launch
//     either way: fused_matmul.norm.q4_k.q4_k.q6_k);
//   - vector weights (gamma, bias, the norm prologue) show their storage only
//     when it is not f32 (rms_norm.f16, fused_matmul.norm_f16...);
//   - variants: fused_matmul `.norm` and its epilogue when not none,
//     attention and paged_attention `.rope` when the rope is fused.
// bindings: operands in operand order, then results; `role` is the ODS name
// (`weights`/`results` of fused_matmul become weight0.., result0..), and the
// one location key is `arena` (the producer's kiln.arena), `weight` (the
// tensor name) or `input` (the argument's kiln.role).
// constants: widths (`k`/`n` of matmuls, `width` elsewhere), head geometry,
// layer, scale, eps, `epilogue`, `page_size` (paged), `max_tokens` (the
// positions a sequence may hold: the cache's, or kiln.max_tokens on the pool
// argument), `kv_type`, `group` where a weight is group-quantised, and each
// rope config entry as `rope_<entry>`.
// The plan also carries `kiln.results`: one binding per returned value
// (role result0..), so the runtime knows where the step's outputs land.
//
//===----------------------------------------------------------------------===//

#include "llvm/ADT/TypeSwitch.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNEMITPLANPASS
#include "passes/Passes.h.inc"

namespace {

// One launch before it becomes attributes: the buffers it reads and writes,
// by role, and its constants.
struct Launch {
  std::string kernel;
  SmallVector<std::pair<std::string, Value>> buffers;
  SmallVector<NamedAttribute> constants;
};

}  // namespace

static bool IsKernelOp(Operation& op) { return isa_and_present<KilnDialect>(op.getDialect()) && !isa<WeightOp>(op); }

static StorageAttr StorageOf(Value weight) { return cast<WeightType>(weight.getType()).getStorage(); }

static int64_t Width(Value activation) { return cast<RankedTensorType>(activation.getType()).getDimSize(1); }

// ".q4_k" when every weight is stored alike, ".q4_k.q4_k.q6_k" otherwise.
static std::string MatrixStorages(ValueRange weights) {
  const bool alike = llvm::all_of(weights, [&](Value w) { return StorageOf(w) == StorageOf(weights[0]); });
  std::string out;
  for (Value w : alike ? weights.take_front() : weights) {
    out += "." + stringifyStorageKind(StorageOf(w).getKind()).str();
  }
  return out;
}

// Templates read f32 vectors unless the name says otherwise.
static std::string VectorStorage(Value vector, StringRef separator) {
  const StorageKind kind = StorageOf(vector).getKind();
  return kind == StorageKind::f32 ? "" : (separator + stringifyStorageKind(kind)).str();
}

// Every entry of a rope config as rope_<entry>: kiln.rope and a fused rope
// give their templates the same keys.
static void AddRope(Builder& b, DictionaryAttr config, SmallVectorImpl<NamedAttribute>& constants) {
  for (NamedAttribute entry : config) {
    constants.push_back(b.getNamedAttr("rope_" + entry.getName().str(), entry.getValue()));
  }
}

// `group` of group-quantised weights: the group for one weight, one per
// weight (0: not grouped) for several; nothing when none is grouped.
static void AddGroups(Builder& b, ValueRange weights, SmallVectorImpl<NamedAttribute>& constants) {
  SmallVector<int64_t> groups;
  for (Value w : weights) groups.push_back(StorageOf(w).getGroup());
  if (llvm::all_of(groups, [](int64_t g) { return g == 0; })) return;
  constants.push_back(b.getNamedAttr(
      "group", groups.size() == 1 ? Attribute(b.getI64IntegerAttr(groups[0])) : b.getDenseI64ArrayAttr(groups)));
}

// What kiln.attention and kiln.paged_attention share; `cache` and `slots`
// are the operands in which they differ, with their roles, and
// `cacheGeometry` the constants that differ.
template <typename AttnOp>
static Launch DescribeAttention(Builder& b, AttnOp op, StringRef name, std::pair<std::string, Value> cache,
                                std::pair<std::string, Value> slots, ArrayRef<NamedAttribute> cacheGeometry,
                                Type kvElement) {
  Launch l{(name + (op.getRope() ? ".rope" : "")).str(),
           {{"q", op.getQ()},
            {"k", op.getK()},
            {"v", op.getV()},
            cache,
            {"positions", op.getPositions()},
            {"query_starts", op.getQueryStarts()},
            {"context_lens", op.getContextLens()},
            slots,
            {"result", op.getResult()}},
           {b.getNamedAttr("layer", op.getLayerAttr()), b.getNamedAttr("num_heads", op.getNumHeadsAttr()),
            b.getNamedAttr("num_kv_heads", op.getNumKvHeadsAttr()), b.getNamedAttr("head_dim", op.getHeadDimAttr()),
            b.getNamedAttr("scale", op.getScaleAttr())}};
  l.constants.append(cacheGeometry.begin(), cacheGeometry.end());
  std::string kvType;
  llvm::raw_string_ostream(kvType) << kvElement;
  l.constants.push_back(b.getNamedAttr("kv_type", b.getStringAttr(kvType)));
  if (auto rope = op.getRopeAttr()) AddRope(b, rope, l.constants);
  return l;
}

// The launch of a kernel op of `func`, or failure with a diagnostic for an
// op no template runs.
static FailureOr<Launch> Describe(func::FuncOp func, Operation* op) {
  Builder b(op->getContext());
  auto i64 = [&](StringRef name, int64_t v) { return b.getNamedAttr(name, b.getI64IntegerAttr(v)); };
  // Ops whose only constant is the width of their result.
  auto elementwise = [&](StringRef kernel, std::initializer_list<std::pair<std::string, Value>> operands,
                         Value result) {
    Launch l{kernel.str(), operands, {i64("width", Width(result))}};
    l.buffers.push_back({"result", result});
    return l;
  };
  return TypeSwitch<Operation*, FailureOr<Launch>>(op)
      .Case([&](EmbeddingOp e) {
        auto table = cast<WeightType>(e.getTable().getType());
        Launch l{"embedding" + MatrixStorages(e.getTable()),
                 {{"table", e.getTable()}, {"tokens", e.getTokens()}, {"result", e.getResult()}},
                 {i64("vocab", table.rows()), i64("width", table.cols())}};
        AddGroups(b, e.getTable(), l.constants);
        return l;
      })
      .Case([&](RmsNormOp n) {
        return Launch{"rms_norm" + VectorStorage(n.getGamma(), "."),
                      {{"input", n.getInput()}, {"gamma", n.getGamma()}, {"result", n.getResult()}},
                      {i64("width", Width(n.getInput())), b.getNamedAttr("eps", n.getEpsAttr())}};
      })
      .Case([&](MatmulOp m) {
        Launch l{"matmul" + MatrixStorages(m.getWeight()),
                 {{"input", m.getInput()}, {"weight", m.getWeight()}, {"result", m.getResult()}},
                 {i64("k", Width(m.getInput())), i64("n", Width(m.getResult()))}};
        AddGroups(b, m.getWeight(), l.constants);
        return l;
      })
      .Case([&](BiasAddOp a) {
        return Launch{"bias_add" + VectorStorage(a.getBias(), "."),
                      {{"input", a.getInput()}, {"bias", a.getBias()}, {"result", a.getResult()}},
                      {i64("width", Width(a.getInput()))}};
      })
      .Case([&](RopeOp r) {
        Launch l{"rope",
                 {{"input", r.getInput()}, {"positions", r.getPositions()}, {"result", r.getResult()}},
                 {b.getNamedAttr("num_heads", r.getNumHeadsAttr()), b.getNamedAttr("head_dim", r.getHeadDimAttr())}};
        AddRope(b, r.getConfig(), l.constants);
        return l;
      })
      .Case([&](AttentionOp a) {
        auto cache = cast<KVCacheType>(a.getCache().getType());
        return DescribeAttention(b, a, "attention", {"cache", a.getCache()}, {"cache_slots", a.getCacheSlots()},
                                 {i64("max_tokens", cache.getMaxTokens())}, cache.getElementType());
      })
      .Case([&](PagedAttentionOp a) {
        auto pool = cast<PagePoolType>(a.getPool().getType());
        SmallVector<NamedAttribute> geometry = {i64("page_size", pool.getPageSize())};
        // kiln-paged-attention keeps the cache's positions per sequence on
        // the pool argument: they bound the block tables' width.
        auto arg = dyn_cast<BlockArgument>(a.getPool());
        if (auto maxTokens =
                arg ? func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), "kiln.max_tokens") : nullptr) {
          geometry.push_back(b.getNamedAttr("max_tokens", maxTokens));
        }
        return DescribeAttention(b, a, "paged_attention", {"pool", a.getPool()}, {"block_tables", a.getBlockTables()},
                                 geometry, pool.getElementType());
      })
      .Case([&](SiluOp s) {
        return elementwise("silu", {{"input", s.getInput()}}, s.getResult());
      })
      .Case([&](MulOp m) {
        return elementwise("mul", {{"lhs", m.getLhs()}, {"rhs", m.getRhs()}}, m.getResult());
      })
      .Case([&](AddOp a) {
        return elementwise("add", {{"lhs", a.getLhs()}, {"rhs", a.getRhs()}}, a.getResult());
      })
      .Case([&](GatherRowsOp g) {
        return elementwise("gather_rows", {{"input", g.getInput()}, {"rows", g.getRows()}}, g.getResult());
      })
      .Case([&](ArgmaxOp a) {
        return Launch{
            "argmax", {{"input", a.getInput()}, {"result", a.getResult()}}, {i64("width", Width(a.getInput()))}};
      })
      .Case([&](FusedMatmulOp f) {
        Launch l;
        l.kernel = "fused_matmul";
        if (f.getNorm()) l.kernel += ".norm" + VectorStorage(f.getNorm(), "_");
        if (f.getEpilogue() != Epilogue::none) l.kernel += "." + stringifyEpilogue(f.getEpilogue()).str();
        l.kernel += MatrixStorages(f.getWeights());

        l.buffers.push_back({"input", f.getInput()});
        if (f.getNorm()) l.buffers.push_back({"norm", f.getNorm()});
        for (auto [i, w] : llvm::enumerate(f.getWeights())) l.buffers.push_back({"weight" + std::to_string(i), w});
        if (f.getResidual()) l.buffers.push_back({"residual", f.getResidual()});
        for (auto [i, r] : llvm::enumerate(f.getResults())) l.buffers.push_back({"result" + std::to_string(i), r});

        SmallVector<int64_t> n;
        for (Value w : f.getWeights()) n.push_back(cast<WeightType>(w.getType()).rows());
        l.constants = {i64("k", Width(f.getInput())), b.getNamedAttr("n", b.getDenseI64ArrayAttr(n)),
                       b.getNamedAttr("epilogue", b.getStringAttr(stringifyEpilogue(f.getEpilogue())))};
        if (f.getNorm()) l.constants.push_back(b.getNamedAttr("eps", f.getEpsAttr()));
        AddGroups(b, f.getWeights(), l.constants);
        return l;
      })
      .Default([&](Operation* other) -> FailureOr<Launch> {
        return other->emitOpError() << "has no kernel template; kiln-emit-plan cannot launch it";
      });
}

// Where `v` lives, as a binding of role `role`, or failure with a diagnostic
// on `user`.
static FailureOr<DictionaryAttr> Bind(func::FuncOp func, Operation* user, StringRef role, Value v, size_t numBuckets) {
  Builder b(func.getContext());
  auto binding = [&](StringRef key, Attribute location) {
    return b.getDictionaryAttr({b.getNamedAttr("role", b.getStringAttr(role)), b.getNamedAttr(key, location)});
  };
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "kiln.role");
    if (arg.getOwner() != &func.getBody().front() || !name) {
      return user->emitOpError() << "cannot bind '" << role << "': argument #" << arg.getArgNumber() << " of @"
                                 << func.getSymName() << " has no kiln.role to bind it by";
    }
    return binding("input", name);
  }
  if (auto weight = v.getDefiningOp<WeightOp>()) return binding("weight", weight.getNameAttr());

  auto result = cast<OpResult>(v);
  Attribute arena = result.getOwner()->getAttr("kiln.arena");
  if (auto perResult = dyn_cast_or_null<ArrayAttr>(arena)) {
    arena = result.getResultNumber() < perResult.size() ? perResult[result.getResultNumber()] : Attribute();
  }
  auto offsets = dyn_cast_or_null<DenseI64ArrayAttr>(arena);
  if (!offsets || static_cast<size_t>(offsets.size()) != numBuckets) {
    return user->emitOpError() << "cannot bind '" << role << "': result #" << result.getResultNumber() << " of "
                               << result.getOwner()->getName() << " has no kiln.arena offsets for the " << numBuckets
                               << " buckets of the memory plan; kiln-plan-memory must run first";
  }
  return binding("arena", offsets);
}

static FailureOr<ArrayAttr> BindAll(func::FuncOp func, Operation* user, ArrayRef<std::pair<std::string, Value>> buffers,
                                    size_t numBuckets) {
  SmallVector<Attribute> bindings;
  for (auto& [role, value] : buffers) {
    FailureOr<DictionaryAttr> binding = Bind(func, user, role, value, numBuckets);
    if (failed(binding)) return failure();
    bindings.push_back(*binding);
  }
  return ArrayAttr::get(func.getContext(), bindings);
}

namespace {

struct KilnEmitPlanPass : impl::KilnEmitPlanPassBase<KilnEmitPlanPass> {
  using KilnEmitPlanPassBase::KilnEmitPlanPassBase;

  void runOnOperation() override {
    SmallVector<func::FuncOp> steps;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (!func.isExternal() && llvm::any_of(func.getBody().getOps(), IsKernelOp)) steps.push_back(func);
    }
    for (func::FuncOp func : steps) {
      if (failed(Emit(func))) return signalPassFailure();
    }
  }

  LogicalResult Emit(func::FuncOp func) {
    auto memoryPlan = func->getAttrOfType<DictionaryAttr>("kiln.memory_plan");
    auto buckets = memoryPlan ? memoryPlan.getAs<DenseI64ArrayAttr>("buckets") : nullptr;
    auto peaks = memoryPlan ? memoryPlan.getAs<DenseI64ArrayAttr>("peak_bytes") : nullptr;
    if (!buckets || !peaks || buckets.size() != peaks.size()) {
      return func.emitError()
             << "kiln-emit-plan: @" << func.getSymName()
             << " has no kiln.memory_plan with buckets and peak_bytes; kiln-plan-memory must run first";
    }
    if (!func.getBody().hasOneBlock()) {
      return func.emitError() << "kiln-emit-plan: @" << func.getSymName() << " must have a single block";
    }

    // Everything is described before anything is created, so a failure
    // leaves no half-made plan.
    Builder b(func.getContext());
    SmallVector<std::tuple<Location, std::string, ArrayAttr, DictionaryAttr>> launches;
    for (Operation& op : func.getBody().front()) {
      if (isa<func::ReturnOp, WeightOp>(op)) continue;
      FailureOr<Launch> launch = Describe(func, &op);
      if (failed(launch)) return failure();
      FailureOr<ArrayAttr> bindings = BindAll(func, &op, launch->buffers, buckets.size());
      if (failed(bindings)) return failure();
      launches.emplace_back(op.getLoc(), launch->kernel, *bindings, b.getDictionaryAttr(launch->constants));
    }
    Operation* ret = func.getBody().front().getTerminator();
    SmallVector<std::pair<std::string, Value>> returned;
    for (auto [i, v] : llvm::enumerate(ret->getOperands())) returned.push_back({"result" + std::to_string(i), v});
    FailureOr<ArrayAttr> results = BindAll(func, ret, returned, buckets.size());
    if (failed(results)) return failure();

    // A rerun replaces the plan it made before.
    for (PlanOp old : llvm::make_early_inc_range(getOperation().getOps<PlanOp>())) {
      if (old.getFunc() == func.getSymName()) old->erase();
    }
    OpBuilder builder(func.getContext());
    builder.setInsertionPointAfter(func);
    auto plan = builder.create<PlanOp>(func.getLoc(), FlatSymbolRefAttr::get(func.getSymNameAttr()), buckets,
                                       peaks, *results);
    builder.setInsertionPointToStart(&plan.getBody().emplaceBlock());
    for (auto& [loc, kernel, bindings, constants] : launches) {
      builder.create<LaunchOp>(loc, kernel, bindings, constants);
    }
    return success();
  }
};

}  // namespace
}  // namespace mlir::kiln

//===- StepBuilder.cpp - the kiln IR of one Llama-family model step -------===//
//
// Builds `func.func @step` over a ragged batch: a flat list of T tokens from
// S sequences. Arguments, in order (each tagged with its `kiln.role`):
//   tokens [T], positions [T], query_starts [S+1] (token range of each
//   sequence), context_lens [S] (cached positions after this step),
//   cache_slots [S] (the sequence's row of the contiguous cache),
//   logit_rows [R] (the tokens whose logits are wanted: the last of each
//   sequence for generation, all of them for speculative verification),
//   kv (the cache of every layer).
// Result: logits [R, n_vocab]. Prefill, decode, chunked prefill and
// verification are this one function with different T, S and R.
//
//===----------------------------------------------------------------------===//

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/Importers.h"
#include "dialects/KilnDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

namespace kiln::compiler {
namespace {

using mlir::kiln::StorageKind;

absl::StatusOr<StorageKind> StorageOf(const WeightRef& w) {
  switch (w.storage) {
    case GgmlType::kF32: return StorageKind::f32;
    case GgmlType::kF16: return StorageKind::f16;
    case GgmlType::kBF16: return StorageKind::bf16;
    case GgmlType::kQ8_0: return StorageKind::q8_0;
    case GgmlType::kQ4_0: return StorageKind::q4_0;
    case GgmlType::kQ4_1: return StorageKind::q4_1;
    case GgmlType::kQ5_0: return StorageKind::q5_0;
    case GgmlType::kQ5_1: return StorageKind::q5_1;
    case GgmlType::kQ2_K: return StorageKind::q2_k;
    case GgmlType::kQ3_K: return StorageKind::q3_k;
    case GgmlType::kQ4_K: return StorageKind::q4_k;
    case GgmlType::kQ5_K: return StorageKind::q5_k;
    case GgmlType::kQ6_K: return StorageKind::q6_k;
    default:
      return absl::UnimplementedError(absl::StrFormat(
          "tensor '%s' is stored as %s, which kiln does not read (supported: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 "
          "q5_1 q2_K q3_K q4_K q5_K q6_K)",
          w.name, GgmlTypeName(w.storage)));
  }
}

class StepBuilder {
 public:
  StepBuilder(mlir::MLIRContext& ctx, const LlamaModelSpec& spec) : ctx_(ctx), spec_(spec), b_(&ctx) {}

  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> Build(int64_t max_context) {
    const auto loc = mlir::NameLoc::get(b_.getStringAttr(spec_.source));
    mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
    module->getOperation()->setAttr("kiln.model", ModelAttr());
    b_.setInsertionPointToEnd(module->getBody());

    const auto i32s = mlir::RankedTensorType::get({mlir::ShapedType::kDynamic}, b_.getI32Type());
    const int64_t ctx_len = max_context > 0 ? max_context : spec_.n_ctx;
    const auto cache = mlir::kiln::KVCacheType::get(&ctx_, static_cast<int64_t>(spec_.layers.size()),
                                                    spec_.n_head_kv, spec_.head_dim, ctx_len, b_.getF32Type());
    const char* roles[] = {"tokens", "positions", "query_starts", "context_lens", "cache_slots", "logit_rows", "kv"};
    llvm::SmallVector<mlir::Type> args(6, i32s);
    args.push_back(cache);
    auto fn = b_.create<mlir::func::FuncOp>(loc, "step", b_.getFunctionType(args, {Activation(spec_.n_vocab)}));
    for (unsigned i = 0; i < args.size(); ++i) fn.setArgAttr(i, "kiln.role", b_.getStringAttr(roles[i]));
    b_.setInsertionPointToStart(fn.addEntryBlock());
    tokens_ = fn.getArgument(0);
    positions_ = fn.getArgument(1);
    query_starts_ = fn.getArgument(2);
    context_lens_ = fn.getArgument(3);
    cache_slots_ = fn.getArgument(4);
    logit_rows_ = fn.getArgument(5);
    kv_ = fn.getArgument(6);

    absl::StatusOr<mlir::Value> emb = Weight(spec_.token_embd);
    if (!emb.ok()) return emb.status();
    mlir::Value x = b_.create<mlir::kiln::EmbeddingOp>(Loc("embedding"), Activation(spec_.n_embd), *emb, tokens_);
    for (size_t l = 0; l < spec_.layers.size(); ++l) {
      absl::StatusOr<mlir::Value> next = Layer(static_cast<int64_t>(l), spec_.layers[l], x);
      if (!next.ok()) return next.status();
      x = *next;
    }
    absl::StatusOr<mlir::Value> norm = Weight(spec_.output_norm);
    absl::StatusOr<mlir::Value> head = spec_.output ? Weight(*spec_.output) : emb;
    if (!norm.ok()) return norm.status();
    if (!head.ok()) return head.status();
    const auto hl = Loc("head");
    mlir::Value h = b_.create<mlir::kiln::GatherRowsOp>(hl, Activation(spec_.n_embd), x, logit_rows_);
    h = b_.create<mlir::kiln::RmsNormOp>(hl, Activation(spec_.n_embd), h, *norm, b_.getF64FloatAttr(spec_.norm_eps));
    mlir::Value logits = b_.create<mlir::kiln::MatmulOp>(hl, Activation(spec_.n_vocab), h, *head);
    b_.create<mlir::func::ReturnOp>(hl, logits);

    if (mlir::failed(mlir::verify(*module))) {
      return absl::InternalError(absl::StrCat(spec_.source, ": the imported IR does not verify (a kiln bug)"));
    }
    return module;
  }

 private:
  mlir::RankedTensorType Activation(int64_t width) {
    return mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, width}, b_.getF32Type());
  }
  mlir::Location Loc(const std::string& what) { return mlir::NameLoc::get(b_.getStringAttr(what)); }

  // One kiln.weight per tensor, at the top of the function, created on first use.
  absl::StatusOr<mlir::Value> Weight(const WeightRef& w) {
    if (auto it = weights_.find(w.name); it != weights_.end()) return it->second;
    absl::StatusOr<StorageKind> kind = StorageOf(w);
    if (!kind.ok()) return absl::Status(kind.status().code(), absl::StrCat(spec_.source, ": ", kind.status().message()));
    auto storage = mlir::kiln::StorageAttr::get(&ctx_, *kind, 0);
    const int64_t block = storage.blockElements();
    if (w.shape.back() % block != 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: tensor '%s' rows of %d are not whole %s blocks",
                                                        spec_.source, w.name, w.shape.back(), GgmlTypeName(w.storage)));
    }
    auto type = mlir::kiln::WeightType::get(&ctx_, w.shape, storage);
    mlir::OpBuilder::InsertionGuard guard(b_);
    mlir::Block* entry = b_.getInsertionBlock();
    if (last_weight_) {
      b_.setInsertionPointAfter(last_weight_);
    } else {
      b_.setInsertionPointToStart(entry);
    }
    auto op = b_.create<mlir::kiln::WeightOp>(Loc(w.name), type, b_.getStringAttr(w.name), nullptr, nullptr);
    last_weight_ = op;
    weights_[w.name] = op.getResult();
    return op.getResult();
  }

  mlir::DictionaryAttr RopeConfig() {
    llvm::SmallVector<mlir::NamedAttribute> items = {
        b_.getNamedAttr("theta", b_.getF64FloatAttr(spec_.rope_theta)),
        b_.getNamedAttr("dims", b_.getI64IntegerAttr(spec_.rope_dims)),
        b_.getNamedAttr("style", b_.getStringAttr(spec_.rope_style))};
    if (spec_.rope_scaling != "none") {
      items.push_back(b_.getNamedAttr("scaling", b_.getStringAttr(spec_.rope_scaling)));
      items.push_back(b_.getNamedAttr("factor", b_.getF64FloatAttr(spec_.rope_factor)));
    }
    return b_.getDictionaryAttr(items);
  }

  absl::StatusOr<mlir::Value> Layer(int64_t l, const LlamaLayer& w, mlir::Value x) {
    llvm::SmallVector<absl::StatusOr<mlir::Value>> ws;
    for (const WeightRef* r : {&w.attn_norm, &w.q, &w.k, &w.v, &w.o, &w.ffn_norm, &w.gate, &w.up, &w.down}) {
      ws.push_back(Weight(*r));
      if (!ws.back().ok()) return ws.back().status();
    }
    const int64_t d = spec_.n_embd, qw = spec_.n_head * spec_.head_dim, kvw = spec_.n_head_kv * spec_.head_dim;
    const auto eps = b_.getF64FloatAttr(spec_.norm_eps);
    const auto loc = Loc(absl::StrCat("layer ", l));

    mlir::Value an = b_.create<mlir::kiln::RmsNormOp>(loc, Activation(d), x, *ws[0], eps);
    mlir::Value q = b_.create<mlir::kiln::MatmulOp>(loc, Activation(qw), an, *ws[1]);
    mlir::Value k = b_.create<mlir::kiln::MatmulOp>(loc, Activation(kvw), an, *ws[2]);
    mlir::Value v = b_.create<mlir::kiln::MatmulOp>(loc, Activation(kvw), an, *ws[3]);
    if (w.q_bias) {
      for (auto [val, bias, width] : {std::tuple<mlir::Value*, const WeightRef*, int64_t>{&q, &*w.q_bias, qw},
                                      {&k, &*w.k_bias, kvw},
                                      {&v, &*w.v_bias, kvw}}) {
        absl::StatusOr<mlir::Value> bw = Weight(*bias);
        if (!bw.ok()) return bw.status();
        *val = b_.create<mlir::kiln::BiasAddOp>(loc, Activation(width), *val, *bw);
      }
    }
    const auto rope = RopeConfig();
    mlir::Value qr = b_.create<mlir::kiln::RopeOp>(loc, Activation(qw), q, positions_, b_.getI64IntegerAttr(spec_.n_head),
                                                   b_.getI64IntegerAttr(spec_.head_dim), rope);
    mlir::Value kr = b_.create<mlir::kiln::RopeOp>(loc, Activation(kvw), k, positions_,
                                                   b_.getI64IntegerAttr(spec_.n_head_kv),
                                                   b_.getI64IntegerAttr(spec_.head_dim), rope);
    mlir::Value a = b_.create<mlir::kiln::AttentionOp>(
        loc, Activation(qw), qr, kr, v, kv_, positions_, query_starts_, context_lens_, cache_slots_,
        b_.getI64IntegerAttr(l), b_.getI64IntegerAttr(spec_.n_head), b_.getI64IntegerAttr(spec_.n_head_kv),
        b_.getI64IntegerAttr(spec_.head_dim), b_.getF64FloatAttr(1.0 / std::sqrt(double(spec_.head_dim))),
        mlir::DictionaryAttr());
    mlir::Value o = b_.create<mlir::kiln::MatmulOp>(loc, Activation(d), a, *ws[4]);
    mlir::Value x1 = b_.create<mlir::kiln::AddOp>(loc, x, o);
    mlir::Value fn = b_.create<mlir::kiln::RmsNormOp>(loc, Activation(d), x1, *ws[5], eps);
    mlir::Value g = b_.create<mlir::kiln::MatmulOp>(loc, Activation(spec_.n_ff), fn, *ws[6]);
    mlir::Value u = b_.create<mlir::kiln::MatmulOp>(loc, Activation(spec_.n_ff), fn, *ws[7]);
    mlir::Value s = b_.create<mlir::kiln::SiluOp>(loc, g);
    mlir::Value m = b_.create<mlir::kiln::MulOp>(loc, s, u);
    mlir::Value dn = b_.create<mlir::kiln::MatmulOp>(loc, Activation(d), m, *ws[8]);
    return b_.create<mlir::kiln::AddOp>(loc, x1, dn).getResult();
  }

  mlir::DictionaryAttr ModelAttr() {
    llvm::SmallVector<mlir::NamedAttribute> items = {
        b_.getNamedAttr("architecture", b_.getStringAttr(spec_.architecture)),
        b_.getNamedAttr("name", b_.getStringAttr(spec_.name)),
        b_.getNamedAttr("source", b_.getStringAttr(spec_.source)),
        b_.getNamedAttr("n_vocab", b_.getI64IntegerAttr(spec_.n_vocab)),
        b_.getNamedAttr("n_embd", b_.getI64IntegerAttr(spec_.n_embd)),
        b_.getNamedAttr("n_layer", b_.getI64IntegerAttr(static_cast<int64_t>(spec_.layers.size()))),
        b_.getNamedAttr("n_head", b_.getI64IntegerAttr(spec_.n_head)),
        b_.getNamedAttr("n_head_kv", b_.getI64IntegerAttr(spec_.n_head_kv)),
        b_.getNamedAttr("head_dim", b_.getI64IntegerAttr(spec_.head_dim)),
        b_.getNamedAttr("n_ff", b_.getI64IntegerAttr(spec_.n_ff)),
        b_.getNamedAttr("n_ctx", b_.getI64IntegerAttr(spec_.n_ctx)),
        b_.getNamedAttr("tied_embeddings", b_.getBoolAttr(!spec_.output.has_value())),
    };
    return b_.getDictionaryAttr(items);
  }

  mlir::MLIRContext& ctx_;
  const LlamaModelSpec& spec_;
  mlir::OpBuilder b_;
  mlir::Value tokens_, positions_, query_starts_, context_lens_, cache_slots_, logit_rows_, kv_;
  mlir::Operation* last_weight_ = nullptr;
  std::map<std::string, mlir::Value> weights_;
};

}  // namespace

absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildStepModule(mlir::MLIRContext& context,
                                                                   const LlamaModelSpec& spec, int64_t max_context) {
  context.loadDialect<mlir::kiln::KilnDialect, mlir::func::FuncDialect>();
  if (spec.layers.empty()) return absl::InvalidArgumentError(absl::StrCat(spec.source, ": the model has no layers"));
  StepBuilder builder(context, spec);
  return builder.Build(max_context);
}

}  // namespace kiln::compiler

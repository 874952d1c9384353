//===- Quantize.cpp - kiln-quantize: each weight's storage from a policy ---===//
//
// The policy, after llama-quantize:
//  - 1-D weights (norm gammas, biases) keep the file's storage, overrides
//    included: they are a rounding error of the model's bytes, and the norm
//    and bias kernels read them whole.
//  - The first `override` "SUBSTRING=TYPE" whose SUBSTRING occurs in a 2-D
//    weight's name sets its storage. TYPE is any storage kind (int4 and int2
//    take `group-size`); one whose block does not divide the row length is an
//    error, since the user asked for exactly that type.
//  - Otherwise, with `quant` empty, weights keep the file's storage; with
//    `quant` set, every 2-D weight gets it, except that below q8_0 (q4_k,
//    int4, int2):
//      . the output head (`output.weight`, or `token_embd.weight` when a
//        matmul reads it: tied embeddings) gets q6_k, as llama.cpp's
//        k-quant mixes do: the logits are what quantisation error hurts most;
//      . an untied embedding table (`token_embd.weight`) gets q8_0: a step
//        reads only one row per token, so precision there costs file size,
//        not bandwidth.
//  - A type chosen that way whose block does not divide the row length falls
//    back to q8_0, then f16 (which fits any row), with a remark naming the
//    tensor.
// A changed weight's type gets the new storage; `source` records the file's
// storage and `repack` the transform the artifact writer applies,
// "<source>-><target>" in storage kind names, grouped kinds with their group:
// "f32->q4_k", "f16->int4_g64". A weight that ends in its file's storage
// carries neither; one marked by an earlier run is decided again from its
// `source`. An override that matches no 2-D weight is warned about, since a
// misspelt one would otherwise leave the model silently unchanged.
//
//===----------------------------------------------------------------------===//

#include <string>

#include "llvm/ADT/STLExtras.h"
#include "passes/Passes.h"

namespace mlir::kiln {
#define GEN_PASS_DEF_KILNQUANTIZEPASS
#include "passes/Passes.h.inc"

namespace {

// What `quant` accepts, in the order its error message lists them.
constexpr StorageKind kQuantKinds[] = {StorageKind::f16,  StorageKind::bf16, StorageKind::q8_0,
                                       StorageKind::q4_k, StorageKind::int4, StorageKind::int2};

bool IsGrouped(StorageKind kind) { return kind == StorageKind::int4 || kind == StorageKind::int2; }

// The targets below q8_0, for which the head and the embedding keep more.
bool IsBelowQ8(StorageKind kind) { return kind == StorageKind::q4_k || IsGrouped(kind); }

std::string StorageName(StorageAttr storage) {
  std::string name = stringifyStorageKind(storage.getKind()).str();
  if (IsGrouped(storage.getKind())) name += "_g" + std::to_string(storage.getGroup());
  return name;
}

std::string ValidStorageNames() {
  std::string names;
  for (uint32_t i = 0; i <= getMaxEnumValForStorageKind(); ++i) {
    if (std::optional<StorageKind> kind = symbolizeStorageKind(i)) {
      if (!names.empty()) names += ", ";
      names += stringifyStorageKind(*kind).str();
    }
  }
  return names;
}

bool Fits(StorageAttr storage, WeightType type) { return type.cols() % storage.blockElements() == 0; }

// The output head: output.weight, or the embedding table a matmul reads.
bool IsHead(WeightOp weight) {
  if (weight.getName() == "output.weight") return true;
  return weight.getName() == "token_embd.weight" &&
         llvm::any_of(weight->getUsers(), [](Operation* user) { return isa<MatmulOp, FusedMatmulOp>(user); });
}

// What the policy gives a 2-D weight when `quant` is set (before fallback).
StorageAttr PolicyStorage(WeightOp weight, StorageAttr quantStorage) {
  if (!IsBelowQ8(quantStorage.getKind())) return quantStorage;
  MLIRContext* ctx = weight.getContext();
  if (IsHead(weight)) return StorageAttr::get(ctx, StorageKind::q6_k, 0);
  if (weight.getName() == "token_embd.weight") return StorageAttr::get(ctx, StorageKind::q8_0, 0);
  return quantStorage;
}

// `wanted`, or the first of q8_0 and f16 whose block divides the row length.
StorageAttr FirstFitting(StorageAttr wanted, WeightType type) {
  MLIRContext* ctx = wanted.getContext();
  for (StorageAttr storage :
       {wanted, StorageAttr::get(ctx, StorageKind::q8_0, 0), StorageAttr::get(ctx, StorageKind::f16, 0)}) {
    if (Fits(storage, type)) return storage;
  }
  llvm_unreachable("f16 fits every row length");
}

// Gives the weight `storage`, recording the file's storage and the repack.
void SetStorage(WeightOp weight, StorageAttr storage) {
  auto type = cast<WeightType>(weight.getType());
  if (storage == type.getStorage()) return;
  StorageAttr file = weight.getSourceAttr() ? weight.getSourceAttr() : type.getStorage();
  weight.getResult().setType(WeightType::get(weight.getContext(), type.getShape(), storage));
  if (storage == file) {
    weight.removeSourceAttr();
    weight.removeRepackAttr();
    return;
  }
  weight.setSourceAttr(file);
  weight.setRepackAttr(StringAttr::get(weight.getContext(), StorageName(file) + "->" + StorageName(storage)));
}

struct Override {
  std::string text;  // as given, for diagnostics
  std::string substring;
  StorageAttr storage;
  bool used = false;
};

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

struct KilnQuantizePass : impl::KilnQuantizePassBase<KilnQuantizePass> {
  using KilnQuantizePassBase::KilnQuantizePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<StorageAttr> quantStorage;
    SmallVector<Override> overrideList;
    if (failed(ParseOptions(module, quantStorage, overrideList))) return signalPassFailure();

    bool ok = true;
    module.walk([&](WeightOp weight) {
      auto type = cast<WeightType>(weight.getType());
      if (type.getShape().size() != 2) return;
      StorageAttr chosen;
      auto match = llvm::find_if(overrideList, [&](const Override& o) {
        return weight.getName().contains(o.substring);
      });
      if (match != overrideList.end()) {
        match->used = true;
        if (!Fits(match->storage, type)) {
          weight.emitError() << "override '" << match->text << "' asks for " << StorageName(match->storage)
                             << " storage of " << weight.getName() << ", but its row length " << type.cols()
                             << " is not a multiple of the " << match->storage.blockElements() << "-element block";
          ok = false;
          return;
        }
        chosen = match->storage;
      } else if (quantStorage) {
        StorageAttr wanted = PolicyStorage(weight, *quantStorage);
        chosen = FirstFitting(wanted, type);
        if (chosen != wanted) {
          weight.emitRemark() << weight.getName() << ": row length " << type.cols() << " is not a multiple of the "
                              << StorageName(wanted) << " block of " << wanted.blockElements()
                              << " elements; stored as " << StorageName(chosen);
        }
      } else {
        return;
      }
      SetStorage(weight, chosen);
    });
    if (!ok) return signalPassFailure();

    for (const Override& o : overrideList) {
      if (!o.used) module.emitWarning() << "kiln-quantize: override '" << o.text << "' matches no 2-D weight";
    }
    WarnOfInt2(module);
  }

  // int2 is round-to-nearest over four levels a group, with no importance
  // matrix (llama-quantize refuses its 2-bit types without one): a model
  // can come out broken, and nothing else would tell the user.
  void WarnOfInt2(ModuleOp module) {
    int64_t weights = 0, group = 0;
    module.walk([&](WeightOp weight) {
      StorageAttr storage = cast<WeightType>(weight.getType()).getStorage();
      if (storage.getKind() != StorageKind::int2) return;
      ++weights;
      group = storage.getGroup();
    });
    if (weights == 0) return;
    module.emitWarning() << "kiln-quantize: " << weights << " weights stored as int2 (group " << group
                         << "): each group rounded to the nearest of 4 levels, with no importance matrix, can "
                            "break a model (Qwen2.5-Coder-0.5B: perplexity 40.8 -> 5945 at group 128, 115 at "
                            "group 16; docs/perplexity.md); measure it with `kiln perplexity`";
  }

  // The storage `quant` asks for, or an error listing the valid values; the
  // override list, or an error naming the bad entry.
  LogicalResult ParseOptions(ModuleOp module, std::optional<StorageAttr>& quantStorage,
                             SmallVector<Override>& overrideList) {
    MLIRContext* ctx = module.getContext();
    auto emitError = [&]() -> InFlightDiagnostic { return module.emitError("kiln-quantize: "); };
    auto storageOf = [&](StorageKind kind) {
      return StorageAttr::getChecked(emitError, ctx, kind, IsGrouped(kind) ? int64_t(groupSize) : 0);
    };

    if (!quant.empty()) {
      const StorageKind* kind =
          llvm::find_if(kQuantKinds, [&](StorageKind k) { return stringifyStorageKind(k) == quant; });
      if (kind == std::end(kQuantKinds)) {
        InFlightDiagnostic diag = emitError() << "unknown quant '" << quant << "'; valid values: ";
        llvm::interleaveComma(kQuantKinds, diag, [&](StorageKind k) { diag << stringifyStorageKind(k); });
        return diag;
      }
      StorageAttr storage = storageOf(*kind);
      if (!storage) return failure();
      quantStorage = storage;
    }

    for (const std::string& text : overrides) {
      auto [substring, typeName] = StringRef(text).rsplit('=');
      if (substring.empty() || typeName.empty()) {
        return emitError() << "override '" << text << "' is not NAME_SUBSTRING=TYPE";
      }
      std::optional<StorageKind> kind = symbolizeStorageKind(typeName);
      if (!kind) {
        return emitError() << "override '" << text << "' names unknown storage '" << typeName
                           << "'; valid types: " << ValidStorageNames();
      }
      StorageAttr storage = storageOf(*kind);
      if (!storage) return failure();
      overrideList.push_back({text, substring.str(), storage});
    }
    return success();
  }
};

}  // namespace
}  // namespace mlir::kiln

//===- KilnTypes.td - kiln types -------------------------------*- tablegen -*-===//

#ifndef KILN_TYPES_TD
#define KILN_TYPES_TD

include "KilnBase.td"

class Kiln_Type<string name, string typeMnemonic> : TypeDef<Kiln_Dialect, name> {
  let mnemonic = typeMnemonic;
}

// Example: !kiln.weight<[512, 64], #kiln.storage<q4_k>> is a matrix of 512
// rows (output features) of 64 contiguous elements (input features).
def Kiln_WeightType : Kiln_Type<"Weight", "weight"> {
  let summary = "a weight of the model file: shape and storage, never data";
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape, "StorageAttr":$storage);
  let assemblyFormat = "`<` `[` $shape `]` `,` qualified($storage) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t rows() const { return getShape().size() == 2 ? getShape()[0] : 1; }
    int64_t cols() const { return getShape().back(); }
    int64_t numElements() const;
    int64_t bytes() const { return getStorage().bytesFor(numElements()); }
  }];
}

// The KV cache of every layer, one contiguous row of `maxTokens` positions per
// sequence slot: !kiln.kv_cache<5 x 4 x 8 x 2048, f32> (layers, kv heads,
// head dim, positions per slot).
def Kiln_KVCacheType : Kiln_Type<"KVCache", "kv_cache"> {
  let summary = "contiguous KV cache of all layers";
  let parameters = (ins "int64_t":$layers, "int64_t":$kvHeads, "int64_t":$headDim,
                        "int64_t":$maxTokens, "Type":$elementType);
  let assemblyFormat = "`<` $layers `x` $kvHeads `x` $headDim `x` $maxTokens `,` $elementType `>`";
}

// The paged KV cache: a pool of pages of `pageSize` token positions each,
// addressed through per-sequence block tables:
// !kiln.page_pool<5 x 4 x 8, page 16, f32>.
def Kiln_PagePoolType : Kiln_Type<"PagePool", "page_pool"> {
  let summary = "paged KV cache of all layers";
  let parameters = (ins "int64_t":$layers, "int64_t":$kvHeads, "int64_t":$headDim,
                        "int64_t":$pageSize, "Type":$elementType);
  let assemblyFormat = "`<` $layers `x` $kvHeads `x` $headDim `,` `page` $pageSize `,` $elementType `>`";
}

#endif // KILN_TYPES_TD

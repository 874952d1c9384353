//===- KilnBase.td - the kiln dialect, its enums and attributes -*- tablegen -*-===//
//
// The kiln dialect describes one step of a Llama-family model over a ragged
// batch: activations are `tensor<?xNxf32>` (one row per token of the flat
// batch), weights are `!kiln.weight` values that name a tensor of the model
// file and its storage type, never its data.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_BASE_TD
#define KILN_BASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let summary = "Llama-family model steps over ragged batches";
  let description = [{
    Ops for token embedding, RMS norm, matmul against named weights, rotary
    embedding, grouped-query attention over a KV cache (contiguous or paged),
    elementwise ops, logits and argmax, plus the fused ops that kiln's passes
    create and the kernel-launch plan they end in.
  }];
  let cppNamespace = "::mlir::kiln";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

//===----------------------------------------------------------------------===//
// Weight storage
//===----------------------------------------------------------------------===//

def Kiln_StorageKind : I32EnumAttr<"StorageKind", "how a weight is stored", [
    I32EnumAttrCase<"f32", 0>,
    I32EnumAttrCase<"f16", 1>,
    I32EnumAttrCase<"bf16", 2>,
    I32EnumAttrCase<"q8_0", 3>,
    I32EnumAttrCase<"q4_0", 4>,
    I32EnumAttrCase<"q4_1", 5>,
    I32EnumAttrCase<"q5_0", 6>,
    I32EnumAttrCase<"q5_1", 7>,
    I32EnumAttrCase<"q2_k", 8>,
    I32EnumAttrCase<"q3_k", 9>,
    I32EnumAttrCase<"q4_k", 10>,
    I32EnumAttrCase<"q5_k", 11>,
    I32EnumAttrCase<"q6_k", 12>,
    I32EnumAttrCase<"int4", 13>,
    I32EnumAttrCase<"int2", 14>
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::kiln";
}

// Example: #kiln.storage<q4_k>, #kiln.storage<int4, group = 128>
def Kiln_StorageAttr : AttrDef<Kiln_Dialect, "Storage"> {
  let mnemonic = "storage";
  let summary = "storage type of a weight (with a group size for int4/int2)";
  let parameters = (ins EnumParameter<Kiln_StorageKind>:$kind,
                        DefaultValuedParameter<"int64_t", "0">:$group);
  let assemblyFormat = "`<` $kind (`,` `group` `=` $group^)? `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    // Elements per quantisation block (1 for plain types).
    int64_t blockElements() const;
    // Bytes of `n` elements stored this way; n must be whole blocks.
    int64_t bytesFor(int64_t n) const;
  }];
}

//===----------------------------------------------------------------------===//
// Fused epilogues
//===----------------------------------------------------------------------===//

def Kiln_Epilogue : I32EnumAttr<"Epilogue", "what a fused matmul does after the products", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"silu_mul", 1>,
    I32EnumAttrCase<"residual_add", 2>
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::kiln";
}

// Example: #kiln<epilogue silu_mul>
def Kiln_EpilogueAttr : EnumAttr<Kiln_Dialect, Kiln_Epilogue, "epilogue">;

#endif // KILN_BASE_TD

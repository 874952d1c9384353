//===- KilnOps.td - kiln ops -----------------------------------*- tablegen -*-===//

#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "KilnBase.td"
include "KilnTypes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Kiln_Op<string mnemonic, list<Trait> traits = []> : Op<Kiln_Dialect, mnemonic, traits>;

// One row per token of the flat batch: tensor<?xNxf32>.
def Kiln_Activation : 2DTensorOf<[F32]>;
// Per-token or per-sequence integers: tensor<?xi32>.
def Kiln_IndexVector : 1DTensorOf<[I32]>;
def Kiln_Matrix : Type<CPred<"::llvm::isa<::mlir::kiln::WeightType>($_self) && "
                             "::llvm::cast<::mlir::kiln::WeightType>($_self).getShape().size() == 2">,
                       "a 2-D !kiln.weight">;
def Kiln_Vector : Type<CPred<"::llvm::isa<::mlir::kiln::WeightType>($_self) && "
                             "::llvm::cast<::mlir::kiln::WeightType>($_self).getShape().size() == 1">,
                       "a 1-D !kiln.weight">;

//===----------------------------------------------------------------------===//
// kiln.weight
//===----------------------------------------------------------------------===//

def Kiln_WeightOp : Kiln_Op<"weight", [Pure]> {
  let summary = "names a tensor of the model file";
  let description = [{
    The result stands for the tensor `name` of the model file, in the storage
    its type gives. `source` is the storage of the file where it differs
    (set by kiln-quantize, which also records the `repack` transform the
    artifact writer applies).

    ```mlir
    %w = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
    ```
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<Kiln_StorageAttr>:$source,
                       OptionalAttr<StrAttr>:$repack);
  let results = (outs AnyTypeOf<[Kiln_Matrix, Kiln_Vector]>:$result);
  let assemblyFormat = "$name attr-dict `:` qualified(type($result))";
}

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

def Kiln_EmbeddingOp : Kiln_Op<"embedding", [Pure]> {
  let summary = "rows of the embedding table for each token";
  let description = [{
    ```mlir
    %x = kiln.embedding %table, %tokens : (!kiln.weight<[512, 64], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Matrix:$table, Kiln_IndexVector:$tokens);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_RmsNormOp : Kiln_Op<"rms_norm", [Pure]> {
  let summary = "x / sqrt(mean(x^2) + eps) * gamma, per row";
  let arguments = (ins Kiln_Activation:$input, Kiln_Vector:$gamma, F64Attr:$eps);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_MatmulOp : Kiln_Op<"matmul", [Pure]> {
  let summary = "x times the transpose of a [N, K] weight";
  let description = [{
    ```mlir
    %q = kiln.matmul %x, %wq : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Kiln_Activation:$input, Kiln_Matrix:$weight);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_BiasAddOp : Kiln_Op<"bias_add", [Pure]> {
  let summary = "adds a bias vector to every row";
  let arguments = (ins Kiln_Activation:$input, Kiln_Vector:$bias);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_RopeOp : Kiln_Op<"rope", [Pure]> {
  let summary = "rotary position embedding of every head of every token";
  let description = [{
    `config` holds `theta` (f64), `dims` (rotated dimensions per head, i64),
    `style` ("interleaved": pairs (2i, 2i+1), as GGUF llama files; "half":
    pairs (i, i + dims/2), as HF checkpoints and qwen2), `scaling` ("none",
    "linear", "yarn", "llama3") and `factor` (f64).
  }];
  let arguments = (ins Kiln_Activation:$input, Kiln_IndexVector:$positions, I64Attr:$num_heads,
                       I64Attr:$head_dim, DictionaryAttr:$config);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_AttentionOp : Kiln_Op<"attention"> {
  let summary = "causal grouped-query attention that appends this step's K/V to the cache";
  let description = [{
    For every sequence s of the ragged batch (tokens query_starts[s] to
    query_starts[s+1]), appends the step's keys and values at their positions
    to the cache row `cache_slots[s]` of layer `layer`, then attends each query
    causally over the first context_lens[s] cached positions. Query head h
    reads KV head h / (num_heads / num_kv_heads). With `rope` set (by
    kiln-fuse), the rotary embedding of q and k is part of the op.
  }];
  let arguments = (ins Kiln_Activation:$q, Kiln_Activation:$k, Kiln_Activation:$v,
                       Arg<Kiln_KVCacheType, "", [MemRead, MemWrite]>:$cache,
                       Kiln_IndexVector:$positions, Kiln_IndexVector:$query_starts,
                       Kiln_IndexVector:$context_lens, Kiln_IndexVector:$cache_slots,
                       I64Attr:$layer, I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       F64Attr:$scale, OptionalAttr<DictionaryAttr>:$rope);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_PagedAttentionOp : Kiln_Op<"paged_attention"> {
  let summary = "kiln.attention over a page pool addressed through block tables";
  let description = [{
    As kiln.attention, but position p of sequence s lives in page
    block_tables[s][p / page_size] at row p % page_size of the pool.
  }];
  let arguments = (ins Kiln_Activation:$q, Kiln_Activation:$k, Kiln_Activation:$v,
                       Arg<Kiln_PagePoolType, "", [MemRead, MemWrite]>:$pool,
                       Kiln_IndexVector:$positions, Kiln_IndexVector:$query_starts,
                       Kiln_IndexVector:$context_lens, 2DTensorOf<[I32]>:$block_tables,
                       I64Attr:$layer, I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       F64Attr:$scale, OptionalAttr<DictionaryAttr>:$rope);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_SiluOp : Kiln_Op<"silu", [Pure, SameOperandsAndResultType]> {
  let summary = "x * sigmoid(x)";
  let arguments = (ins Kiln_Activation:$input);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Kiln_MulOp : Kiln_Op<"mul", [Pure, Commutative, SameOperandsAndResultType]> {
  let summary = "elementwise product";
  let arguments = (ins Kiln_Activation:$lhs, Kiln_Activation:$rhs);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kiln_AddOp : Kiln_Op<"add", [Pure, Commutative, SameOperandsAndResultType]> {
  let summary = "elementwise sum";
  let arguments = (ins Kiln_Activation:$lhs, Kiln_Activation:$rhs);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Kiln_GatherRowsOp : Kiln_Op<"gather_rows", [Pure]> {
  let summary = "the rows listed in `rows` (e.g. the tokens whose logits are wanted)";
  let arguments = (ins Kiln_Activation:$input, Kiln_IndexVector:$rows);
  let results = (outs Kiln_Activation:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Kiln_ArgmaxOp : Kiln_Op<"argmax", [Pure]> {
  let summary = "index of the largest element of each row (lowest index on ties)";
  let arguments = (ins Kiln_Activation:$input);
  let results = (outs Kiln_IndexVector:$result);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Fused ops (created by kiln-fuse)
//===----------------------------------------------------------------------===//

def Kiln_FusedMatmulOp : Kiln_Op<"fused_matmul", [Pure, AttrSizedOperandSegments]> {
  let summary = "optional RMS-norm prologue, several matmuls of one input, an epilogue";
  let description = [{
    y = norm ? rms_norm(input, norm, eps) : input; p_i = y times weight_i
    transposed. Epilogue `none` returns every p_i; `silu_mul` (two weights)
    returns silu(p_0) * p_1; `residual_add` (one weight) returns p_0 + residual.

    ```mlir
    %q, %k, %v = kiln.fused_matmul %x norm(%g) weights(%wq, %wk, %wv) {eps = 1.0e-05 : f64, epilogue = #kiln<epilogue none>} : ...
    ```
  }];
  let arguments = (ins Kiln_Activation:$input, Optional<Kiln_Vector>:$norm, Variadic<Kiln_Matrix>:$weights,
                       Optional<Kiln_Activation>:$residual, OptionalAttr<F64Attr>:$eps,
                       Kiln_EpilogueAttr:$epilogue);
  let results = (outs Variadic<Kiln_Activation>:$results);
  let assemblyFormat = [{
    $input (`norm` `(` $norm^ `)`)? `weights` `(` $weights `)` (`residual` `(` $residual^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The launch plan (created by kiln-emit-plan)
//===----------------------------------------------------------------------===//

def Kiln_PlanOp : Kiln_Op<"plan", [IsolatedFromAbove, NoTerminator, SingleBlock]> {
  let summary = "the ordered kernel launches of one step function";
  let description = [{
    The plan of the step function `func`: `buckets` are the token counts the
    arena was planned for and `arena_bytes` the arena size for each;
    `results` binds each value the function returns (where the logits land);
    the body holds kiln.launch ops in execution order.
  }];
  let arguments = (ins FlatSymbolRefAttr:$func, DenseI64ArrayAttr:$buckets,
                       DenseI64ArrayAttr:$arena_bytes, ArrayAttr:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$func attr-dict-with-keyword $body";
}

def Kiln_LaunchOp : Kiln_Op<"launch", [HasParent<"PlanOp">]> {
  let summary = "one kernel launch: template, buffer bindings, constants";
  let description = [{
    `kernel` names the template; each entry of `bindings` is a dictionary
    with a `role` (what the kernel calls the buffer) and where the buffer
    lives: `{arena = array<i64: offset per bucket>}`, `{weight = "name"}`,
    `{input = "tokens"}` (a function argument, by its `kiln.role`; the KV
    pool is `{input = "kv"}`); `constants` are the template's
    compile-time parameters.
  }];
  let arguments = (ins StrAttr:$kernel, ArrayAttr:$bindings, DictionaryAttr:$constants);
  let assemblyFormat = "$kernel `bindings` $bindings `constants` $constants attr-dict";
}

#endif // KILN_OPS_TD

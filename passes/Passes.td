//===- Passes.td - kiln passes, in pipeline order --------------*- tablegen -*-===//

#ifndef KILN_PASSES_TD
#define KILN_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def KilnFusePass : Pass<"kiln-fuse", "::mlir::ModuleOp"> {
  let summary = "Fuse norms, sibling matmuls, epilogues and rope into fewer kernels";
  let description = [{
    Rewrites, in this order:
    - rms_norm feeding matmuls: the norm becomes the prologue of one
      kiln.fused_matmul over all the sibling weights (QKV and gate/up
      horizontal fusion);
    - silu(gate) * up of one fused_matmul: epilogue silu_mul;
    - add(x, matmul(y, w)): epilogue residual_add;
    - rope of q and k feeding kiln.attention: the attention's `rope`
      attribute (rope + KV append in the attention front).
  }];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

def KilnQuantizePass : Pass<"kiln-quantize", "::mlir::ModuleOp"> {
  let summary = "Choose each weight's storage type from a policy and record its repack";
  let description = [{
    Sets the storage of every 2-D weight from `quant` (empty: keep the
    file's types), with per-tensor `override`s; the embedding table and the
    output head follow the policy's rules for them. Each changed weight gets
    `source` (its storage in the file) and `repack` (the transform the
    artifact writer applies).
  }];
  let options = [
    Option<"quant", "quant", "std::string", /*default=*/"\"\"",
           "target storage: f16|bf16|q8_0|q4_k|int4|int2 (empty: keep the file's types)">,
    ListOption<"overrides", "override", "std::string",
               "per-tensor storage, 'NAME_SUBSTRING=TYPE', first match wins">,
    Option<"groupSize", "group-size", "int64_t", /*default=*/"128",
           "elements per scale for int4 and int2">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

//===----------------------------------------------------------------------===//
// Paged attention
//===----------------------------------------------------------------------===//

def KilnPagedAttentionPass : Pass<"kiln-paged-attention", "::mlir::ModuleOp"> {
  let summary = "Attention over a contiguous cache becomes attention over a page pool";
  let description = [{
    The step function's !kiln.kv_cache argument becomes a !kiln.page_pool of
    `page-size` token pages, its per-sequence cache slots become block tables
    (tensor<?x?xi32>), and every kiln.attention becomes kiln.paged_attention.
    `kv-type` sets the pool's element type (f16 halves the bytes attention
    reads); empty keeps the cache's.
  }];
  let options = [
    Option<"pageSize", "page-size", "int64_t", /*default=*/"16", "token positions per page">,
    Option<"kvType", "kv-type", "std::string", /*default=*/"\"\"", "pool element type: f32 | f16 (empty: the cache's)">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

//===----------------------------------------------------------------------===//
// Memory planning and plan emission
//===----------------------------------------------------------------------===//

def KilnPlanMemoryPass : Pass<"kiln-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Liveness-based arena offsets for every intermediate, per batch bucket";
  let options = [
    ListOption<"buckets", "buckets", "int64_t", "token counts to plan for (default 1,2,4,...,512)">,
    Option<"alignment", "alignment", "int64_t", /*default=*/"256", "byte alignment of every buffer">,
  ];
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

def KilnEmitPlanPass : Pass<"kiln-emit-plan", "::mlir::ModuleOp"> {
  let summary = "The ordered kernel launches, bindings and constants of each step function";
  let dependentDialects = ["::mlir::kiln::KilnDialect"];
}

#endif // KILN_PASSES_TD

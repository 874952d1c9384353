// RUN: kiln-opt %s -split-input-file -verify-diagnostics
// Every verifier error names what disagrees with what.

func.func @matmul_k_mismatch(%x: tensor<?x64xf32>) {
  %w = kiln.weight "w" : !kiln.weight<[32, 48], #kiln.storage<f32>>
  // expected-error @+1 {{input width 64 does not match the weight's row length (K) (48)}}
  %y = kiln.matmul %x, %w : (tensor<?x64xf32>, !kiln.weight<[32, 48], #kiln.storage<f32>>) -> tensor<?x32xf32>
  return
}

// -----

func.func @matmul_n_mismatch(%x: tensor<?x64xf32>) {
  %w = kiln.weight "w" : !kiln.weight<[32, 64], #kiln.storage<f32>>
  // expected-error @+1 {{result width 16 does not match the weight's row count (N) (32)}}
  %y = kiln.matmul %x, %w : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x16xf32>
  return
}

// -----

func.func @dynamic_width(%x: tensor<?x?xf32>) {
  %w = kiln.weight "w" : !kiln.weight<[32, 64], #kiln.storage<f32>>
  // expected-error @+1 {{input must have a static feature width}}
  %y = kiln.matmul %x, %w : (tensor<?x?xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x32xf32>
  return
}

// -----

func.func @partial_block() {
  // expected-error @+1 {{weight row length 48 is not a multiple of the q4_k block of 256 elements}}
  %w = kiln.weight "w" : !kiln.weight<[32, 48], #kiln.storage<q4_k>>
  return
}

// -----

func.func @bad_group() {
  // expected-error @+2 {{storage int4 needs a group size that is a positive multiple of 8, got 0}}
  // expected-error @+1 {{failed to parse Kiln_WeightType parameter 'storage'}}
  %w = kiln.weight "w" : !kiln.weight<[32, 64], #kiln.storage<int4>>
  return
}

// -----

func.func @norm_width(%x: tensor<?x64xf32>) {
  %g = kiln.weight "g" : !kiln.weight<[32], #kiln.storage<f32>>
  // expected-error @+1 {{input width 64 does not match the gamma length (32)}}
  %y = kiln.rms_norm %x, %g {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[32], #kiln.storage<f32>>) -> tensor<?x64xf32>
  return
}

// -----

func.func @gqa_heads(%q: tensor<?x64xf32>, %k: tensor<?x24xf32>, %c: !kiln.kv_cache<1 x 3 x 8 x 64, f32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{num_heads 8 is not a multiple of num_kv_heads 3}}
  %a = kiln.attention %q, %k, %k, %c, %p, %p, %p, %p {layer = 0, num_heads = 8, num_kv_heads = 3, head_dim = 8, scale = 0.35} : (tensor<?x64xf32>, tensor<?x24xf32>, tensor<?x24xf32>, !kiln.kv_cache<1 x 3 x 8 x 64, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @attention_layer(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %c: !kiln.kv_cache<2 x 4 x 8 x 64, f32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{layer 2 is outside the cache's 2 layers}}
  %a = kiln.attention %q, %k, %k, %c, %p, %p, %p, %p {layer = 2, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<2 x 4 x 8 x 64, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_style(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{rope style must be "interleaved" or "half", got "sideways"}}
  %y = kiln.rope %x, %p {num_heads = 8, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "sideways"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rope_dims(%x: tensor<?x64xf32>, %p: tensor<?xi32>) {
  // expected-error @+1 {{rope dims 10 must be even and at most the head dimension 8}}
  %y = kiln.rope %x, %p {num_heads = 8, head_dim = 8, config = {theta = 10000.0 : f64, dims = 10, style = "half"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @silu_mul_arity(%x: tensor<?x64xf32>) {
  %w = kiln.weight "w" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  // expected-error @+1 {{epilogue silu_mul takes two weights (gate, up), no residual, and returns one result}}
  %y = kiln.fused_matmul %x weights(%w) {epilogue = #kiln<epilogue silu_mul>} : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  return
}

// -----

func.func @norm_without_eps(%x: tensor<?x64xf32>) {
  %g = kiln.weight "g" : !kiln.weight<[64], #kiln.storage<f32>>
  %w = kiln.weight "w" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  // expected-error @+1 {{a norm prologue needs eps}}
  %y = kiln.fused_matmul %x norm(%g) weights(%w) {epilogue = #kiln<epilogue none>} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  return
}

// -----

func.func @embedding_width(%t: tensor<?xi32>) {
  %e = kiln.weight "e" : !kiln.weight<[512, 64], #kiln.storage<f32>>
  // expected-error @+1 {{result width 32 does not match the embedding table's row length (64)}}
  %x = kiln.embedding %e, %t : (!kiln.weight<[512, 64], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @weight_is_3d() {
  // expected-error @+1 {{weight must be 1-D or 2-D, got 3 dimensions}}
  %w = kiln.weight "w" : !kiln.weight<[2, 2, 2], #kiln.storage<f32>>
  return
}

// -----

func.func @bad_storage() {
  // expected-error @+3 {{expected ::mlir::kiln::StorageKind to be one of: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, int4, int2}}
  // expected-error @+2 {{failed to parse Kiln_StorageAttr parameter 'kind'}}
  // expected-error @+1 {{failed to parse Kiln_WeightType parameter 'storage'}}
  %w = kiln.weight "w" : !kiln.weight<[2, 32], #kiln.storage<q7_x>>
  return
}

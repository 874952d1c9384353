// RUN: kiln-opt %s -split-input-file | kiln-opt -split-input-file | FileCheck %s
// Round trip: every op and type prints in a form that parses back to itself.

// CHECK-LABEL: func.func @layer
func.func @layer(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %query_starts: tensor<?xi32>,
                 %context_lens: tensor<?xi32>, %slots: tensor<?xi32>,
                 %cache: !kiln.kv_cache<1 x 4 x 8 x 2048, f32>) -> tensor<?xi32> {
  // CHECK: %[[EMB:.*]] = kiln.weight "token_embd.weight" : !kiln.weight<[512, 64], #kiln.storage<f32>>
  %emb = kiln.weight "token_embd.weight" : !kiln.weight<[512, 64], #kiln.storage<f32>>
  %g = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  // CHECK: kiln.weight "blk.0.attn_q.weight" {repack = "q4_k", source = #kiln.storage<f32>} : !kiln.weight<[64, 256], #kiln.storage<q4_k>>
  %wq = kiln.weight "blk.0.attn_q.weight" {source = #kiln.storage<f32>, repack = "q4_k"} : !kiln.weight<[64, 256], #kiln.storage<q4_k>>
  // CHECK: !kiln.weight<[32, 256], #kiln.storage<int4, group = 128>>
  %wk = kiln.weight "blk.0.attn_k.weight" : !kiln.weight<[32, 256], #kiln.storage<int4, group = 128>>
  %wv = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[32, 64], #kiln.storage<f32>>
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %bq = kiln.weight "blk.0.attn_q.bias" : !kiln.weight<[64], #kiln.storage<f32>>
  // CHECK: kiln.embedding %[[EMB]], %{{.*}} : (!kiln.weight<[512, 64], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x64xf32>
  %x = kiln.embedding %emb, %tokens : (!kiln.weight<[512, 64], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x64xf32>
  // CHECK: kiln.rms_norm
  // CHECK-SAME: eps = 1.000000e-05
  %n = kiln.rms_norm %x, %g {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %q0 = kiln.matmul %n, %wv : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %v = kiln.matmul %n, %wv : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %q1 = kiln.matmul %n, %wo : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %q = kiln.bias_add %q1, %bq : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  // CHECK: kiln.rope {{.*}} {config = {dims = 8 : i64, style = "interleaved", theta = 1.000000e+04 : f64}, head_dim = 8 : i64, num_heads = 8 : i64}
  %qr = kiln.rope %q, %positions {num_heads = 8, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = kiln.rope %q0, %positions {num_heads = 4, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  // CHECK: kiln.attention
  %a = kiln.attention %qr, %kr, %v, %cache, %positions, %query_starts, %context_lens, %slots {layer = 0, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35355339059327373} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  %s = kiln.silu %a : tensor<?x64xf32>
  %m = kiln.mul %s, %a : tensor<?x64xf32>
  %r = kiln.add %m, %x : tensor<?x64xf32>
  %last = kiln.gather_rows %r, %query_starts : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  // CHECK: kiln.argmax
  %ids = kiln.argmax %last : (tensor<?x64xf32>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}

// -----

// CHECK-LABEL: func.func @fused
func.func @fused(%x: tensor<?x64xf32>, %pool: !kiln.page_pool<1 x 4 x 8, page 16, f32>, %tables: tensor<?x?xi32>,
                 %p: tensor<?xi32>) -> tensor<?x64xf32> {
  %g = kiln.weight "g" : !kiln.weight<[64], #kiln.storage<f32>>
  %wq = kiln.weight "q" : !kiln.weight<[64, 64], #kiln.storage<q8_0>>
  %wk = kiln.weight "k" : !kiln.weight<[32, 64], #kiln.storage<q8_0>>
  %wv = kiln.weight "v" : !kiln.weight<[32, 64], #kiln.storage<q8_0>>
  %wg = kiln.weight "gate" : !kiln.weight<[128, 64], #kiln.storage<f16>>
  %wu = kiln.weight "up" : !kiln.weight<[128, 64], #kiln.storage<f16>>
  %wd = kiln.weight "down" : !kiln.weight<[64, 128], #kiln.storage<f16>>
  // CHECK: %{{.*}}:3 = kiln.fused_matmul %{{.*}} norm(%{{.*}}) weights(%{{.*}}, %{{.*}}, %{{.*}}) {epilogue = #kiln<epilogue none>, eps = 1.000000e-05 : f64}
  %q, %k, %v = kiln.fused_matmul %x norm(%g) weights(%wq, %wk, %wv) {eps = 1.0e-5 : f64, epilogue = #kiln<epilogue none>} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>, !kiln.weight<[64, 64], #kiln.storage<q8_0>>, !kiln.weight<[32, 64], #kiln.storage<q8_0>>, !kiln.weight<[32, 64], #kiln.storage<q8_0>>) -> (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>)
  // CHECK: kiln.paged_attention {{.*}} rope = {dims = 8 : i64, style = "half", theta = 1.000000e+06 : f64}
  %a = kiln.paged_attention %q, %k, %v, %pool, %p, %p, %p, %tables {layer = 0, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35355339059327373, rope = {theta = 1000000.0 : f64, dims = 8, style = "half"}} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.page_pool<1 x 4 x 8, page 16, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x?xi32>) -> tensor<?x64xf32>
  // CHECK: kiln.fused_matmul {{.*}}{epilogue = #kiln<epilogue silu_mul>
  %h = kiln.fused_matmul %a norm(%g) weights(%wg, %wu) {eps = 1.0e-5 : f64, epilogue = #kiln<epilogue silu_mul>} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>, !kiln.weight<[128, 64], #kiln.storage<f16>>, !kiln.weight<[128, 64], #kiln.storage<f16>>) -> tensor<?x128xf32>
  // CHECK: kiln.fused_matmul {{.*}} residual(%{{.*}}) {epilogue = #kiln<epilogue residual_add>}
  %o = kiln.fused_matmul %h weights(%wd) residual(%x) {epilogue = #kiln<epilogue residual_add>} : (tensor<?x128xf32>, !kiln.weight<[64, 128], #kiln.storage<f16>>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}

// -----

// CHECK-LABEL: kiln.plan @step
// CHECK: kiln.launch "rms_norm" bindings [{arena = array<i64: 0, 256>, role = "x"}, {role = "gamma", weight = "g"}] constants {width = 64 : i64}
kiln.plan @step attributes {buckets = array<i64: 1, 4>, arena_bytes = array<i64: 512, 2048>, results = [{role = "result0", arena = array<i64: 0, 0>}]} {
  kiln.launch "rms_norm" bindings [{role = "x", arena = array<i64: 0, 256>}, {role = "gamma", weight = "g"}] constants {width = 64}
}

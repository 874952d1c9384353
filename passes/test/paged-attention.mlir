// RUN: kiln-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics --kiln-paged-attention | FileCheck %s
// RUN: kiln-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics --kiln-paged-attention=page-size=32 | FileCheck %s --check-prefix=P32
// RUN: not kiln-opt %s -split-input-file -allow-unregistered-dialect --kiln-paged-attention=page-size=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not kiln-opt %s -split-input-file -allow-unregistered-dialect --kiln-paged-attention=page-size=-8 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: kiln-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics "--kiln-paged-attention=kv-type=f16" | FileCheck %s --check-prefix=F16
// RUN: kiln-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics "--kiln-paged-attention=kv-type=f32" | FileCheck %s --check-prefix=F32
// RUN: not kiln-opt %s -split-input-file -allow-unregistered-dialect "--kiln-paged-attention=kv-type=bf16" 2>&1 | FileCheck %s --check-prefix=BAD

// ZERO: error: kiln-paged-attention: page-size must be positive, got 0
// NEG: error: kiln-paged-attention: page-size must be positive, got -8
// BAD: error: kiln-paged-attention: kv-type must be f32 or f16, got 'bf16'

// kv-type sets the pool's element type, whatever the cache's (f32 in
// @step, f16 in @slots_without_roles); the attentions read that pool.
// F16-LABEL: func.func @step(
// F16-SAME: !kiln.page_pool<2 x 1 x 8, page 16, f16> {kiln.max_tokens = 256 : i64, kiln.role = "kv"})
// F16-COUNT-2: kiln.paged_attention {{.*}} !kiln.page_pool<2 x 1 x 8, page 16, f16>
// F16-LABEL: func.func @slots_without_roles(
// F16-SAME: !kiln.page_pool<1 x 1 x 8, page 16, f16>
// F32-LABEL: func.func @step(
// F32-SAME: !kiln.page_pool<2 x 1 x 8, page 16, f32>
// F32-LABEL: func.func @slots_without_roles(
// F32-SAME: !kiln.page_pool<1 x 1 x 8, page 16, f32>

// A two-layer step as the importer writes it: the cache argument becomes a
// page pool (its positions per slot kept as kiln.max_tokens), cache_slots
// becomes block_tables, and both attentions become paged ones.

// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[POS:[^:]*]]: tensor<?xi32> {kiln.role = "positions"}
// CHECK-SAME: %[[TABLES:[^:]*]]: tensor<?x?xi32> {kiln.role = "block_tables"}
// CHECK-SAME: %[[POOL:[^:]*]]: !kiln.page_pool<2 x 1 x 8, page 16, f32> {kiln.max_tokens = 256 : i64, kiln.role = "kv"})
// CHECK-SAME: -> tensor<?x32xf32>
// CHECK-NOT: kiln.attention
// CHECK: kiln.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %[[POOL]], %[[POS]], %{{.*}}, %{{.*}}, %[[TABLES]]
// CHECK-SAME: {head_dim = 8 : i64, layer = 0 : i64, num_heads = 2 : i64, num_kv_heads = 1 : i64, scale = 0.35355339059327373 : f64}
// CHECK-SAME: !kiln.page_pool<2 x 1 x 8, page 16, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x?xi32>) -> tensor<?x16xf32>
// CHECK-NOT: kiln.attention
// CHECK: kiln.paged_attention %{{.*}}, %{{.*}}, %{{.*}}, %[[POOL]], %[[POS]], %{{.*}}, %{{.*}}, %[[TABLES]]
// CHECK-SAME: layer = 1 : i64
// CHECK-NOT: kiln.attention
// CHECK: return

// P32-LABEL: func.func @step(
// P32-SAME: !kiln.page_pool<2 x 1 x 8, page 32, f32> {kiln.max_tokens = 256 : i64, kiln.role = "kv"})
// P32-COUNT-2: kiln.paged_attention {{.*}} !kiln.page_pool<2 x 1 x 8, page 32, f32>
func.func @step(%tokens: tensor<?xi32> {kiln.role = "tokens"}, %positions: tensor<?xi32> {kiln.role = "positions"},
    %query_starts: tensor<?xi32> {kiln.role = "query_starts"}, %context_lens: tensor<?xi32> {kiln.role = "context_lens"},
    %cache_slots: tensor<?xi32> {kiln.role = "cache_slots"}, %logit_rows: tensor<?xi32> {kiln.role = "logit_rows"},
    %kv: !kiln.kv_cache<2 x 1 x 8 x 256, f32> {kiln.role = "kv"}) -> tensor<?x32xf32> {
  %emb = kiln.weight "token_embd.weight" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %g0 = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[16], #kiln.storage<f32>>
  %wq0 = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[16, 16], #kiln.storage<f32>>
  %wk0 = kiln.weight "blk.0.attn_k.weight" : !kiln.weight<[8, 16], #kiln.storage<f32>>
  %wv0 = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[8, 16], #kiln.storage<f32>>
  %wo0 = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[16, 16], #kiln.storage<f32>>
  %f0 = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[16], #kiln.storage<f32>>
  %wg0 = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %wu0 = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %wd0 = kiln.weight "blk.0.ffn_down.weight" : !kiln.weight<[16, 32], #kiln.storage<f32>>
  %g1 = kiln.weight "blk.1.attn_norm.weight" : !kiln.weight<[16], #kiln.storage<f32>>
  %wq1 = kiln.weight "blk.1.attn_q.weight" : !kiln.weight<[16, 16], #kiln.storage<f32>>
  %wk1 = kiln.weight "blk.1.attn_k.weight" : !kiln.weight<[8, 16], #kiln.storage<f32>>
  %wv1 = kiln.weight "blk.1.attn_v.weight" : !kiln.weight<[8, 16], #kiln.storage<f32>>
  %wo1 = kiln.weight "blk.1.attn_output.weight" : !kiln.weight<[16, 16], #kiln.storage<f32>>
  %f1 = kiln.weight "blk.1.ffn_norm.weight" : !kiln.weight<[16], #kiln.storage<f32>>
  %wg1 = kiln.weight "blk.1.ffn_gate.weight" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %wu1 = kiln.weight "blk.1.ffn_up.weight" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %wd1 = kiln.weight "blk.1.ffn_down.weight" : !kiln.weight<[16, 32], #kiln.storage<f32>>
  %gout = kiln.weight "output_norm.weight" : !kiln.weight<[16], #kiln.storage<f32>>
  %wout = kiln.weight "output.weight" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %x0 = kiln.embedding %emb, %tokens : (!kiln.weight<[32, 16], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x16xf32>
  %n0 = kiln.rms_norm %x0, %g0 {eps = 1.0e-5 : f64} : (tensor<?x16xf32>, !kiln.weight<[16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %q0 = kiln.matmul %n0, %wq0 : (tensor<?x16xf32>, !kiln.weight<[16, 16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %k0 = kiln.matmul %n0, %wk0 : (tensor<?x16xf32>, !kiln.weight<[8, 16], #kiln.storage<f32>>) -> tensor<?x8xf32>
  %v0 = kiln.matmul %n0, %wv0 : (tensor<?x16xf32>, !kiln.weight<[8, 16], #kiln.storage<f32>>) -> tensor<?x8xf32>
  %qr0 = kiln.rope %q0, %positions {num_heads = 2, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x16xf32>, tensor<?xi32>) -> tensor<?x16xf32>
  %kr0 = kiln.rope %k0, %positions {num_heads = 1, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  %a0 = kiln.attention %qr0, %kr0, %v0, %kv, %positions, %query_starts, %context_lens, %cache_slots {layer = 0, num_heads = 2, num_kv_heads = 1, head_dim = 8, scale = 0.35355339059327373 : f64} : (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<2 x 1 x 8 x 256, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
  %o0 = kiln.matmul %a0, %wo0 : (tensor<?x16xf32>, !kiln.weight<[16, 16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %h0 = kiln.add %x0, %o0 : tensor<?x16xf32>
  %m0 = kiln.rms_norm %h0, %f0 {eps = 1.0e-5 : f64} : (tensor<?x16xf32>, !kiln.weight<[16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %gt0 = kiln.matmul %m0, %wg0 : (tensor<?x16xf32>, !kiln.weight<[32, 16], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %up0 = kiln.matmul %m0, %wu0 : (tensor<?x16xf32>, !kiln.weight<[32, 16], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %s0 = kiln.silu %gt0 : tensor<?x32xf32>
  %p0 = kiln.mul %s0, %up0 : tensor<?x32xf32>
  %d0 = kiln.matmul %p0, %wd0 : (tensor<?x32xf32>, !kiln.weight<[16, 32], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %x1 = kiln.add %h0, %d0 : tensor<?x16xf32>
  %n1 = kiln.rms_norm %x1, %g1 {eps = 1.0e-5 : f64} : (tensor<?x16xf32>, !kiln.weight<[16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %q1 = kiln.matmul %n1, %wq1 : (tensor<?x16xf32>, !kiln.weight<[16, 16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %k1 = kiln.matmul %n1, %wk1 : (tensor<?x16xf32>, !kiln.weight<[8, 16], #kiln.storage<f32>>) -> tensor<?x8xf32>
  %v1 = kiln.matmul %n1, %wv1 : (tensor<?x16xf32>, !kiln.weight<[8, 16], #kiln.storage<f32>>) -> tensor<?x8xf32>
  %qr1 = kiln.rope %q1, %positions {num_heads = 2, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x16xf32>, tensor<?xi32>) -> tensor<?x16xf32>
  %kr1 = kiln.rope %k1, %positions {num_heads = 1, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  %a1 = kiln.attention %qr1, %kr1, %v1, %kv, %positions, %query_starts, %context_lens, %cache_slots {layer = 1, num_heads = 2, num_kv_heads = 1, head_dim = 8, scale = 0.35355339059327373 : f64} : (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<2 x 1 x 8 x 256, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x16xf32>
  %o1 = kiln.matmul %a1, %wo1 : (tensor<?x16xf32>, !kiln.weight<[16, 16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %h1 = kiln.add %x1, %o1 : tensor<?x16xf32>
  %m1 = kiln.rms_norm %h1, %f1 {eps = 1.0e-5 : f64} : (tensor<?x16xf32>, !kiln.weight<[16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %gt1 = kiln.matmul %m1, %wg1 : (tensor<?x16xf32>, !kiln.weight<[32, 16], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %up1 = kiln.matmul %m1, %wu1 : (tensor<?x16xf32>, !kiln.weight<[32, 16], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %s1 = kiln.silu %gt1 : tensor<?x32xf32>
  %p1 = kiln.mul %s1, %up1 : tensor<?x32xf32>
  %d1 = kiln.matmul %p1, %wd1 : (tensor<?x32xf32>, !kiln.weight<[16, 32], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %x2 = kiln.add %h1, %d1 : tensor<?x16xf32>
  %last = kiln.gather_rows %x2, %logit_rows : (tensor<?x16xf32>, tensor<?xi32>) -> tensor<?x16xf32>
  %nl = kiln.rms_norm %last, %gout {eps = 1.0e-5 : f64} : (tensor<?x16xf32>, !kiln.weight<[16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %logits = kiln.matmul %nl, %wout : (tensor<?x16xf32>, !kiln.weight<[32, 16], #kiln.storage<f32>>) -> tensor<?x32xf32>
  return %logits : tensor<?x32xf32>
}


// -----

// After kiln-fuse: the rope lives in the attention's `rope`, which is kept
// along with every other attribute, discardable ones included.

// CHECK-LABEL: func.func @fused_rope(
// CHECK-SAME: tensor<?x?xi32> {kiln.role = "block_tables"}
// CHECK-SAME: !kiln.page_pool<1 x 2 x 8, page 16, f32> {kiln.max_tokens = 1024 : i64, kiln.role = "kv"}
// CHECK: %[[A:.*]] = kiln.paged_attention
// CHECK-SAME: kiln.note = "kept"
// CHECK-SAME: layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64
// CHECK-SAME: rope = {dims = 8 : i64, style = "half", theta = 1.000000e+06 : f64}
// CHECK-SAME: scale = 0.35355339059327373 : f64
// CHECK: return %[[A]]
// P32-LABEL: func.func @fused_rope(
// P32: kiln.paged_attention {{.*}}rope = {dims = 8 : i64, style = "half", theta = 1.000000e+06 : f64}
func.func @fused_rope(%q: tensor<?x32xf32>, %k: tensor<?x16xf32>, %v: tensor<?x16xf32>,
                      %positions: tensor<?xi32> {kiln.role = "positions"}, %query_starts: tensor<?xi32> {kiln.role = "query_starts"},
                      %context_lens: tensor<?xi32> {kiln.role = "context_lens"}, %cache_slots: tensor<?xi32> {kiln.role = "cache_slots"},
                      %kv: !kiln.kv_cache<1 x 2 x 8 x 1024, f32> {kiln.role = "kv"}) -> tensor<?x32xf32> {
  %a = kiln.attention %q, %k, %v, %kv, %positions, %query_starts, %context_lens, %cache_slots {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 8, scale = 0.35355339059327373 : f64, rope = {theta = 1000000.0 : f64, dims = 8, style = "half"}, kiln.note = "kept"} : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>, !kiln.kv_cache<1 x 2 x 8 x 1024, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x32xf32>
  return %a : tensor<?x32xf32>
}

// -----

// Without roles the slots are found through the attention that reads them.

// CHECK-LABEL: func.func @slots_without_roles(
// CHECK-SAME: %{{[^:]*}}: tensor<?x?xi32> {kiln.role = "block_tables"}, %{{[^:]*}}: !kiln.page_pool<1 x 1 x 8, page 16, f16> {kiln.max_tokens = 64 : i64})
// CHECK: kiln.paged_attention
func.func @slots_without_roles(%x: tensor<?x8xf32>, %p: tensor<?xi32>, %slots: tensor<?xi32>,
                               %kv: !kiln.kv_cache<1 x 1 x 8 x 64, f16>) -> tensor<?x8xf32> {
  %a = kiln.attention %x, %x, %x, %kv, %p, %p, %p, %slots {layer = 0, num_heads = 1, num_kv_heads = 1, head_dim = 8, scale = 0.35355339059327373 : f64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1 x 1 x 8 x 64, f16>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// -----

// A function without attention keeps the signature the runtime binds: its
// cache and slots change all the same.

// CHECK-LABEL: func.func @embed_only(
// CHECK-SAME: tensor<?x?xi32> {kiln.role = "block_tables"}, %{{[^:]*}}: !kiln.page_pool<2 x 1 x 8, page 16, f32> {kiln.max_tokens = 128 : i64, kiln.role = "kv"})
func.func @embed_only(%tokens: tensor<?xi32> {kiln.role = "tokens"}, %cache_slots: tensor<?xi32> {kiln.role = "cache_slots"},
                      %kv: !kiln.kv_cache<2 x 1 x 8 x 128, f32> {kiln.role = "kv"}) -> tensor<?x8xf32> {
  %emb = kiln.weight "token_embd.weight" : !kiln.weight<[32, 8], #kiln.storage<f32>>
  %x = kiln.embedding %emb, %tokens : (!kiln.weight<[32, 8], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x8xf32>
  return %x : tensor<?x8xf32>
}

// -----

func.func @cache_not_an_argument(%x: tensor<?x8xf32>, %p: tensor<?xi32>) -> tensor<?x8xf32> {
  %kv = "test.make_cache"() : () -> !kiln.kv_cache<1 x 1 x 8 x 64, f32>
  // expected-error @-2 {{kiln-paged-attention: @cache_not_an_argument has kiln.attention but no !kiln.kv_cache argument to turn into a page pool}}
  %a = kiln.attention %x, %x, %x, %kv, %p, %p, %p, %p {layer = 0, num_heads = 1, num_kv_heads = 1, head_dim = 8, scale = 0.35355339059327373 : f64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1 x 1 x 8 x 64, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// -----

func.func @slots_computed(%x: tensor<?x8xf32>, %p: tensor<?xi32>, %kv: !kiln.kv_cache<1 x 1 x 8 x 64, f32>) -> tensor<?x8xf32> {
  %slots = kiln.argmax %x : (tensor<?x8xf32>) -> tensor<?xi32>
  // expected-error @+1 {{kiln-paged-attention: cache_slots must be an argument of @slots_computed to become block tables}}
  %a = kiln.attention %x, %x, %x, %kv, %p, %p, %p, %slots {layer = 0, num_heads = 1, num_kv_heads = 1, head_dim = 8, scale = 0.35355339059327373 : f64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1 x 1 x 8 x 64, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{kiln-paged-attention: the cache_slots argument #2 of @slots_read_elsewhere is read by kiln.gather_rows as operand #1; only kiln.attention may read it}}
func.func @slots_read_elsewhere(%x: tensor<?x8xf32>, %p: tensor<?xi32>, %slots: tensor<?xi32>,
                                %kv: !kiln.kv_cache<1 x 1 x 8 x 64, f32>) -> tensor<?x8xf32> {
  %a = kiln.attention %x, %x, %x, %kv, %p, %p, %p, %slots {layer = 0, num_heads = 1, num_kv_heads = 1, head_dim = 8, scale = 0.35355339059327373 : f64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1 x 1 x 8 x 64, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8xf32>
  %r = kiln.gather_rows %a, %slots : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{kiln-paged-attention: the KV cache argument #2 of @cache_read_elsewhere is read by test.use as operand #0; only kiln.attention may read it}}
func.func @cache_read_elsewhere(%x: tensor<?x8xf32>, %p: tensor<?xi32>, %kv: !kiln.kv_cache<1 x 1 x 8 x 64, f32>) -> tensor<?x8xf32> {
  "test.use"(%kv) : (!kiln.kv_cache<1 x 1 x 8 x 64, f32>) -> ()
  %a = kiln.attention %x, %x, %x, %kv, %p, %p, %p, %p {layer = 0, num_heads = 1, num_kv_heads = 1, head_dim = 8, scale = 0.35355339059327373 : f64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1 x 1 x 8 x 64, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

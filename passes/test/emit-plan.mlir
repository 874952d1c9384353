// RUN: kiln-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics --kiln-emit-plan | FileCheck %s
// RUN: kiln-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics --kiln-emit-plan --kiln-emit-plan | FileCheck %s --check-prefix=TWICE
// The three passes in a row (`not`: the invalid cases at the end still fail):
// RUN: not kiln-opt %s -split-input-file -allow-unregistered-dialect --kiln-paged-attention --kiln-plan-memory="buckets=2,8" --kiln-emit-plan 2>/dev/null | FileCheck %s --check-prefix=PIPE

// Inputs carry what kiln-plan-memory wrote (buckets 1 and 4, 256-byte
// alignment), so the plan's bindings can be read off the ops' kiln.arena.

// Unfused and contiguous: every kiln op but the weights is one launch, in
// block order. The function stays, the plan follows it.

// CHECK-LABEL: func.func @unfused(
// CHECK: return
// CHECK-NEXT: }
// CHECK-NEXT: kiln.plan @unfused attributes {arena_bytes = array<i64: 1280, 3584>, buckets = array<i64: 1, 4>,
// CHECK-SAME: results = [{arena = array<i64: 0, 0>, role = "result0"}]}
// CHECK-NEXT: kiln.launch "embedding.f32" bindings [{role = "table", weight = "token_embd.weight"}, {input = "tokens", role = "tokens"}, {arena = array<i64: 0, 0>, role = "result"}] constants {vocab = 64 : i64, width = 32 : i64}
// CHECK-NEXT: kiln.launch "rms_norm" bindings [{arena = array<i64: 0, 0>, role = "input"}, {role = "gamma", weight = "blk.0.attn_norm.weight"}, {arena = array<i64: 256, 512>, role = "result"}] constants {eps = 1.000000e-05 : f64, width = 32 : i64}
// CHECK-NEXT: kiln.launch "matmul.q8_0" bindings [{arena = array<i64: 256, 512>, role = "input"}, {role = "weight", weight = "blk.0.attn_q.weight"}, {arena = array<i64: 512, 1024>, role = "result"}] constants {k = 32 : i64, n = 32 : i64}
// CHECK-NEXT: kiln.launch "bias_add" bindings [{arena = array<i64: 512, 1024>, role = "input"}, {role = "bias", weight = "blk.0.attn_q.bias"}, {arena = array<i64: 768, 1536>, role = "result"}] constants {width = 32 : i64}
// CHECK-NEXT: kiln.launch "matmul.q8_0" {{.*}} constants {k = 32 : i64, n = 16 : i64}
// CHECK-NEXT: kiln.launch "matmul.q8_0" {{.*}} constants {k = 32 : i64, n = 16 : i64}
// CHECK-NEXT: kiln.launch "rope" bindings [{arena = array<i64: 768, 1536>, role = "input"}, {input = "positions", role = "positions"}, {arena = array<i64: 256, 512>, role = "result"}]
// CHECK-SAME: constants {head_dim = 8 : i64, num_heads = 4 : i64, rope_dims = 8 : i64, rope_style = "half", rope_theta = 1.000000e+06 : f64}
// CHECK-NEXT: kiln.launch "rope" {{.*}} constants {head_dim = 8 : i64, num_heads = 2 : i64,
// CHECK-NEXT: kiln.launch "attention" bindings [{arena = array<i64: 256, 512>, role = "q"}, {arena = array<i64: 768, 1536>, role = "k"}, {arena = array<i64: 1024, 2048>, role = "v"},
// CHECK-SAME: {input = "kv", role = "cache"}, {input = "positions", role = "positions"}, {input = "query_starts", role = "query_starts"}, {input = "context_lens", role = "context_lens"}, {input = "cache_slots", role = "cache_slots"}, {arena = array<i64: 512, 1024>, role = "result"}]
// CHECK-SAME: constants {head_dim = 8 : i64, kv_type = "f32", layer = 0 : i64, max_tokens = 512 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 0.35355339059327373 : f64}
// CHECK-NEXT: kiln.launch "matmul.q8_0"
// CHECK-NEXT: kiln.launch "add" bindings [{arena = array<i64: 0, 0>, role = "lhs"}, {arena = array<i64: 256, 512>, role = "rhs"}, {arena = array<i64: 512, 3072>, role = "result"}] constants {width = 32 : i64}
// CHECK-NEXT: kiln.launch "rms_norm"
// CHECK-NEXT: kiln.launch "matmul.q8_0" {{.*}} constants {k = 32 : i64, n = 64 : i64}
// CHECK-NEXT: kiln.launch "matmul.q8_0" {{.*}} constants {k = 32 : i64, n = 64 : i64}
// CHECK-NEXT: kiln.launch "silu" bindings [{arena = array<i64: 256, 0>, role = "input"}, {arena = array<i64: 0, 2048>, role = "result"}] constants {width = 64 : i64}
// CHECK-NEXT: kiln.launch "mul" bindings [{arena = array<i64: 0, 2048>, role = "lhs"}, {arena = array<i64: 768, 1024>, role = "rhs"}, {arena = array<i64: 256, 0>, role = "result"}] constants {width = 64 : i64}
// CHECK-NEXT: kiln.launch "matmul.int4" {{.*}} constants {group = 32 : i64, k = 64 : i64, n = 32 : i64}
// CHECK-NEXT: kiln.launch "add"
// CHECK-NEXT: kiln.launch "gather_rows" bindings [{arena = array<i64: 256, 0>, role = "input"}, {input = "logit_rows", role = "rows"}, {arena = array<i64: 0, 512>, role = "result"}] constants {width = 32 : i64}
// CHECK-NEXT: kiln.launch "rms_norm"
// CHECK-NEXT: kiln.launch "matmul.f16" bindings [{arena = array<i64: 256, 1024>, role = "input"}, {role = "weight", weight = "output.weight"}, {arena = array<i64: 0, 0>, role = "result"}] constants {k = 32 : i64, n = 64 : i64}
// CHECK-NEXT: }

// PIPE-LABEL: kiln.plan @unfused attributes {arena_bytes = array<i64: {{[0-9]+}}, {{[0-9]+}}>, buckets = array<i64: 2, 8>
// PIPE: kiln.launch "paged_attention" bindings [{{.*}}{input = "kv", role = "pool"}, {{.*}}{input = "block_tables", role = "block_tables"}
// PIPE-SAME: max_tokens = 512 : i64, {{.*}}page_size = 16 : i64

// TWICE-LABEL: func.func @unfused(
// TWICE: kiln.plan @unfused
// TWICE-NOT: kiln.plan
// TWICE-LABEL: func.func @fused(
func.func @unfused(%tokens: tensor<?xi32> {kiln.role = "tokens"}, %positions: tensor<?xi32> {kiln.role = "positions"},
                   %query_starts: tensor<?xi32> {kiln.role = "query_starts"}, %context_lens: tensor<?xi32> {kiln.role = "context_lens"},
                   %cache_slots: tensor<?xi32> {kiln.role = "cache_slots"}, %logit_rows: tensor<?xi32> {kiln.role = "logit_rows"},
                   %kv: !kiln.kv_cache<1 x 2 x 8 x 512, f32> {kiln.role = "kv"}) -> tensor<?x64xf32> attributes {kiln.memory_plan = {buckets = array<i64: 1, 4>, peak_bytes = array<i64: 1280, 3584>}} {
  %emb = kiln.weight "token_embd.weight" : !kiln.weight<[64, 32], #kiln.storage<f32>>
  %g = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[32], #kiln.storage<f32>>
  %wq = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[32, 32], #kiln.storage<q8_0>>
  %bq = kiln.weight "blk.0.attn_q.bias" : !kiln.weight<[32], #kiln.storage<f32>>
  %wk = kiln.weight "blk.0.attn_k.weight" : !kiln.weight<[16, 32], #kiln.storage<q8_0>>
  %wv = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[16, 32], #kiln.storage<q8_0>>
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[32, 32], #kiln.storage<q8_0>>
  %f = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[32], #kiln.storage<f32>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[64, 32], #kiln.storage<q8_0>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[64, 32], #kiln.storage<q8_0>>
  %wd = kiln.weight "blk.0.ffn_down.weight" : !kiln.weight<[32, 64], #kiln.storage<int4, group = 32>>
  %gout = kiln.weight "output_norm.weight" : !kiln.weight<[32], #kiln.storage<f32>>
  %wout = kiln.weight "output.weight" : !kiln.weight<[64, 32], #kiln.storage<f16>>
  %x = kiln.embedding %emb, %tokens {kiln.arena = array<i64: 0, 0>} : (!kiln.weight<[64, 32], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x32xf32>
  %n = kiln.rms_norm %x, %g {eps = 1.0e-5 : f64, kiln.arena = array<i64: 256, 512>} : (tensor<?x32xf32>, !kiln.weight<[32], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %q = kiln.matmul %n, %wq {kiln.arena = array<i64: 512, 1024>} : (tensor<?x32xf32>, !kiln.weight<[32, 32], #kiln.storage<q8_0>>) -> tensor<?x32xf32>
  %qb = kiln.bias_add %q, %bq {kiln.arena = array<i64: 768, 1536>} : (tensor<?x32xf32>, !kiln.weight<[32], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %k = kiln.matmul %n, %wk {kiln.arena = array<i64: 512, 1024>} : (tensor<?x32xf32>, !kiln.weight<[16, 32], #kiln.storage<q8_0>>) -> tensor<?x16xf32>
  %v = kiln.matmul %n, %wv {kiln.arena = array<i64: 1024, 2048>} : (tensor<?x32xf32>, !kiln.weight<[16, 32], #kiln.storage<q8_0>>) -> tensor<?x16xf32>
  %qr = kiln.rope %qb, %positions {num_heads = 4, head_dim = 8, config = {theta = 1000000.0 : f64, dims = 8, style = "half"}, kiln.arena = array<i64: 256, 512>} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %kr = kiln.rope %k, %positions {num_heads = 2, head_dim = 8, config = {theta = 1000000.0 : f64, dims = 8, style = "half"}, kiln.arena = array<i64: 768, 1536>} : (tensor<?x16xf32>, tensor<?xi32>) -> tensor<?x16xf32>
  %a = kiln.attention %qr, %kr, %v, %kv, %positions, %query_starts, %context_lens, %cache_slots {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 8, scale = 0.35355339059327373 : f64, kiln.arena = array<i64: 512, 1024>} : (tensor<?x32xf32>, tensor<?x16xf32>, tensor<?x16xf32>, !kiln.kv_cache<1 x 2 x 8 x 512, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x32xf32>
  %o = kiln.matmul %a, %wo {kiln.arena = array<i64: 256, 512>} : (tensor<?x32xf32>, !kiln.weight<[32, 32], #kiln.storage<q8_0>>) -> tensor<?x32xf32>
  %h = kiln.add %x, %o {kiln.arena = array<i64: 512, 3072>} : tensor<?x32xf32>
  %m = kiln.rms_norm %h, %f {eps = 1.0e-5 : f64, kiln.arena = array<i64: 0, 2048>} : (tensor<?x32xf32>, !kiln.weight<[32], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %gt = kiln.matmul %m, %wg {kiln.arena = array<i64: 256, 0>} : (tensor<?x32xf32>, !kiln.weight<[64, 32], #kiln.storage<q8_0>>) -> tensor<?x64xf32>
  %up = kiln.matmul %m, %wu {kiln.arena = array<i64: 768, 1024>} : (tensor<?x32xf32>, !kiln.weight<[64, 32], #kiln.storage<q8_0>>) -> tensor<?x64xf32>
  %s = kiln.silu %gt {kiln.arena = array<i64: 0, 2048>} : tensor<?x64xf32>
  %p = kiln.mul %s, %up {kiln.arena = array<i64: 256, 0>} : tensor<?x64xf32>
  %d = kiln.matmul %p, %wd {kiln.arena = array<i64: 0, 1024>} : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<int4, group = 32>>) -> tensor<?x32xf32>
  %x1 = kiln.add %h, %d {kiln.arena = array<i64: 256, 0>} : tensor<?x32xf32>
  %last = kiln.gather_rows %x1, %logit_rows {kiln.arena = array<i64: 0, 512>} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %nl = kiln.rms_norm %last, %gout {eps = 1.0e-5 : f64, kiln.arena = array<i64: 256, 1024>} : (tensor<?x32xf32>, !kiln.weight<[32], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %logits = kiln.matmul %nl, %wout {kiln.arena = array<i64: 0, 0>} : (tensor<?x32xf32>, !kiln.weight<[64, 32], #kiln.storage<f16>>) -> tensor<?x64xf32>
  return %logits : tensor<?x64xf32>
}

// -----

// Fused and paged: QKV weights stored differently are named one by one, a
// norm of f16 says so, the fused rope shows in the kernel name and its config
// in rope_* constants.

// CHECK-LABEL: func.func @fused(
// CHECK: kiln.plan @fused attributes {arena_bytes = array<i64: 4096, 16384>, buckets = array<i64: 1, 4>, results = [{arena = array<i64: 0, 0>, role = "result0"}]}
// CHECK-NEXT: kiln.launch "embedding.q6_k"
// CHECK-NEXT: kiln.launch "fused_matmul.norm.q4_k.q4_k.q6_k" bindings [{arena = array<i64: 0, 0>, role = "input"}, {role = "norm", weight = "blk.0.attn_norm.weight"},
// CHECK-SAME: {role = "weight0", weight = "blk.0.attn_q.weight"}, {role = "weight1", weight = "blk.0.attn_k.weight"}, {role = "weight2", weight = "blk.0.attn_v.weight"},
// CHECK-SAME: {arena = array<i64: 1024, 4096>, role = "result0"}, {arena = array<i64: 3072, 12288>, role = "result1"}, {arena = array<i64: 3584, 14336>, role = "result2"}]
// CHECK-SAME: constants {epilogue = "none", eps = 1.000000e-05 : f64, k = 256 : i64, n = array<i64: 256, 128, 128>}
// CHECK-NEXT: kiln.launch "paged_attention.rope" bindings [{arena = array<i64: 1024, 4096>, role = "q"}, {arena = array<i64: 3072, 12288>, role = "k"}, {arena = array<i64: 3584, 14336>, role = "v"},
// CHECK-SAME: {input = "kv", role = "pool"}, {input = "positions", role = "positions"}, {input = "query_starts", role = "query_starts"}, {input = "context_lens", role = "context_lens"}, {input = "block_tables", role = "block_tables"}, {arena = array<i64: 2048, 8192>, role = "result"}]
// CHECK-SAME: constants {head_dim = 64 : i64, kv_type = "f16", layer = 0 : i64, max_tokens = 4096 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, page_size = 32 : i64,
// CHECK-SAME: rope_dims = 64 : i64, rope_factor = 8.000000e+00 : f64, rope_scaling = "llama3", rope_style = "interleaved", rope_theta = 5.000000e+05 : f64, scale = 1.250000e-01 : f64}
// CHECK-NEXT: kiln.launch "fused_matmul.residual_add.q4_k" bindings [{arena = array<i64: 2048, 8192>, role = "input"}, {role = "weight0", weight = "blk.0.attn_output.weight"}, {arena = array<i64: 0, 0>, role = "residual"}, {arena = array<i64: 3072, 12288>, role = "result0"}]
// CHECK-SAME: constants {epilogue = "residual_add", k = 256 : i64, n = array<i64: 256>}
// CHECK-NEXT: kiln.launch "fused_matmul.norm_f16.silu_mul.q4_k" {{.*}} constants {epilogue = "silu_mul", eps = 1.000000e-05 : f64, k = 256 : i64, n = array<i64: 512, 512>}
// CHECK-NEXT: kiln.launch "fused_matmul.residual_add.q6_k" {{.*}} constants {epilogue = "residual_add", k = 512 : i64, n = array<i64: 256>}
// CHECK-NEXT: kiln.launch "gather_rows"
// CHECK-NEXT: kiln.launch "fused_matmul.norm.q6_k" {{.*}} constants {epilogue = "none", eps = 1.000000e-05 : f64, k = 256 : i64, n = array<i64: 64>}
// CHECK-NEXT: kiln.launch "argmax" bindings [{arena = array<i64: 1024, 4096>, role = "input"}, {arena = array<i64: 0, 0>, role = "result"}] constants {width = 64 : i64}
// CHECK-NEXT: }
func.func @fused(%tokens: tensor<?xi32> {kiln.role = "tokens"}, %positions: tensor<?xi32> {kiln.role = "positions"},
                 %query_starts: tensor<?xi32> {kiln.role = "query_starts"}, %context_lens: tensor<?xi32> {kiln.role = "context_lens"},
                 %block_tables: tensor<?x?xi32> {kiln.role = "block_tables"}, %logit_rows: tensor<?xi32> {kiln.role = "logit_rows"},
                 %kv: !kiln.page_pool<1 x 2 x 64, page 32, f16> {kiln.max_tokens = 4096 : i64, kiln.role = "kv"}) -> tensor<?xi32> attributes {kiln.memory_plan = {buckets = array<i64: 1, 4>, peak_bytes = array<i64: 4096, 16384>}} {
  %emb = kiln.weight "token_embd.weight" : !kiln.weight<[64, 256], #kiln.storage<q6_k>>
  %g = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
  %wq = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[256, 256], #kiln.storage<q4_k>>
  %wk = kiln.weight "blk.0.attn_k.weight" : !kiln.weight<[128, 256], #kiln.storage<q4_k>>
  %wv = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[128, 256], #kiln.storage<q6_k>>
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[256, 256], #kiln.storage<q4_k>>
  %f = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[256], #kiln.storage<f16>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[512, 256], #kiln.storage<q4_k>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[512, 256], #kiln.storage<q4_k>>
  %wd = kiln.weight "blk.0.ffn_down.weight" : !kiln.weight<[256, 512], #kiln.storage<q6_k>>
  %gout = kiln.weight "output_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
  %wout = kiln.weight "output.weight" : !kiln.weight<[64, 256], #kiln.storage<q6_k>>
  %x = kiln.embedding %emb, %tokens {kiln.arena = array<i64: 0, 0>} : (!kiln.weight<[64, 256], #kiln.storage<q6_k>>, tensor<?xi32>) -> tensor<?x256xf32>
  %q, %k, %v = kiln.fused_matmul %x norm(%g) weights(%wq, %wk, %wv) {eps = 1.0e-5 : f64, epilogue = #kiln<epilogue none>, kiln.arena = [array<i64: 1024, 4096>, array<i64: 3072, 12288>, array<i64: 3584, 14336>]} : (tensor<?x256xf32>, !kiln.weight<[256], #kiln.storage<f32>>, !kiln.weight<[256, 256], #kiln.storage<q4_k>>, !kiln.weight<[128, 256], #kiln.storage<q4_k>>, !kiln.weight<[128, 256], #kiln.storage<q6_k>>) -> (tensor<?x256xf32>, tensor<?x128xf32>, tensor<?x128xf32>)
  %a = kiln.paged_attention %q, %k, %v, %kv, %positions, %query_starts, %context_lens, %block_tables {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 64, scale = 0.125 : f64, rope = {theta = 500000.0 : f64, dims = 64, style = "interleaved", scaling = "llama3", factor = 8.0 : f64}, kiln.arena = array<i64: 2048, 8192>} : (tensor<?x256xf32>, tensor<?x128xf32>, tensor<?x128xf32>, !kiln.page_pool<1 x 2 x 64, page 32, f16>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x?xi32>) -> tensor<?x256xf32>
  %h = kiln.fused_matmul %a weights(%wo) residual(%x) {epilogue = #kiln<epilogue residual_add>, kiln.arena = array<i64: 3072, 12288>} : (tensor<?x256xf32>, !kiln.weight<[256, 256], #kiln.storage<q4_k>>, tensor<?x256xf32>) -> tensor<?x256xf32>
  %p = kiln.fused_matmul %h norm(%f) weights(%wg, %wu) {eps = 1.0e-5 : f64, epilogue = #kiln<epilogue silu_mul>, kiln.arena = array<i64: 0, 0>} : (tensor<?x256xf32>, !kiln.weight<[256], #kiln.storage<f16>>, !kiln.weight<[512, 256], #kiln.storage<q4_k>>, !kiln.weight<[512, 256], #kiln.storage<q4_k>>) -> tensor<?x512xf32>
  %x1 = kiln.fused_matmul %p weights(%wd) residual(%h) {epilogue = #kiln<epilogue residual_add>, kiln.arena = array<i64: 2048, 8192>} : (tensor<?x512xf32>, !kiln.weight<[256, 512], #kiln.storage<q6_k>>, tensor<?x256xf32>) -> tensor<?x256xf32>
  %last = kiln.gather_rows %x1, %logit_rows {kiln.arena = array<i64: 0, 0>} : (tensor<?x256xf32>, tensor<?xi32>) -> tensor<?x256xf32>
  %logits = kiln.fused_matmul %last norm(%gout) weights(%wout) {eps = 1.0e-5 : f64, epilogue = #kiln<epilogue none>, kiln.arena = array<i64: 1024, 4096>} : (tensor<?x256xf32>, !kiln.weight<[256], #kiln.storage<f32>>, !kiln.weight<[64, 256], #kiln.storage<q6_k>>) -> tensor<?x64xf32>
  %ids = kiln.argmax %logits {kiln.arena = array<i64: 0, 0>} : (tensor<?x64xf32>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}

// -----

// A function without kernel ops needs no memory plan and gets no plan.

// CHECK-LABEL: func.func @helper(
// CHECK-NOT: kiln.plan
func.func @helper(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  return %x : tensor<?x16xf32>
}

// -----

// expected-error @+1 {{kiln-emit-plan: @no_plan has no kiln.memory_plan with buckets and peak_bytes; kiln-plan-memory must run first}}
func.func @no_plan(%x: tensor<?x16xf32> {kiln.role = "x"}) -> tensor<?x16xf32> {
  %s = kiln.silu %x : tensor<?x16xf32>
  return %s : tensor<?x16xf32>
}

// -----

func.func @no_arena(%x: tensor<?x16xf32> {kiln.role = "x"}) -> tensor<?x16xf32> attributes {kiln.memory_plan = {buckets = array<i64: 1, 4>, peak_bytes = array<i64: 256, 256>}} {
  // expected-error @+1 {{'kiln.silu' op cannot bind 'result': result #0 of kiln.silu has no kiln.arena offsets for the 2 buckets of the memory plan; kiln-plan-memory must run first}}
  %s = kiln.silu %x : tensor<?x16xf32>
  return %s : tensor<?x16xf32>
}

// -----

func.func @arena_of_other_buckets(%x: tensor<?x16xf32> {kiln.role = "x"}) -> tensor<?x16xf32> attributes {kiln.memory_plan = {buckets = array<i64: 1, 4>, peak_bytes = array<i64: 256, 256>}} {
  // expected-error @+1 {{'kiln.silu' op cannot bind 'result': result #0 of kiln.silu has no kiln.arena offsets for the 2 buckets of the memory plan; kiln-plan-memory must run first}}
  %s = kiln.silu %x {kiln.arena = array<i64: 0, 0, 0>} : tensor<?x16xf32>
  return %s : tensor<?x16xf32>
}

// -----

func.func @no_role(%x: tensor<?x16xf32>) -> tensor<?x16xf32> attributes {kiln.memory_plan = {buckets = array<i64: 1>, peak_bytes = array<i64: 256>}} {
  // expected-error @+1 {{'kiln.silu' op cannot bind 'input': argument #0 of @no_role has no kiln.role to bind it by}}
  %s = kiln.silu %x {kiln.arena = array<i64: 0>} : tensor<?x16xf32>
  return %s : tensor<?x16xf32>
}

// -----

func.func @foreign_op(%x: tensor<?x16xf32> {kiln.role = "x"}) -> tensor<?x16xf32> attributes {kiln.memory_plan = {buckets = array<i64: 1>, peak_bytes = array<i64: 256>}} {
  // expected-error @+1 {{'test.scale' op has no kernel template; kiln-emit-plan cannot launch it}}
  %y = "test.scale"(%x) : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %s = kiln.silu %y {kiln.arena = array<i64: 0>} : tensor<?x16xf32>
  return %s : tensor<?x16xf32>
}


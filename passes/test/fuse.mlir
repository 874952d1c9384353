// RUN: kiln-opt %s -kiln-fuse -split-input-file | FileCheck %s

// One llama layer and the head, as the importer writes them: every norm
// becomes a prologue, QKV and gate/up fuse horizontally, SiLU-mul and both
// residual adds become epilogues, and rope moves into the attention.

// CHECK-LABEL: func.func @llama_layer
// CHECK-SAME: (%[[TOK:[^:]*]]: tensor<?xi32>, %[[POS:[^:]*]]: tensor<?xi32>, %[[QS:[^:]*]]: tensor<?xi32>, %[[CL:[^:]*]]: tensor<?xi32>, %[[SLOTS:[^:]*]]: tensor<?xi32>, %[[ROWS:[^:]*]]: tensor<?xi32>, %[[KV:[^:]*]]: !kiln.kv_cache
// CHECK: %[[EMB:.*]] = kiln.weight "token_embd.weight"
// CHECK: %[[AN:.*]] = kiln.weight "blk.0.attn_norm.weight"
// CHECK: %[[WQ:.*]] = kiln.weight "blk.0.attn_q.weight"
// CHECK: %[[WK:.*]] = kiln.weight "blk.0.attn_k.weight"
// CHECK: %[[WV:.*]] = kiln.weight "blk.0.attn_v.weight"
// CHECK: %[[WO:.*]] = kiln.weight "blk.0.attn_output.weight"
// CHECK: %[[FN:.*]] = kiln.weight "blk.0.ffn_norm.weight"
// CHECK: %[[WG:.*]] = kiln.weight "blk.0.ffn_gate.weight"
// CHECK: %[[WU:.*]] = kiln.weight "blk.0.ffn_up.weight"
// CHECK: %[[WD:.*]] = kiln.weight "blk.0.ffn_down.weight"
// CHECK: %[[ON:.*]] = kiln.weight "output_norm.weight"
// CHECK: %[[OUT:.*]] = kiln.weight "output.weight"
// CHECK: %[[X0:.*]] = kiln.embedding %[[EMB]], %[[TOK]]
// CHECK-NOT: kiln.rms_norm
// CHECK: %[[QKV:.*]]:3 = kiln.fused_matmul %[[X0]] norm(%[[AN]]) weights(%[[WQ]], %[[WK]], %[[WV]]) {epilogue = #kiln<epilogue none>, eps = 1.000000e-05 : f64}
// CHECK-NOT: kiln.rope
// CHECK: %[[A:.*]] = kiln.attention %[[QKV]]#0, %[[QKV]]#1, %[[QKV]]#2, %[[KV]], %[[POS]], %[[QS]], %[[CL]], %[[SLOTS]]
// CHECK-SAME: rope = {dims = 8 : i64, style = "interleaved", theta = 1.000000e+04 : f64}
// CHECK-NOT: kiln.matmul
// CHECK-NOT: kiln.add
// CHECK: %[[X1:.*]] = kiln.fused_matmul %[[A]] weights(%[[WO]]) residual(%[[X0]]) {epilogue = #kiln<epilogue residual_add>}
// CHECK-NOT: kiln.silu
// CHECK-NOT: kiln.mul
// CHECK: %[[M:.*]] = kiln.fused_matmul %[[X1]] norm(%[[FN]]) weights(%[[WG]], %[[WU]]) {epilogue = #kiln<epilogue silu_mul>, eps = 1.000000e-05 : f64}
// CHECK-SAME: -> tensor<?x128xf32>
// CHECK: %[[X2:.*]] = kiln.fused_matmul %[[M]] weights(%[[WD]]) residual(%[[X1]]) {epilogue = #kiln<epilogue residual_add>}
// CHECK: %[[H:.*]] = kiln.gather_rows %[[X2]], %[[ROWS]]
// CHECK-NOT: kiln.rms_norm
// CHECK: %[[LOGITS:.*]] = kiln.fused_matmul %[[H]] norm(%[[ON]]) weights(%[[OUT]]) {epilogue = #kiln<epilogue none>, eps = 1.000000e-05 : f64}
// CHECK-NOT: kiln.matmul
// CHECK: return %[[LOGITS]]
func.func @llama_layer(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %query_starts: tensor<?xi32>,
                       %context_lens: tensor<?xi32>, %cache_slots: tensor<?xi32>, %logit_rows: tensor<?xi32>,
                       %kv: !kiln.kv_cache<1 x 4 x 8 x 2048, f32>) -> tensor<?x512xf32> {
  %tok_embd = kiln.weight "token_embd.weight" : !kiln.weight<[512, 64], #kiln.storage<f32>>
  %attn_norm = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %wq = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %wk = kiln.weight "blk.0.attn_k.weight" : !kiln.weight<[32, 64], #kiln.storage<f32>>
  %wv = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[32, 64], #kiln.storage<f32>>
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %ffn_norm = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %wd = kiln.weight "blk.0.ffn_down.weight" : !kiln.weight<[64, 128], #kiln.storage<f32>>
  %output_norm = kiln.weight "output_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %output = kiln.weight "output.weight" : !kiln.weight<[512, 64], #kiln.storage<f32>>
  %x0 = kiln.embedding %tok_embd, %tokens : (!kiln.weight<[512, 64], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x64xf32>
  %an = kiln.rms_norm %x0, %attn_norm {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %q = kiln.matmul %an, %wq : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %k = kiln.matmul %an, %wk : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %v = kiln.matmul %an, %wv : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %qr = kiln.rope %q, %positions {num_heads = 8, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = kiln.rope %k, %positions {num_heads = 4, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %a = kiln.attention %qr, %kr, %v, %kv, %positions, %query_starts, %context_lens, %cache_slots {layer = 0, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35355339059327373} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  %o = kiln.matmul %a, %wo : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %x1 = kiln.add %x0, %o : tensor<?x64xf32>
  %fn = kiln.rms_norm %x1, %ffn_norm {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %g = kiln.matmul %fn, %wg : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %u = kiln.matmul %fn, %wu : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %s = kiln.silu %g : tensor<?x128xf32>
  %m = kiln.mul %s, %u : tensor<?x128xf32>
  %d = kiln.matmul %m, %wd : (tensor<?x128xf32>, !kiln.weight<[64, 128], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %x2 = kiln.add %x1, %d : tensor<?x64xf32>
  %h = kiln.gather_rows %x2, %logit_rows : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %hn = kiln.rms_norm %h, %output_norm {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %logits = kiln.matmul %hn, %output : (tensor<?x64xf32>, !kiln.weight<[512, 64], #kiln.storage<f32>>) -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}

// -----

// qwen2: q/k/v biases stay between the fused QKV matmul and rope (which then
// still fuses into the attention); the head is the tied embedding table.

// CHECK-LABEL: func.func @qwen2_layer_biases
// CHECK-SAME: (%{{[^:]*}}: tensor<?xi32>, %[[POS:[^:]*]]: tensor<?xi32>
// CHECK: %[[EMB:.*]] = kiln.weight "token_embd.weight"
// CHECK: %[[AN:.*]] = kiln.weight "blk.0.attn_norm.weight"
// CHECK: %[[WQ:.*]] = kiln.weight "blk.0.attn_q.weight"
// CHECK: %[[BQ:.*]] = kiln.weight "blk.0.attn_q.bias"
// CHECK: %[[WK:.*]] = kiln.weight "blk.0.attn_k.weight"
// CHECK: %[[BK:.*]] = kiln.weight "blk.0.attn_k.bias"
// CHECK: %[[WV:.*]] = kiln.weight "blk.0.attn_v.weight"
// CHECK: %[[BV:.*]] = kiln.weight "blk.0.attn_v.bias"
// CHECK: %[[ON:.*]] = kiln.weight "output_norm.weight"
// CHECK: %[[X0:.*]] = kiln.embedding %[[EMB]]
// CHECK: %[[QKV:.*]]:3 = kiln.fused_matmul %[[X0]] norm(%[[AN]]) weights(%[[WQ]], %[[WK]], %[[WV]]) {epilogue = #kiln<epilogue none>
// CHECK: %[[Q:.*]] = kiln.bias_add %[[QKV]]#0, %[[BQ]]
// CHECK: %[[K:.*]] = kiln.bias_add %[[QKV]]#1, %[[BK]]
// CHECK: %[[V:.*]] = kiln.bias_add %[[QKV]]#2, %[[BV]]
// CHECK-NOT: kiln.rope
// CHECK: %[[A:.*]] = kiln.attention %[[Q]], %[[K]], %[[V]], %{{[^,]*}}, %[[POS]],
// CHECK-SAME: rope = {dims = 8 : i64, style = "half", theta = 1.000000e+06 : f64}
// CHECK: %[[X1:.*]] = kiln.fused_matmul %[[A]] weights(%{{.*}}) residual(%[[X0]]) {epilogue = #kiln<epilogue residual_add>}
// CHECK: %[[M:.*]] = kiln.fused_matmul %[[X1]] norm(%{{.*}}) weights(%{{.*}}, %{{.*}}) {epilogue = #kiln<epilogue silu_mul>
// CHECK: %[[X2:.*]] = kiln.fused_matmul %[[M]] weights(%{{.*}}) residual(%[[X1]]) {epilogue = #kiln<epilogue residual_add>}
// CHECK: %[[H:.*]] = kiln.gather_rows %[[X2]]
// CHECK: %[[LOGITS:.*]] = kiln.fused_matmul %[[H]] norm(%[[ON]]) weights(%[[EMB]]) {epilogue = #kiln<epilogue none>
// CHECK-NOT: kiln.rms_norm
// CHECK-NOT: kiln.matmul
// CHECK: return %[[LOGITS]]
func.func @qwen2_layer_biases(%tokens: tensor<?xi32>, %positions: tensor<?xi32>, %query_starts: tensor<?xi32>,
                              %context_lens: tensor<?xi32>, %cache_slots: tensor<?xi32>, %logit_rows: tensor<?xi32>,
                              %kv: !kiln.kv_cache<1 x 4 x 8 x 2048, f32>) -> tensor<?x512xf32> {
  %tok_embd = kiln.weight "token_embd.weight" : !kiln.weight<[512, 64], #kiln.storage<f32>>
  %attn_norm = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %wq = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %bq = kiln.weight "blk.0.attn_q.bias" : !kiln.weight<[64], #kiln.storage<f32>>
  %wk = kiln.weight "blk.0.attn_k.weight" : !kiln.weight<[32, 64], #kiln.storage<f32>>
  %bk = kiln.weight "blk.0.attn_k.bias" : !kiln.weight<[32], #kiln.storage<f32>>
  %wv = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[32, 64], #kiln.storage<f32>>
  %bv = kiln.weight "blk.0.attn_v.bias" : !kiln.weight<[32], #kiln.storage<f32>>
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %ffn_norm = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %wd = kiln.weight "blk.0.ffn_down.weight" : !kiln.weight<[64, 128], #kiln.storage<f32>>
  %output_norm = kiln.weight "output_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %x0 = kiln.embedding %tok_embd, %tokens : (!kiln.weight<[512, 64], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x64xf32>
  %an = kiln.rms_norm %x0, %attn_norm {eps = 1.0e-6} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %q = kiln.matmul %an, %wq : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %k = kiln.matmul %an, %wk : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %v = kiln.matmul %an, %wv : (tensor<?x64xf32>, !kiln.weight<[32, 64], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %q2 = kiln.bias_add %q, %bq : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %k2 = kiln.bias_add %k, %bk : (tensor<?x32xf32>, !kiln.weight<[32], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %v2 = kiln.bias_add %v, %bv : (tensor<?x32xf32>, !kiln.weight<[32], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %qr = kiln.rope %q2, %positions {num_heads = 8, head_dim = 8, config = {theta = 1000000.0 : f64, dims = 8, style = "half"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = kiln.rope %k2, %positions {num_heads = 4, head_dim = 8, config = {theta = 1000000.0 : f64, dims = 8, style = "half"}} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %a = kiln.attention %qr, %kr, %v2, %kv, %positions, %query_starts, %context_lens, %cache_slots {layer = 0, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35355339059327373} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  %o = kiln.matmul %a, %wo : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %x1 = kiln.add %x0, %o : tensor<?x64xf32>
  %fn = kiln.rms_norm %x1, %ffn_norm {eps = 1.0e-6} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %g = kiln.matmul %fn, %wg : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %u = kiln.matmul %fn, %wu : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %s = kiln.silu %g : tensor<?x128xf32>
  %m = kiln.mul %s, %u : tensor<?x128xf32>
  %d = kiln.matmul %m, %wd : (tensor<?x128xf32>, !kiln.weight<[64, 128], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %x2 = kiln.add %x1, %d : tensor<?x64xf32>
  %h = kiln.gather_rows %x2, %logit_rows : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %hn = kiln.rms_norm %h, %output_norm {eps = 1.0e-6} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %logits = kiln.matmul %hn, %tok_embd : (tensor<?x64xf32>, !kiln.weight<[512, 64], #kiln.storage<f32>>) -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}

// -----

// A norm that something other than a matmul reads stays a norm: fusing it
// would compute it twice.

// CHECK-LABEL: func.func @norm_with_non_matmul_user
// CHECK: %[[N:.*]] = kiln.rms_norm
// CHECK: kiln.matmul %[[N]]
// CHECK: kiln.silu %[[N]]
// CHECK-NOT: kiln.fused_matmul
func.func @norm_with_non_matmul_user(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %gamma = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %w = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %n = kiln.rms_norm %x, %gamma {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %q = kiln.matmul %n, %w : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %s = kiln.silu %n : tensor<?x64xf32>
  return %q, %s : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// silu(gate) * up where gate and up come from different fused ops (two
// norms): no single op computes both, so the mul stays.

// CHECK-LABEL: func.func @silu_mul_different_producers
// CHECK: %[[G:.*]] = kiln.fused_matmul {{.*}} {epilogue = #kiln<epilogue none>, eps
// CHECK: %[[U:.*]] = kiln.fused_matmul {{.*}} {epilogue = #kiln<epilogue none>, eps
// CHECK: %[[S:.*]] = kiln.silu %[[G]]
// CHECK: %[[M:.*]] = kiln.mul %[[S]], %[[U]]
// CHECK-NOT: silu_mul
// CHECK: return %[[M]]
func.func @silu_mul_different_producers(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> tensor<?x128xf32> {
  %g1 = kiln.weight "g1" : !kiln.weight<[64], #kiln.storage<f32>>
  %g2 = kiln.weight "g2" : !kiln.weight<[64], #kiln.storage<f32>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %nx = kiln.rms_norm %x, %g1 {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %ny = kiln.rms_norm %y, %g2 {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %g = kiln.matmul %nx, %wg : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %u = kiln.matmul %ny, %wu : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %s = kiln.silu %g : tensor<?x128xf32>
  %m = kiln.mul %s, %u : tensor<?x128xf32>
  return %m : tensor<?x128xf32>
}

// -----

// The gate is also returned: the silu_mul epilogue would no longer produce it.

// CHECK-LABEL: func.func @silu_mul_gate_has_other_user
// CHECK: %[[GU:.*]]:2 = kiln.fused_matmul {{.*}} {epilogue = #kiln<epilogue none>, eps
// CHECK: %[[S:.*]] = kiln.silu %[[GU]]#0
// CHECK: kiln.mul %[[S]], %[[GU]]#1
// CHECK-NOT: silu_mul
func.func @silu_mul_gate_has_other_user(%x: tensor<?x64xf32>) -> (tensor<?x128xf32>, tensor<?x128xf32>) {
  %gamma = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %n = kiln.rms_norm %x, %gamma {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %g = kiln.matmul %n, %wg : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %u = kiln.matmul %n, %wu : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %s = kiln.silu %g : tensor<?x128xf32>
  %m = kiln.mul %s, %u : tensor<?x128xf32>
  return %m, %g : tensor<?x128xf32>, tensor<?x128xf32>
}

// -----

// The up matmul comes first in the block and mul's operands are swapped: the
// epilogue still gets (gate, up) in that order.

// CHECK-LABEL: func.func @silu_mul_gate_second
// CHECK: %[[WG:.*]] = kiln.weight "blk.0.ffn_gate.weight"
// CHECK: %[[WU:.*]] = kiln.weight "blk.0.ffn_up.weight"
// CHECK: %[[M:.*]] = kiln.fused_matmul %{{.*}} norm(%{{.*}}) weights(%[[WG]], %[[WU]]) {epilogue = #kiln<epilogue silu_mul>, eps = 1.000000e-05 : f64}
// CHECK-NOT: kiln.silu
// CHECK-NOT: kiln.mul
// CHECK: return %[[M]]
func.func @silu_mul_gate_second(%x: tensor<?x64xf32>) -> tensor<?x128xf32> {
  %gamma = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[64], #kiln.storage<f32>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[128, 64], #kiln.storage<f32>>
  %n = kiln.rms_norm %x, %gamma {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %u = kiln.matmul %n, %wu : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %g = kiln.matmul %n, %wg : (tensor<?x64xf32>, !kiln.weight<[128, 64], #kiln.storage<f32>>) -> tensor<?x128xf32>
  %s = kiln.silu %g : tensor<?x128xf32>
  %m = kiln.mul %u, %s : tensor<?x128xf32>
  return %m : tensor<?x128xf32>
}

// -----

// The matmul's product is also returned: the residual epilogue would lose it.

// CHECK-LABEL: func.func @residual_matmul_has_other_user
// CHECK: %[[O:.*]] = kiln.matmul
// CHECK: %[[X1:.*]] = kiln.add %{{.*}}, %[[O]]
// CHECK-NOT: kiln.fused_matmul
// CHECK: return %[[X1]], %[[O]]
func.func @residual_matmul_has_other_user(%x: tensor<?x64xf32>, %a: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %o = kiln.matmul %a, %wo : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %x1 = kiln.add %x, %o : tensor<?x64xf32>
  return %x1, %o : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// The matmul on the left of the add fuses the same way.

// CHECK-LABEL: func.func @residual_matmul_on_the_left
// CHECK-SAME: (%[[X:[^:]*]]: tensor<?x64xf32>, %[[A:[^:]*]]: tensor<?x64xf32>)
// CHECK: %[[WO:.*]] = kiln.weight
// CHECK-NOT: kiln.matmul
// CHECK: %[[X1:.*]] = kiln.fused_matmul %[[A]] weights(%[[WO]]) residual(%[[X]]) {epilogue = #kiln<epilogue residual_add>}
// CHECK-NOT: kiln.add
// CHECK: return %[[X1]]
func.func @residual_matmul_on_the_left(%x: tensor<?x64xf32>, %a: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %o = kiln.matmul %a, %wo : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %x1 = kiln.add %o, %x : tensor<?x64xf32>
  return %x1 : tensor<?x64xf32>
}

// -----

// A lone matmul after a norm whose product is added: one op with both the
// prologue and the residual epilogue.

// CHECK-LABEL: func.func @residual_after_norm_prologue
// CHECK-SAME: (%[[X:[^:]*]]: tensor<?x64xf32>, %[[A:[^:]*]]: tensor<?x64xf32>)
// CHECK: %[[G:.*]] = kiln.weight "g"
// CHECK: %[[W:.*]] = kiln.weight "w"
// CHECK: %[[Y:.*]] = kiln.fused_matmul %[[A]] norm(%[[G]]) weights(%[[W]]) residual(%[[X]]) {epilogue = #kiln<epilogue residual_add>, eps = 1.000000e-05 : f64}
// CHECK-NOT: kiln.add
// CHECK: return %[[Y]]
func.func @residual_after_norm_prologue(%x: tensor<?x64xf32>, %a: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %g = kiln.weight "g" : !kiln.weight<[64], #kiln.storage<f32>>
  %w = kiln.weight "w" : !kiln.weight<[64, 64], #kiln.storage<f32>>
  %n = kiln.rms_norm %a, %g {eps = 1.0e-5} : (tensor<?x64xf32>, !kiln.weight<[64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %o = kiln.matmul %n, %w : (tensor<?x64xf32>, !kiln.weight<[64, 64], #kiln.storage<f32>>) -> tensor<?x64xf32>
  %y = kiln.add %x, %o : tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// q and k rotated with different thetas: the attention has room for one rope.

// CHECK-LABEL: func.func @ropes_with_different_configs
// CHECK: %[[QR:.*]] = kiln.rope
// CHECK: %[[KR:.*]] = kiln.rope
// CHECK: kiln.attention %[[QR]], %[[KR]],
// CHECK-NOT: rope =
func.func @ropes_with_different_configs(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  %qr = kiln.rope %q, %pos {num_heads = 8, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = kiln.rope %k, %pos {num_heads = 4, head_dim = 8, config = {theta = 500000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %a = kiln.attention %qr, %kr, %v, %kv, %pos, %pos, %pos, %pos {layer = 0, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35355339059327373} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}

// -----

// q rotated as 4 heads of 16 while the attention reads 8 heads of 8: the
// rope is not the one the attention would apply.

// CHECK-LABEL: func.func @rope_head_geometry_differs
// CHECK: %[[QR:.*]] = kiln.rope
// CHECK: %[[KR:.*]] = kiln.rope
// CHECK: kiln.attention %[[QR]], %[[KR]],
// CHECK-NOT: rope =
func.func @rope_head_geometry_differs(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  %qr = kiln.rope %q, %pos {num_heads = 4, head_dim = 16, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = kiln.rope %k, %pos {num_heads = 4, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %a = kiln.attention %qr, %kr, %v, %kv, %pos, %pos, %pos, %pos {layer = 0, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35355339059327373} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}

// -----

// The rotated q is also returned, so the rope must stay.

// CHECK-LABEL: func.func @rope_with_other_user
// CHECK: %[[QR:.*]] = kiln.rope
// CHECK: %[[KR:.*]] = kiln.rope
// CHECK: kiln.attention %[[QR]], %[[KR]],
// CHECK-NOT: rope =
func.func @rope_with_other_user(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %v: tensor<?x32xf32>, %kv: !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, %pos: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %qr = kiln.rope %q, %pos {num_heads = 8, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %kr = kiln.rope %k, %pos {num_heads = 4, head_dim = 8, config = {theta = 10000.0 : f64, dims = 8, style = "interleaved"}} : (tensor<?x32xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %a = kiln.attention %qr, %kr, %v, %kv, %pos, %pos, %pos, %pos {layer = 0, num_heads = 8, num_kv_heads = 4, head_dim = 8, scale = 0.35355339059327373} : (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.kv_cache<1 x 4 x 8 x 2048, f32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  return %a, %qr : tensor<?x64xf32>, tensor<?x64xf32>
}

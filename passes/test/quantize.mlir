// RUN: kiln-opt %s -split-input-file -kiln-quantize | FileCheck %s --check-prefix=KEEP
// RUN: kiln-opt %s -split-input-file --kiln-quantize="quant=q4_k" | FileCheck %s --check-prefix=Q4K
// RUN: kiln-opt %s -split-input-file --kiln-quantize="quant=int4 group-size=64" | FileCheck %s --check-prefix=INT4
// RUN: kiln-opt %s -split-input-file --kiln-quantize="override=attn_v=q8_0" | FileCheck %s --check-prefix=OVR
// RUN: kiln-opt %s -split-input-file --kiln-quantize="quant=q4_k override=attn_v=f16,attn=q8_0,ffn_gate=q6_k" | FileCheck %s --check-prefix=MIX
// Fallbacks are remarks, checked where they occur:
// RUN: kiln-opt %s -split-input-file --kiln-quantize="quant=q4_k" -verify-diagnostics -o /dev/null
// Bad options and impossible overrides fail the pass:
// RUN: not kiln-opt %s --kiln-quantize="quant=q3_k" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADQ
// RUN: not kiln-opt %s --kiln-quantize="override=attn_v=q9" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADTYPE
// RUN: not kiln-opt %s --kiln-quantize="override=attn_v" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADFORM
// RUN: not kiln-opt %s --kiln-quantize="quant=int4 group-size=12" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADGROUP
// RUN: not kiln-opt %s -split-input-file --kiln-quantize="override=attn_v=q4_k" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADOVR
// RUN: kiln-opt %s --kiln-quantize="override=attn_vv=q8_0" -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNUSED
// int2 is worth a warning (round-to-nearest, no importance matrix); int4 is not:
// RUN: kiln-opt %s --kiln-quantize="quant=int2 group-size=32" -o /dev/null 2>&1 | FileCheck %s --check-prefix=INT2
// RUN: kiln-opt %s --kiln-quantize="quant=int4" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOINT2 --allow-empty

// BADQ: error: kiln-quantize: unknown quant 'q3_k'; valid values: f16, bf16, q8_0, q4_k, int4, int2
// BADTYPE: error: kiln-quantize: override 'attn_v=q9' names unknown storage 'q9'; valid types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, int4, int2
// BADFORM: error: kiln-quantize: override 'attn_v' is not NAME_SUBSTRING=TYPE
// BADGROUP: error: kiln-quantize: storage int4 needs a group size that is a positive multiple of 8, got 12
// UNUSED: warning: kiln-quantize: override 'attn_vv=q8_0' matches no 2-D weight
// INT2: warning: kiln-quantize: {{[0-9]+}} weights stored as int2 (group 32): each group rounded to the nearest of 4 levels
// NOINT2-NOT: stored as int2

// The weights of one llama layer and an untied head, rows of 256 elements
// (one k-quant block).

// KEEP-LABEL: func.func @untied
// KEEP-NOT: repack
// KEEP-NOT: source
// KEEP: return

// Q4K-LABEL: func.func @untied
// Q4K: kiln.weight "token_embd.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<q8_0>>
// Q4K: kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// Q4K: kiln.weight "blk.0.attn_q.weight" {repack = "f32->q4_k", source = #kiln.storage<f32>} : !kiln.weight<[256, 256], #kiln.storage<q4_k>>
// Q4K: kiln.weight "blk.0.attn_k.weight" {repack = "f32->q4_k", source = #kiln.storage<f32>} : !kiln.weight<[128, 256], #kiln.storage<q4_k>>
// Q4K: kiln.weight "blk.0.attn_v.weight" {repack = "f32->q4_k", source = #kiln.storage<f32>} : !kiln.weight<[128, 256], #kiln.storage<q4_k>>
// Q4K: kiln.weight "blk.0.attn_output.weight" {repack = "f32->q4_k", source = #kiln.storage<f32>} : !kiln.weight<[256, 256], #kiln.storage<q4_k>>
// Q4K: kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// Q4K: kiln.weight "blk.0.ffn_gate.weight" {repack = "f32->q4_k", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<q4_k>>
// Q4K: kiln.weight "blk.0.ffn_up.weight" {repack = "f32->q4_k", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<q4_k>>
// Q4K: kiln.weight "blk.0.ffn_down.weight" {repack = "f32->q4_k", source = #kiln.storage<f32>} : !kiln.weight<[256, 512], #kiln.storage<q4_k>>
// Q4K: kiln.weight "output_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// Q4K: kiln.weight "output.weight" {repack = "f32->q6_k", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<q6_k>>

// INT4-LABEL: func.func @untied
// INT4: kiln.weight "token_embd.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<q8_0>>
// INT4: kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// INT4: kiln.weight "blk.0.attn_q.weight" {repack = "f32->int4_g64", source = #kiln.storage<f32>} : !kiln.weight<[256, 256], #kiln.storage<int4, group = 64>>
// INT4: kiln.weight "blk.0.attn_k.weight" {repack = "f32->int4_g64", source = #kiln.storage<f32>} : !kiln.weight<[128, 256], #kiln.storage<int4, group = 64>>
// INT4: kiln.weight "blk.0.attn_v.weight" {repack = "f32->int4_g64", source = #kiln.storage<f32>} : !kiln.weight<[128, 256], #kiln.storage<int4, group = 64>>
// INT4: kiln.weight "blk.0.attn_output.weight" {repack = "f32->int4_g64", source = #kiln.storage<f32>} : !kiln.weight<[256, 256], #kiln.storage<int4, group = 64>>
// INT4: kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// INT4: kiln.weight "blk.0.ffn_gate.weight" {repack = "f32->int4_g64", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<int4, group = 64>>
// INT4: kiln.weight "blk.0.ffn_up.weight" {repack = "f32->int4_g64", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<int4, group = 64>>
// INT4: kiln.weight "blk.0.ffn_down.weight" {repack = "f32->int4_g64", source = #kiln.storage<f32>} : !kiln.weight<[256, 512], #kiln.storage<int4, group = 64>>
// INT4: kiln.weight "output_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// INT4: kiln.weight "output.weight" {repack = "f32->q6_k", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<q6_k>>

// Only attn_v changes without `quant`.
// OVR-LABEL: func.func @untied
// OVR-NOT: repack
// OVR: kiln.weight "blk.0.attn_v.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[128, 256], #kiln.storage<q8_0>>
// OVR-NOT: repack
// OVR: return

// The first matching override wins (attn_v=f16 before attn=q8_0); overrides
// leave 1-D weights alone (attn_norm); the rest follows `quant`.
// MIX-LABEL: func.func @untied
// MIX: kiln.weight "token_embd.weight" {{.*}} : !kiln.weight<[512, 256], #kiln.storage<q8_0>>
// MIX: kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// MIX: kiln.weight "blk.0.attn_q.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[256, 256], #kiln.storage<q8_0>>
// MIX: kiln.weight "blk.0.attn_k.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[128, 256], #kiln.storage<q8_0>>
// MIX: kiln.weight "blk.0.attn_v.weight" {repack = "f32->f16", source = #kiln.storage<f32>} : !kiln.weight<[128, 256], #kiln.storage<f16>>
// MIX: kiln.weight "blk.0.attn_output.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[256, 256], #kiln.storage<q8_0>>
// MIX: kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
// MIX: kiln.weight "blk.0.ffn_gate.weight" {repack = "f32->q6_k", source = #kiln.storage<f32>} : !kiln.weight<[512, 256], #kiln.storage<q6_k>>
// MIX: kiln.weight "blk.0.ffn_up.weight" {{.*}} : !kiln.weight<[512, 256], #kiln.storage<q4_k>>
// MIX: kiln.weight "blk.0.ffn_down.weight" {{.*}} : !kiln.weight<[256, 512], #kiln.storage<q4_k>>
// MIX: kiln.weight "output.weight" {{.*}} : !kiln.weight<[512, 256], #kiln.storage<q6_k>>
func.func @untied() {
  %tok_embd = kiln.weight "token_embd.weight" : !kiln.weight<[512, 256], #kiln.storage<f32>>
  %attn_norm = kiln.weight "blk.0.attn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
  %wq = kiln.weight "blk.0.attn_q.weight" : !kiln.weight<[256, 256], #kiln.storage<f32>>
  %wk = kiln.weight "blk.0.attn_k.weight" : !kiln.weight<[128, 256], #kiln.storage<f32>>
  %wv = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[128, 256], #kiln.storage<f32>>
  %wo = kiln.weight "blk.0.attn_output.weight" : !kiln.weight<[256, 256], #kiln.storage<f32>>
  %ffn_norm = kiln.weight "blk.0.ffn_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
  %wg = kiln.weight "blk.0.ffn_gate.weight" : !kiln.weight<[512, 256], #kiln.storage<f32>>
  %wu = kiln.weight "blk.0.ffn_up.weight" : !kiln.weight<[512, 256], #kiln.storage<f32>>
  %wd = kiln.weight "blk.0.ffn_down.weight" : !kiln.weight<[256, 512], #kiln.storage<f32>>
  %output_norm = kiln.weight "output_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
  %output = kiln.weight "output.weight" : !kiln.weight<[512, 256], #kiln.storage<f32>>
  return
}

// -----

// Tied embeddings (after kiln-fuse, the head is a fused_matmul): the table
// is also the head, so it gets the head's q6_k.

// KEEP-LABEL: func.func @tied
// KEEP: kiln.weight "token_embd.weight" : !kiln.weight<[512, 256], #kiln.storage<f16>>

// Q4K-LABEL: func.func @tied
// Q4K: kiln.weight "token_embd.weight" {repack = "f16->q6_k", source = #kiln.storage<f16>} : !kiln.weight<[512, 256], #kiln.storage<q6_k>>

// INT4-LABEL: func.func @tied
// INT4: kiln.weight "token_embd.weight" {repack = "f16->q6_k", source = #kiln.storage<f16>} : !kiln.weight<[512, 256], #kiln.storage<q6_k>>
func.func @tied(%tokens: tensor<?xi32>) -> tensor<?x512xf32> {
  %tok_embd = kiln.weight "token_embd.weight" : !kiln.weight<[512, 256], #kiln.storage<f16>>
  %output_norm = kiln.weight "output_norm.weight" : !kiln.weight<[256], #kiln.storage<f32>>
  %x = kiln.embedding %tok_embd, %tokens : (!kiln.weight<[512, 256], #kiln.storage<f16>>, tensor<?xi32>) -> tensor<?x256xf32>
  %logits = kiln.fused_matmul %x norm(%output_norm) weights(%tok_embd) {eps = 1.0e-5 : f64, epilogue = #kiln<epilogue none>} : (tensor<?x256xf32>, !kiln.weight<[256], #kiln.storage<f32>>, !kiln.weight<[512, 256], #kiln.storage<f16>>) -> tensor<?x512xf32>
  return %logits : tensor<?x512xf32>
}

// -----

// Rows that are not whole blocks of the chosen type fall back to q8_0, then
// f16; an override cannot fall back.

// Q4K-LABEL: func.func @fallback
// Q4K: kiln.weight "token_embd.weight" {repack = "f32->f16", source = #kiln.storage<f32>} : !kiln.weight<[512, 40], #kiln.storage<f16>>
// Q4K: kiln.weight "blk.0.attn_v.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[32, 96], #kiln.storage<q8_0>>
// Q4K: kiln.weight "blk.0.ffn_down.weight" {repack = "f32->f16", source = #kiln.storage<f32>} : !kiln.weight<[40, 72], #kiln.storage<f16>>
// Q4K: kiln.weight "output.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[512, 96], #kiln.storage<q8_0>>

// int4 with groups of 64 falls back the same way.
// INT4-LABEL: func.func @fallback
// INT4: kiln.weight "blk.0.attn_v.weight" {repack = "f32->q8_0", source = #kiln.storage<f32>} : !kiln.weight<[32, 96], #kiln.storage<q8_0>>
// INT4: kiln.weight "blk.0.ffn_down.weight" {repack = "f32->f16", source = #kiln.storage<f32>} : !kiln.weight<[40, 72], #kiln.storage<f16>>

// BADOVR: error: override 'attn_v=q4_k' asks for q4_k storage of blk.0.attn_v.weight, but its row length 96 is not a multiple of the 256-element block
// BADOVR-NOT: error:
func.func @fallback() {
  // expected-remark @below {{token_embd.weight: row length 40 is not a multiple of the q8_0 block of 32 elements; stored as f16}}
  %tok_embd = kiln.weight "token_embd.weight" : !kiln.weight<[512, 40], #kiln.storage<f32>>
  // expected-remark @below {{blk.0.attn_v.weight: row length 96 is not a multiple of the q4_k block of 256 elements; stored as q8_0}}
  %wv = kiln.weight "blk.0.attn_v.weight" : !kiln.weight<[32, 96], #kiln.storage<f32>>
  // expected-remark @below {{blk.0.ffn_down.weight: row length 72 is not a multiple of the q4_k block of 256 elements; stored as f16}}
  %wd = kiln.weight "blk.0.ffn_down.weight" : !kiln.weight<[40, 72], #kiln.storage<f32>>
  // expected-remark @below {{output.weight: row length 96 is not a multiple of the q6_k block of 256 elements; stored as q8_0}}
  %output = kiln.weight "output.weight" : !kiln.weight<[512, 96], #kiln.storage<f32>>
  return
}

// -----

// A weight marked by an earlier run starts again from its file storage.

// KEEP-LABEL: func.func @requantize
// KEEP: kiln.weight "blk.0.attn_q.weight" {repack = "f16->q8_0", source = #kiln.storage<f16>} : !kiln.weight<[64, 256], #kiln.storage<q8_0>>

// Q4K-LABEL: func.func @requantize
// Q4K: kiln.weight "blk.0.attn_q.weight" {repack = "f16->q4_k", source = #kiln.storage<f16>} : !kiln.weight<[64, 256], #kiln.storage<q4_k>>
func.func @requantize() {
  %wq = kiln.weight "blk.0.attn_q.weight" {source = #kiln.storage<f16>, repack = "f16->q8_0"} : !kiln.weight<[64, 256], #kiln.storage<q8_0>>
  return
}

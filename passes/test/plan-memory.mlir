// RUN: kiln-opt %s -split-input-file -verify-diagnostics --kiln-plan-memory="buckets=1,4 alignment=64" | FileCheck %s
// The invalid cases at the end fail under any options, hence `not`:
// RUN: not kiln-opt %s -split-input-file --kiln-plan-memory 2>/dev/null | FileCheck %s --check-prefix=DEFAULT
// RUN: not kiln-opt %s -split-input-file --kiln-plan-memory="buckets=4,2" 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not kiln-opt %s -split-input-file --kiln-plan-memory="buckets=0,2" 2>&1 | FileCheck %s --check-prefix=ORDER0
// RUN: not kiln-opt %s -split-input-file --kiln-plan-memory="alignment=48" 2>&1 | FileCheck %s --check-prefix=ALIGN

// ORDER: error: kiln-plan-memory: buckets must be positive and increasing, got 4, 2
// ORDER0: error: kiln-plan-memory: buckets must be positive and increasing, got 0, 2
// ALIGN: error: kiln-plan-memory: alignment must be a power of two, got 48

// Offsets by hand, alignment 64, rows of 16 floats = 64 bytes per token.
// Live ranges (op index in the block, weights are 0-3): x [4,9], n [5,6],
// h [6,7], s [7,8], d [8,9], r [9,10], l [10,11], ids [11,end].
// Bucket 1: sizes h, s 128; the others 64 (ids: 4 bytes rounded up).
//   h 0; s 128 (h is live at 7); x 256 (h and s in the way);
//   n 128 (gap 128..256 between h and x); d 0 (gap below s);
//   r 64 (gap 64..256 between d and x); l 0; ids 64.   peak 320
// Bucket 4: sizes h, s 512; x, n, d, r, l 256; ids 64.
//   h 0; s 512; x 1024; n 512; d 0; r 256; l 0; ids 256.   peak 1280

// CHECK-LABEL: func.func @step(
// CHECK-SAME: attributes {kiln.memory_plan = {buckets = array<i64: 1, 4>, peak_bytes = array<i64: 320, 1280>}}
// CHECK: kiln.weight "emb"
// CHECK-NOT: kiln.arena
// CHECK: kiln.weight "w2"
// CHECK: %[[X:.*]] = kiln.embedding {{.*}} {kiln.arena = array<i64: 256, 1024>}
// CHECK: %[[N:.*]] = kiln.rms_norm {{.*}}kiln.arena = array<i64: 128, 512>
// CHECK: %[[H:.*]] = kiln.matmul {{.*}} {kiln.arena = array<i64: 0, 0>}
// CHECK: %[[S:.*]] = kiln.silu %[[H]] {kiln.arena = array<i64: 128, 512>}
// CHECK: %[[D:.*]] = kiln.matmul %[[S]], {{.*}} {kiln.arena = array<i64: 0, 0>}
// CHECK: %[[R:.*]] = kiln.add %[[X]], %[[D]] {kiln.arena = array<i64: 64, 256>}
// CHECK: %[[L:.*]] = kiln.gather_rows %[[R]], {{.*}} {kiln.arena = array<i64: 0, 0>}
// CHECK: %[[IDS:.*]] = kiln.argmax %[[L]] {kiln.arena = array<i64: 64, 256>}
// CHECK: return %[[IDS]]

// With the default options, buckets 1..512 and 256-byte alignment: with one
// or two tokens every buffer rounds up to 256 bytes, and at most three are
// live at once (x, n, h at op 6); from 4 tokens on, x, h and s at op 7 take
// 2.5 x 128 bytes per token.
// DEFAULT-LABEL: func.func @step(
// DEFAULT-SAME: kiln.memory_plan = {buckets = array<i64: 1, 2, 4, 8, 16, 32, 64, 128, 256, 512>,
// DEFAULT-SAME: peak_bytes = array<i64: 768, 768, 1280, 2560, 5120, 10240, 20480, 40960, 81920, 163840>}

// expected-remark @+1 {{arena peak per bucket: 1 tokens: 320 bytes, 4 tokens: 1280 bytes}}
func.func @step(%tokens: tensor<?xi32> {kiln.role = "tokens"}, %rows: tensor<?xi32> {kiln.role = "logit_rows"}) -> tensor<?xi32> {
  %emb = kiln.weight "emb" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %g = kiln.weight "g" : !kiln.weight<[16], #kiln.storage<f32>>
  %w1 = kiln.weight "w1" : !kiln.weight<[32, 16], #kiln.storage<f32>>
  %w2 = kiln.weight "w2" : !kiln.weight<[16, 32], #kiln.storage<f32>>
  %x = kiln.embedding %emb, %tokens : (!kiln.weight<[32, 16], #kiln.storage<f32>>, tensor<?xi32>) -> tensor<?x16xf32>
  %n = kiln.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<?x16xf32>, !kiln.weight<[16], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %h = kiln.matmul %n, %w1 : (tensor<?x16xf32>, !kiln.weight<[32, 16], #kiln.storage<f32>>) -> tensor<?x32xf32>
  %s = kiln.silu %h : tensor<?x32xf32>
  %d = kiln.matmul %s, %w2 : (tensor<?x32xf32>, !kiln.weight<[16, 32], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %r = kiln.add %x, %d : tensor<?x16xf32>
  %l = kiln.gather_rows %r, %rows : (tensor<?x16xf32>, tensor<?xi32>) -> tensor<?x16xf32>
  %ids = kiln.argmax %l : (tensor<?x16xf32>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}

// -----

// A multi-result op gets one offset array per result. Live ranges (weights
// are 0-4): q [5,8], k [5,6], v [5,6], kv [6,7], y [7,8], z [8,end].
// Bucket 1 (all 64 bytes, taken in block order): q 0, k 64, v 128, kv 192,
//   y 64 (gap 64..192 below kv), z 128.   peak 256
// Bucket 4 (q, y, z 256 bytes first; k, v, kv 128): q 0, y 256, z 512,
//   k 256, v 384, kv 512.   peak 768

// CHECK-LABEL: func.func @multi_result(
// CHECK-SAME: kiln.memory_plan = {buckets = array<i64: 1, 4>, peak_bytes = array<i64: 256, 768>}
// CHECK: %[[QKV:.*]]:3 = kiln.fused_matmul
// CHECK-SAME: kiln.arena = [array<i64: 0, 0>, array<i64: 64, 256>, array<i64: 128, 384>]
// CHECK: kiln.mul %[[QKV]]#1, %[[QKV]]#2 {kiln.arena = array<i64: 192, 512>}
// CHECK: kiln.matmul {{.*}} {kiln.arena = array<i64: 64, 256>}
// CHECK: kiln.add {{.*}} {kiln.arena = array<i64: 128, 512>}

// DEFAULT-LABEL: func.func @multi_result(
// DEFAULT: kiln.arena = [array<i64: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>, array<i64: 256,

// expected-remark @+1 {{arena peak per bucket: 1 tokens: 256 bytes, 4 tokens: 768 bytes}}
func.func @multi_result(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %g = kiln.weight "g" : !kiln.weight<[16], #kiln.storage<f32>>
  %wq = kiln.weight "q" : !kiln.weight<[16, 16], #kiln.storage<f32>>
  %wk = kiln.weight "k" : !kiln.weight<[8, 16], #kiln.storage<f32>>
  %wv = kiln.weight "v" : !kiln.weight<[8, 16], #kiln.storage<f32>>
  %wo = kiln.weight "o" : !kiln.weight<[16, 8], #kiln.storage<f32>>
  %q, %k, %v = kiln.fused_matmul %x norm(%g) weights(%wq, %wk, %wv) {eps = 1.0e-5 : f64, epilogue = #kiln<epilogue none>} : (tensor<?x16xf32>, !kiln.weight<[16], #kiln.storage<f32>>, !kiln.weight<[16, 16], #kiln.storage<f32>>, !kiln.weight<[8, 16], #kiln.storage<f32>>, !kiln.weight<[8, 16], #kiln.storage<f32>>) -> (tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>)
  %kv = kiln.mul %k, %v : tensor<?x8xf32>
  %y = kiln.matmul %kv, %wo : (tensor<?x8xf32>, !kiln.weight<[16, 8], #kiln.storage<f32>>) -> tensor<?x16xf32>
  %z = kiln.add %y, %q : tensor<?x16xf32>
  return %z : tensor<?x16xf32>
}

// -----

// A function with no kernel op is not a step function: no plan, no remark.

// CHECK-LABEL: func.func @no_kernels(
// CHECK-NOT: kiln.memory_plan
// CHECK: return
func.func @no_kernels(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  return %x : tensor<?x16xf32>
}

// -----

func.func @dynamic_width(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  // expected-error @+1 {{'kiln.silu' op result #0 cannot be planned: kiln-plan-memory needs a 1-D or 2-D tensor of static width, got 'tensor<?x?xf32>'}}
  %s = kiln.silu %x : tensor<?x?xf32>
  return %s : tensor<?x?xf32>
}

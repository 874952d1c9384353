// matmul / fused_matmul for prefill-sized buckets on workgroup-scope
// cooperative matrices with tensor addressing (SPV_NV_cooperative_matrix2),
// where the device has them: the driver stages the tiles and picks the
// tensor-core instructions. On the H200 a plain f16 GEMM of this shape ran at
// 257 TFLOP/s against ~90 for matmul_coopmat.comp's hand-staged tiles
// (docs/perf/vulkan-h200.md, session 22). Reads the f16 copy of the weights
// (or f16 weights) and f16 activations that activations_f16.comp wrote just
// before (normalised there where the launch has a norm), so the epilogues
// here are the plain ones: each weight's columns to its output, or
// residual_add. silu_mul launches run as two weights (gate, up) to two
// outputs, then elementwise.comp's silu_mul: two sums of one output in one
// workgroup took two tile loads a step and ran at a third to a half of the
// rate of one sum over twice the columns (docs/perf/vulkan-h200.md, session 22).
//
// A launch whose grid of tiles would leave SMs idle (the 4096-column o and
// down of a 512-token step: 64 tiles on 132 SMs) splits K in K_SLICES
// instances, dispatched side by side: instance K_SLICE sums its run of K and
// stores the bare sums at out0 + K_SLICE x rows x N0, and elementwise.comp's
// OP 5 adds the slices and the residual (one weight). The slice is a
// compile-time constant: with the loop's bounds and offsets taken at run
// time the driver's code ran 3.5x slower (docs/perf/vulkan-h200.md,
// session 47).
//
// Constants: as matmul.comp (K, NUM_W, N0..N2, EPILOGUE), plus BM, BN, BK,
// WG, and where split K_SLICES, K_SLICE, K_BEGIN and K_END; every slot f16;
// with NUM_W > 1 and EPILOGUE 0, N0 and N1 multiples of BN (a column tile
// lies in one weight). Bindings: the weights' f16 rows, the f16 activations
// at 6 (from offset 0), the arena at 5. Push constants: in1 (residual),
// out0..out2.
// Launch shape: x = column tiles (from push constant column_tile_base), y =
// token tiles of the bucket. A launch whose large tiles would end in a
// partial wave (gate/up of a 512-token step: 448 tiles, 3.4 waves on 132
// SMs) runs its last columns as a second dispatch of small tiles beside the
// first, which fill the last wave's SMs two at a time.

#if EPILOGUE == 0
#define NCOLS (N0 + N1 + N2)
#else
#define NCOLS N0
#endif
#if EPILOGUE == 1
#error "silu_mul runs as EPILOGUE 0 (gate and up to two outputs), then elementwise OP 4"
#endif

#include_matmul

// A slice's run of K (K_BEGIN .. K_END, set by codegen: whole unrolled runs
// of 8 steps but the last).
#ifndef K_SLICES
#define K_SLICES 1
#define K_SLICE 0
#define K_BEGIN 0
#define K_END K
#endif

layout(std430, set = 0, binding = 0) readonly buffer Weight0F16 { float16_t w0h[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weight1F16 { float16_t w1h[]; };
layout(std430, set = 0, binding = 2) readonly buffer Weight2F16 { float16_t w2h[]; };
// The f16 activations: binding 6 (a matmul has no KV pages) holds exactly
// them, so their loads start at offset 0 (aligned, as the tensor loads want).
layout(std430, set = 0, binding = 6) readonly buffer ActivationsF16 { float16_t act16[]; };

#define CLAMP gl_CooperativeMatrixClampModeConstantNV
#define TILE_A coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define TILE_B coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define TILE_C coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>

// One step along k: the activation tile and weight W's tile (rows r0 ..
// r0 + BN, transposed to B) at K0, multiplied into the sums.
#define STEP(W, LA, LW, K0)                                                               \
  {                                                                                       \
    TILE_A ta;                                                                            \
    TILE_B tb;                                                                            \
    coopMatLoadTensorNV(ta, act16, 0, sliceTensorLayoutNV(LA, t0, BM, K0, BK));           \
    coopMatLoadTensorNV(tb, W, 0, sliceTensorLayoutNV(LW, r0, BN, K0, BK), transposed);   \
    acc = coopMatMulAdd(ta, tb, acc);                                                     \
  }

// The slice's K: unrolled runs of 8 steps (the driver keeps their loads in
// flight together: 57 -> 257 TFLOP/s in the probe), then the rest step by
// step.
#define K_LOOP(W, LA, LW)                                          \
  {                                                                \
    uint k0 = K_BEGIN;                                             \
    [[dont_unroll]] for (uint i = 0u; i < (K_END - K_BEGIN) / (8u * BK); ++i) {\
      [[unroll]] for (uint j = 0u; j < 8u; ++j) {                  \
        STEP(W, LA, LW, k0)                                        \
        k0 += BK;                                                  \
      }                                                            \
    }                                                              \
    for (; k0 < K_END; k0 += BK) STEP(W, LA, LW, k0)               \
  }

// The weight of the workgroup's columns, chosen once outside the k loop (a
// choice inside it kept the loads of one step from overlapping the next's).
#if NUM_W >= 3
#define K_LOOP_SLOT(LA, LW)                 \
  if (slot == 2u) K_LOOP(w2h, LA, LW)       \
  else if (slot == 1u) K_LOOP(w1h, LA, LW)  \
  else K_LOOP(w0h, LA, LW)
#elif NUM_W == 2
#define K_LOOP_SLOT(LA, LW)                 \
  if (slot == 1u) K_LOOP(w1h, LA, LW)       \
  else K_LOOP(w0h, LA, LW)
#else
#define K_LOOP_SLOT(LA, LW) K_LOOP(w0h, LA, LW)
#endif

void main() {
  const uint rows = launch_rows();
  const uint t0 = gl_WorkGroupID.y * BM, n0 = (gl_WorkGroupID.x + pc.column_tile_base) * BN;
  if (t0 >= rows || n0 >= NCOLS) return;  // the same for the whole workgroup
  const uint slot = slot_of(n0), r0 = row_of(n0, slot);
  const uint width = slot == 0u ? N0 : (slot == 1u ? N1 : N2);
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
  TILE_C acc = TILE_C(0.0);
  if (t0 + BM <= rows && r0 + BN <= width && K % BK == 0) {
    // Whole tiles: unchecked loads (bounds checks slow every load down).
    tensorLayoutNV<2> la = setTensorLayoutDimensionNV(createTensorLayoutNV(2), rows, K);
    tensorLayoutNV<2> lw = setTensorLayoutDimensionNV(createTensorLayoutNV(2), width, K);
    K_LOOP_SLOT(la, lw)
  } else {
    // Edge tiles: rows past the step's tokens or the weight, and k past K,
    // read as 0.
    tensorLayoutNV<2, CLAMP> la = setTensorLayoutDimensionNV(createTensorLayoutNV(2, CLAMP), rows, K);
    tensorLayoutNV<2, CLAMP> lw = setTensorLayoutDimensionNV(createTensorLayoutNV(2, CLAMP), width, K);
    K_LOOP_SLOT(la, lw)
  }
  // The stores write only the tensor's elements.
  tensorLayoutNV<2, CLAMP> lc = setTensorLayoutDimensionNV(createTensorLayoutNV(2, CLAMP), rows, width);
#if EPILOGUE == 2 && K_SLICES == 1
  TILE_C residual;
  coopMatLoadTensorNV(residual, arena, pc.in1, sliceTensorLayoutNV(lc, t0, BM, r0, BN));
  acc = acc + residual;
#endif
  const uint dst = (slot == 0u ? pc.out0 : (slot == 1u ? pc.out1 : pc.out2)) + K_SLICE * rows * width;
  coopMatStoreTensorNV(acc, arena, dst, sliceTensorLayoutNV(lc, t0, BM, r0, BN));
}

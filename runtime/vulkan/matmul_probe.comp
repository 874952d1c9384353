// The Vulkan FLOP probe's matmul: c (m x n, f16) = a (m x k, f16) times b
// (n x k, f16, rows as the weights are kept) transposed, f32 sums, on
// workgroup-scope cooperative matrices with tensor addressing
// (GL_NV_cooperative_matrix2): the driver stages the tiles and picks the
// tensor-core instructions, so this is the rate a plain tiled kernel of this
// kind reaches. BM, BN, BK, WG and KSIZE (m = n = k) are defined per variant
// by scripts/compile_matmul_probe.py, which writes matmul_probe_spirv.inc
// (Debian 12's glslc does not know the extension). The sizes are
// compile-time constants: with the k loop's bound a push constant NVIDIA's
// driver ran this loop at a quarter of the rate (61.9 against 267 TFLOP/s
// on an H100; docs/perf/vulkan-h200.md, sessions 47 and 48), as it did
// matmul_coopmat2.comp's.
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float16_t a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float16_t b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { float16_t c[]; };
void main() {
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
  tensorLayoutNV<2> la = setTensorLayoutDimensionNV(createTensorLayoutNV(2), KSIZE, KSIZE);
  tensorLayoutNV<2> lb = setTensorLayoutDimensionNV(createTensorLayoutNV(2), KSIZE, KSIZE);
  tensorLayoutNV<2> lc = setTensorLayoutDimensionNV(createTensorLayoutNV(2), KSIZE, KSIZE);
  tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
  coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
  uint k0 = 0;
  [[dont_unroll]] for (uint i = 0; i < KSIZE / (8 * BK); ++i) {
    [[unroll]] for (uint j = 0; j < 8; ++j) {
      coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ta;
      coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> tb;
      coopMatLoadTensorNV(ta, a, 0, sliceTensorLayoutNV(la, m0, BM, k0, BK));
      coopMatLoadTensorNV(tb, b, 0, sliceTensorLayoutNV(lb, n0, BN, k0, BK), transposed);
      acc = coopMatMulAdd(ta, tb, acc);
      k0 += BK;
    }
  }
  coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> out16 =
      coopmat<float16_t, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
  coopMatStoreTensorNV(out16, c, 0, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
}

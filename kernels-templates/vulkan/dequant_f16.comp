// One weight decoded to f16 rows (slot 0's storage, weights.glsl's decoder)
// into binding 5, eight elements a 16-byte word, row-major: the copy the
// tensor-core prefill variant on f16 rows reads (matmul_coopmat.comp, F16W).
// The Vulkan executor runs it once per weight at load, so quantised weights
// never cross the bus twice.
// Constants: K (elements a row, a multiple of 8), W0 / W0_COLS, WG.
// Push constants: in0 = rows. Launch shape: x = workgroups striding over
// rows * K / 8 words.
layout(std430, set = 0, binding = 5) writeonly buffer F16Rows { uvec4 f16_rows_[]; };

void main() {
  const uint words = pc.in0 * (K / 8u);
  for (uint i = gl_GlobalInvocationID.x; i < words; i += gl_NumWorkGroups.x * WG) {
    const uint row = i / (K / 8u), e = (i % (K / 8u)) * 8u;
    const vec4 lo = wread4_0(row, e), hi = wread4_0(row, e + 4u);
    f16_rows_[i] = uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
  }
}

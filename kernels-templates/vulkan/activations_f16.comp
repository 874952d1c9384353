// The f16 activations matmul_coopmat2.comp reads: out[t, k] = in0[t, k]
// (times 1 / rms of row t and the norm's gain at k with HAS_NORM), 8 values
// a thread, written as 16-byte words of halves. The 1 / rms comes from the
// row_rms dispatch before (push constant row_rms). Converting once per launch
// here lets the matmul load its activation tiles as they are (the driver
// stages them) instead of each workgroup converting and normalising its rows.
// Constants: K (a multiple of 8), HAS_NORM, WG. Push constants: in0 (floats),
// out0 (halves of binding 5, a multiple of 8), row_rms.
// Launch shape: x = workgroups striding over the rows' 8-value groups.
layout(std430, set = 0, binding = 5) buffer Arena4 { vec4 arena4[]; };
layout(std430, set = 0, binding = 5) buffer ArenaWords { uvec4 arena_words[]; };

void main() {
  const uint groups = launch_rows() * (K / 8u);
  for (uint i = gl_GlobalInvocationID.x; i < groups; i += gl_NumWorkGroups.x * WG) {
    const uint t = i / (K / 8u), k = (i % (K / 8u)) * 8u;
    vec4 lo = arena4[(pc.in0 + t * K + k) / 4u], hi = arena4[(pc.in0 + t * K + k) / 4u + 1u];
#if HAS_NORM
    const float r = arena[pc.row_rms + t];
    lo *= r * vec4(vec_[k], vec_[k + 1u], vec_[k + 2u], vec_[k + 3u]);
    hi *= r * vec4(vec_[k + 4u], vec_[k + 5u], vec_[k + 6u], vec_[k + 7u]);
#endif
    arena_words[(pc.out0 + t * K + k) / 8u] =
        uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
  }
}

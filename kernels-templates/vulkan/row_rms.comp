// The 1 / rms of each token's row, for the tiled variants of a normed matmul
// (the dispatch before it): out0[t] = 1 / sqrt(mean(in0[t, :]^2) + EPS).
// Each of their workgroups summed its tokens' whole rows before; once per
// launch instead (docs/perf/vulkan-h200.md, session 20). A subgroup a token,
// lanes along K, 16 bytes a read where the row allows.
// Constants: K, EPS, WG. Push constants: in0, out0.
// Launch shape: x = workgroups striding over the bucket's tokens, a subgroup each.
layout(std430, set = 0, binding = 5) buffer Arena4 { vec4 arena4[]; };

void main() {
  const uint rows = launch_rows(), lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
  const bool by4 = K % 4 == 0 && pc.in0 % 4u == 0u;
  for (uint t = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; t < rows; t += gl_NumWorkGroups.x * gl_NumSubgroups) {
    float s = 0.0;
    if (by4) {
      for (uint k4 = lane; k4 < K / 4; k4 += lanes) {
        const vec4 x = arena4[(pc.in0 + t * K) / 4u + k4];
        s += dot(x, x);
      }
    } else {
      for (uint k = lane; k < K; k += lanes) {
        const float x = arena[pc.in0 + t * K + k];
        s += x * x;
      }
    }
    s = subgroupAdd(s);
    if (subgroupElect()) arena[pc.out0 + t] = inversesqrt(s / float(K) + EPS);
  }
}

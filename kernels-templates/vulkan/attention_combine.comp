// The end of a split-K paged_attention: for every (token, head) the splits'
// partials (max m_s, sum l_s, weighted V a_s; binding 0) merge into
//   out0[t, h, c] = sum_s a_s[c] exp(m_s - M) / sum_s l_s exp(m_s - M),  M = max_s m_s,
// empty splits (l_s = 0) left out.
// Constants: NUM_HEADS, HEAD_DIM, USES_PARTIALS, WG. Push constants: out0, splits.
// Launch shape: x = workgroups striding over bucket * NUM_HEADS * HEAD_DIM.
void main() {
  const uint n = step_tokens() * NUM_HEADS * HEAD_DIM;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint head = i / HEAD_DIM, c = i % HEAD_DIM;
    const uint base = head * pc.splits * (HEAD_DIM + 2u);
    float m = uintBitsToFloat(0xFF800000u);  // -inf
    for (uint s = 0u; s < pc.splits; ++s) {
      if (partial_[base + s * (HEAD_DIM + 2u) + 1u] > 0.0) m = max(m, partial_[base + s * (HEAD_DIM + 2u)]);
    }
    float sum = 0.0, v = 0.0;
    for (uint s = 0u; s < pc.splits; ++s) {
      const uint at = base + s * (HEAD_DIM + 2u);
      if (partial_[at + 1u] > 0.0) {
        const float f = exp(partial_[at] - m);
        sum += partial_[at + 1u] * f;
        v += partial_[at + 2u + c] * f;
      }
    }
    arena[pc.out0 + i] = v / sum;
  }
}

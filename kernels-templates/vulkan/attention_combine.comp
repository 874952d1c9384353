// The end of a split-K paged_attention: for every (token, head) the splits'
// partials (max m_s, sum l_s, weighted V a_s; binding 0) merge into
//   out0[t, h, c] = sum_s a_s[c] exp(m_s - M) / sum_s l_s exp(m_s - M),  M = max_s m_s,
// in one pass (a running maximum), empty splits (l_s = 0) left out. Only the
// splits paged_attention gave positions are read (attention_chunk).
// Constants: NUM_HEADS, HEAD_DIM, TILE, USES_PARTIALS, WG. Push constants: out0, splits.
// Launch shape: x = workgroups striding over bucket * NUM_HEADS * HEAD_DIM.
void main() {
  const uint n = step_tokens() * NUM_HEADS * HEAD_DIM;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint head = i / HEAD_DIM, c = i % HEAD_DIM;
    const uint pos = uint(io_at(IO_POSITIONS, head / NUM_HEADS));
    const uint chunk = attention_chunk(pos, pc.splits, uint(TILE));
    const uint used = min(pc.splits, (pos + chunk) / chunk);
    const uint base = head * pc.splits * (HEAD_DIM + 2u);
    float m = uintBitsToFloat(0xFF800000u);  // -inf
    float sum = 0.0, v = 0.0;
    for (uint s = 0u; s < used; ++s) {
      const uint at = base + s * (HEAD_DIM + 2u);
      const float l = partial_[at + 1u];
      if (l > 0.0) {
        const float m_s = partial_[at], m_new = max(m, m_s);
        const float f_old = exp(m - m_new), f = exp(m_s - m_new);
        sum = sum * f_old + l * f;
        v = v * f_old + partial_[at + 2u + c] * f;
        m = m_new;
      }
    }
    arena[pc.out0 + i] = v / sum;
  }
}

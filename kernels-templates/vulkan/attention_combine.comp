// The end of a split-K paged_attention: for every (token, head) the splits'
// partials (max m_s, sum l_s, weighted V a_s; binding 0) merge into
//   out0[t, h, c] = sum_s a_s[c] exp(m_s - M) / sum_s l_s exp(m_s - M),  M = max_s m_s,
// (common.glsl's merge_splits). Only the splits paged_attention gave
// positions are read (attention_chunk).
// Constants: NUM_HEADS, HEAD_DIM, TILE, USES_PARTIALS, WG. Push constants: out0, splits.
// Launch shape: x = workgroups striding over bucket * NUM_HEADS * HEAD_DIM.
void main() {
  const uint n = step_tokens() * NUM_HEADS * HEAD_DIM;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint head = i / HEAD_DIM, c = i % HEAD_DIM;
    const uint pos = uint(io_at(IO_POSITIONS, head / NUM_HEADS));
    const uint chunk = attention_chunk(pos, pc.splits, uint(TILE));
    const uint used = min(pc.splits, (pos + chunk) / chunk);
    arena[pc.out0 + i] = merge_splits(head * pc.splits * (HEAD_DIM + 2u), used, c);
  }
}

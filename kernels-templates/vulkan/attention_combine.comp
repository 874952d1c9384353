// The end of a split-K paged_attention: for every (token, head) the splits'
// partials (max m_s, sum l_s, weighted V a_s; binding 0) merge into
//   out0[t, h, c] = sum_s a_s[c] e_s / sum_s l_s e_s,  e_s = exp(m_s - M),  M = max_s m_s.
// A workgroup per (token, head) (striding over them): a thread per split
// loads its m_s and l_s (one round trip for all splits), every thread then
// finds M and the sum from shared memory, and the threads of dims c load
// a_s[c] BATCH splits at a time. Only the splits paged_attention gave
// positions are read (attention_chunk); split 0 always has some, so M is
// finite. (A thread per output walking the splits twice, each load in a
// loop over `used`, took ~7 us a layer on the H200: docs/perf/vulkan-h200.md,
// session 21.)
// Constants: NUM_HEADS, HEAD_DIM, TILE, USES_PARTIALS, MAX_SPLITS (the most
// pc.splits can be), WG. Push constants: out0, splits.
// Launch shape: x = workgroups striding over bucket * NUM_HEADS.
#define BATCH 8

shared float e_[MAX_SPLITS];  // m_s, then e_s
shared float le_[MAX_SPLITS];  // l_s, then l_s e_s

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint pairs = step_tokens() * NUM_HEADS;
  for (uint th = gl_WorkGroupID.x; th < pairs; th += gl_NumWorkGroups.x) {
    const uint pos = uint(io_at(IO_POSITIONS, th / NUM_HEADS));
    const uint chunk = attention_chunk(pos, pc.splits, uint(TILE));
    const uint used = min(pc.splits, (pos + chunk) / chunk);
    const uint base = th * pc.splits * (HEAD_DIM + 2u);
    barrier();  // the previous pair's e_ and le_ are read
    for (uint s = tid; s < used; s += WG) {
      e_[s] = partial_[base + s * (HEAD_DIM + 2u)];
      le_[s] = partial_[base + s * (HEAD_DIM + 2u) + 1u];
    }
    barrier();
    float mx = e_[0];
    for (uint s = 1u; s < used; ++s) mx = max(mx, e_[s]);
    barrier();  // every thread has read the maxima
    for (uint s = tid; s < used; s += WG) {
      const float e = exp(e_[s] - mx);
      e_[s] = e;
      le_[s] *= e;
    }
    barrier();
    float sum = 0.0;
    for (uint s = 0u; s < used; ++s) sum += le_[s];
    for (uint c = tid; c < HEAD_DIM; c += WG) {
      float v = 0.0;
      for (uint s0 = 0u; s0 < used; s0 += BATCH) {
        float a[BATCH];
        for (uint b = 0u; b < BATCH; ++b) a[b] = partial_[base + min(s0 + b, used - 1u) * (HEAD_DIM + 2u) + 2u + c];
        for (uint b = 0u; b < BATCH; ++b) v += s0 + b < used ? a[b] * e_[s0 + b] : 0.0;
      }
      arena[pc.out0 + th * HEAD_DIM + c] = v / sum;
    }
  }
}

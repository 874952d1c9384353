// The back half of paged_attention (kiln.paged_attention), after kv_append:
// for token t at position p of sequence s and query head h,
//   out0[t, h] = sum_{j <= p} softmax_j(SCALE * q'[t, h] . K_s[j, g]) V_s[j, g],
// g = h / (NUM_HEADS / NUM_KV_HEADS), q' = q rotated at p when HAS_ROPE.
// Split-K (flash-decoding): pc.splits workgroups share one (head, token),
// each takes a contiguous chunk of its positions; inside a workgroup the
// threads split the chunk, each keeps an online softmax (max, sum, weighted
// V), and they merge through subgroup ops and shared memory. With one split
// the workgroup writes the output; with more it writes (max, sum, weighted V)
// to the partials (binding 0) and attention_combine merges them. Decode
// steps get many splits (few tokens, long contexts), prefill steps one.
// Constants: NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, SCALE, HAS_ROPE
// (+ ROPE_DIMS, ROPE_STYLE), USES_PARTIALS, WG.
// Push constants: in0 q, out0, kv_base, kv_half, splits.
// Launch shape: x = NUM_HEADS, y = the bucket's tokens, z = splits.
#if HAS_ROPE
#include_rope
#endif
#define KV_W (NUM_KV_HEADS * HEAD_DIM)
#define GROUP (NUM_HEADS / NUM_KV_HEADS)

shared float q_[HEAD_DIM];
shared float max_partial_[WG];
shared float sum_partial_[WG * (HEAD_DIM + 1)];

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  if (t >= step_tokens()) return;
  const uint tid = gl_LocalInvocationID.x;
  const uint pos = uint(io_at(IO_POSITIONS, t));
  const uint s = sequence_of(t);
  const uint table = s * uint(io[IO_PAGES_PER_SEQ]);
  const uint q_head = pc.in0 + (t * NUM_HEADS + h) * HEAD_DIM;
  for (uint c = tid; c < HEAD_DIM; c += WG) {
#if HAS_ROPE
    q_[c] = c < ROPE_DIMS ? rope_element(q_head, c, pos) : arena[q_head + c];
#else
    q_[c] = arena[q_head + c];
#endif
  }
  barrier();

  const uint kv_col = (h / GROUP) * HEAD_DIM;
  // This split's positions: chunks of at least WG, so short contexts leave
  // the later splits empty rather than spreading a few positions thin.
  const uint split = gl_WorkGroupID.z;
  const uint chunk = max((pos + pc.splits) / pc.splits, uint(WG));
  const uint first = split * chunk;
  const uint end = min(pos + 1u, first + chunk);
  float m = uintBitsToFloat(0xFF800000u);  // -inf
  float l = 0.0;
  float acc[HEAD_DIM];
  for (uint c = 0u; c < HEAD_DIM; ++c) acc[c] = 0.0;
  for (uint j = first + tid; j < end; j += WG) {
    const uint page = uint(io_at(IO_BLOCK_TABLES, table + j / PAGE_SIZE));
    const uint row = pc.kv_base + (page * PAGE_SIZE + j % PAGE_SIZE) * KV_W + kv_col;
    // Four running sums, as the CPU reference adds them.
    float d0 = 0.0, d1 = 0.0, d2 = 0.0, d3 = 0.0;
    uint c = 0u;
    for (; c + 4u <= HEAD_DIM; c += 4u) {
      d0 += q_[c] * kv[row + c];
      d1 += q_[c + 1u] * kv[row + c + 1u];
      d2 += q_[c + 2u] * kv[row + c + 2u];
      d3 += q_[c + 3u] * kv[row + c + 3u];
    }
    for (; c < HEAD_DIM; ++c) d0 += q_[c] * kv[row + c];
    const float score = ((d0 + d1) + (d2 + d3)) * SCALE;
    const float m_new = max(m, score);
    const float correction = exp(m - m_new);
    const float p = exp(score - m_new);
    l = l * correction + p;
    for (uint c2 = 0u; c2 < HEAD_DIM; ++c2) acc[c2] = acc[c2] * correction + p * kv[row + pc.kv_half + c2];
    m = m_new;
  }

  // The workgroup's max, then every partial rescaled to it and summed.
  float m_all = subgroupMax(m);
  if (subgroupElect()) max_partial_[gl_SubgroupID] = m_all;
  barrier();
  m_all = max_partial_[0];
  for (uint g = 1u; g < gl_NumSubgroups; ++g) m_all = max(m_all, max_partial_[g]);
  const float f = l > 0.0 ? exp(m - m_all) : 0.0;
  l = subgroupAdd(l * f);
  for (uint c = 0u; c < HEAD_DIM; ++c) acc[c] = subgroupAdd(acc[c] * f);
  if (subgroupElect()) {
    sum_partial_[gl_SubgroupID * (HEAD_DIM + 1u)] = l;
    for (uint c = 0u; c < HEAD_DIM; ++c) sum_partial_[gl_SubgroupID * (HEAD_DIM + 1u) + 1u + c] = acc[c];
  }
  barrier();
  float total = 0.0;
  for (uint g = 0u; g < gl_NumSubgroups; ++g) total += sum_partial_[g * (HEAD_DIM + 1u)];
  if (pc.splits == 1u) {
    const uint dst = pc.out0 + (t * NUM_HEADS + h) * HEAD_DIM;
    for (uint c = tid; c < HEAD_DIM; c += WG) {
      float v = 0.0;
      for (uint g = 0u; g < gl_NumSubgroups; ++g) v += sum_partial_[g * (HEAD_DIM + 1u) + 1u + c];
      arena[dst + c] = v / total;
    }
    return;
  }
  // [token][head][split]: max, sum, then HEAD_DIM weighted V (an empty split: -inf, 0, 0...).
  const uint at = ((t * NUM_HEADS + h) * pc.splits + split) * (HEAD_DIM + 2u);
  if (tid == 0u) {
    partial_[at] = m_all;
    partial_[at + 1u] = total;
  }
  for (uint c = tid; c < HEAD_DIM; c += WG) {
    float v = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) v += sum_partial_[g * (HEAD_DIM + 1u) + 1u + c];
    partial_[at + 2u + c] = v;
  }
}

// paged_attention for prefill-sized steps (one split): the same output as
// paged_attention.comp, but a workgroup takes QT consecutive tokens of the
// step for the GROUP query heads of one KV head, so that each K and V row
// is read once into shared memory for all QT x GROUP query rows (the
// per-token kernel reads it once per token: QT times the L2 traffic).
// A query row is LPR neighbouring lanes; each lane keeps HEAD_DIM / LPR of
// the row's q (rotated, times SCALE) and of its output in registers, and a
// score is the lanes' partial dots added across the row with subgroup
// shuffles, so the row's lanes all hold every score of a tile: the online
// softmax needs no shared memory and no barrier. KT positions a tile.
// A tile of tokens from several sequences takes one pass per sequence; a
// row counts only in its own sequence's pass.
// Constants: NUM_HEADS, NUM_KV_HEADS, HEAD_DIM (a multiple of 4 * LPR),
// PAGE_SIZE, SCALE, HAS_ROPE (+ ROPE_DIMS, ROPE_STYLE), KV_F16 (pages of
// halves), QT, LPR (a power of
// two, at most the subgroup size), KT, WG (QT * GROUP * LPR rounded up).
// Push constants: in0 q, out0, kv_base, kv_half.
// Launch shape: x = NUM_KV_HEADS, y = ceil(bucket / QT).
#if HAS_ROPE
#include_rope
#endif
#define KV_W (NUM_KV_HEADS * HEAD_DIM)
#define GROUP (NUM_HEADS / NUM_KV_HEADS)
#define ROWS (QT * GROUP)
#define HV (HEAD_DIM / 4)  // vec4s of a row
#define DV (HV / LPR)      // vec4s of a row each lane holds: lane, lane + LPR, ...
#define NEG_INF uintBitsToFloat(0xFF800000u)

#if KV_F16
// Pages of halves as 8-byte words of four.
layout(std430, set = 0, binding = 6) buffer KvPagesH { uvec2 kvh[]; };
vec4 kv_vec4(uint i) {
  const uvec2 w = kvh[i];
  return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
}
#else
layout(std430, set = 0, binding = 6) buffer KvPages4 { vec4 kv4[]; };
vec4 kv_vec4(uint i) { return kv4[i]; }
#endif

shared vec4 k_[KT * HV];
shared vec4 v_[KT * HV];

float q_element(uint q_head, uint c, uint pos) {
#if HAS_ROPE
  if (c < ROPE_DIMS) return rope_element(q_head, c, pos);
#endif
  return arena[q_head + c];
}

void main() {
  const uint g = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * QT;
  const uint T = step_tokens();
  if (t0 >= T) return;
  const uint tid = gl_LocalInvocationID.x;
  const uint r = tid / LPR, lane = tid % LPR;
  const uint t = t0 + r / GROUP, h = g * GROUP + r % GROUP;
  const bool live = r < ROWS && t < T;
  const uint pos = live ? uint(io_at(IO_POSITIONS, t)) : 0u;
  const uint seq = live ? sequence_of(t) : 0xFFFFFFFFu;

  vec4 q[DV], acc[DV];
  const uint q_head = pc.in0 + (t * NUM_HEADS + h) * HEAD_DIM;
  for (uint d = 0u; d < DV; ++d) {
    const uint c = (lane + d * LPR) * 4u;
    q[d] = live ? SCALE * vec4(q_element(q_head, c, pos), q_element(q_head, c + 1u, pos),
                               q_element(q_head, c + 2u, pos), q_element(q_head, c + 3u, pos))
                : vec4(0.0);
    acc[d] = vec4(0.0);
  }
  float m = NEG_INF, l = 0.0;

  const uint t_last = min(t0 + uint(QT), T) - 1u;
  const uint S = uint(io[IO_S]);
  const uint kv_col = g * HEAD_DIM;
  const uint s_last = sequence_of(t_last);
  for (uint s = sequence_of(t0); s <= s_last; ++s) {
    // A sequence without tokens in this step has no rows here: skip the
    // pass (it would read another sequence's span of positions for nothing).
    const uint next = s + 1u < S ? uint(io_at(IO_QUERY_STARTS, s + 1u)) : T;
    if (next == uint(io_at(IO_QUERY_STARTS, s))) continue;
    // Positions 0 .. end - 1: up to the last of this sequence's tokens in the tile.
    const uint end = uint(io_at(IO_POSITIONS, min(t_last, next - 1u))) + 1u;
    const uint table = s * uint(io[IO_PAGES_PER_SEQ]);
    const bool mine = live && seq == s;
    for (uint j0 = 0u; j0 < end; j0 += KT) {
      const uint n = min(uint(KT), end - j0);
      barrier();  // the previous tile's rows are read
      for (uint e = tid; e < KT * HV; e += WG) {
        const uint p = e / HV, c = e % HV;
        // Past the tile's end: zeros (weighed 0, and 0 x garbage could be NaN).
        vec4 kr = vec4(0.0), vr = vec4(0.0);
        if (p < n) {
          const uint j = j0 + p;
          const uint page = uint(io_at(IO_BLOCK_TABLES, table + j / PAGE_SIZE));
          const uint row = (pc.kv_base + (page * PAGE_SIZE + j % PAGE_SIZE) * KV_W + kv_col) / 4u;
          kr = kv_vec4(row + c);
          vr = kv_vec4(row + pc.kv_half / 4u + c);
        }
        k_[e] = kr;
        v_[e] = vr;
      }
      barrier();
      float sc[KT];
      float tile_max = NEG_INF;
      for (uint p = 0u; p < KT; ++p) {
        float dot_part = 0.0;
        for (uint d = 0u; d < DV; ++d) dot_part += dot(q[d], k_[p * HV + lane + d * LPR]);
        for (uint x = 1u; x < LPR; x <<= 1u) dot_part += subgroupShuffleXor(dot_part, x);
        sc[p] = mine && p < n && j0 + p <= pos ? dot_part : NEG_INF;
        tile_max = max(tile_max, sc[p]);
      }
      if (tile_max != NEG_INF) {  // else nothing of this row here (the same for all its lanes)
        const float m_new = max(m, tile_max);
        const float correction = exp(m - m_new);  // 0 while m is -inf
        l *= correction;
        for (uint d = 0u; d < DV; ++d) acc[d] *= correction;
        for (uint p = 0u; p < KT; ++p) {
          const float w = exp(sc[p] - m_new);  // 0 for masked positions
          l += w;
          for (uint d = 0u; d < DV; ++d) acc[d] += w * v_[p * HV + lane + d * LPR];
        }
        m = m_new;
      }
    }
  }
  if (!live) return;
  const uint dst = pc.out0 + (t * NUM_HEADS + h) * HEAD_DIM;
  for (uint d = 0u; d < DV; ++d) {
    const vec4 o = acc[d] / l;
    const uint c = (lane + d * LPR) * 4u;
    arena[dst + c] = o.x;
    arena[dst + c + 1u] = o.y;
    arena[dst + c + 2u] = o.z;
    arena[dst + c + 3u] = o.w;
  }
}

// The back half of paged_attention (kiln.paged_attention), after kv_append:
// for token t at position p of sequence s and query head h,
//   out0[t, h] = sum_{j <= p} softmax_j(SCALE * q'[t, h] . K_s[j, g]) V_s[j, g],
// g = h / GROUP, q' = q rotated at p when HAS_ROPE.
// A workgroup takes the GROUP query heads of one KV head (each K and V row is
// read once for all of them) and one token; split-K (flash-decoding):
// pc.splits workgroups share that (KV head, token), each a contiguous chunk
// of the positions. The chunk goes TILE positions at a time in two phases:
// the tile's GROUP x TILE scores, then an online softmax over the tile by
// every thread for the VEC-wide slices of V it owns (a thread per (head,
// slice): a tile's V rows are read whole by neighbouring threads). Scores: a
// thread per (position, part of the row), PARTS = WG / TILE parts a row, each
// thread loading its part (PER_PART slices) at once and dotting it with every
// head's q; the parts add in shared memory. Each thread's loads are then one
// round trip to memory (with a thread per (position, head) walking a whole
// row, the 32 loads of a 128-dim row took ~8 us a layer on the H200:
// docs/perf/vulkan-h200.md, session 21). With one split the workgroup writes
// the output; with more it writes (max, sum, weighted V) to the partials
// (binding 0) and attention_combine merges them, or with FOLD the last of a
// (token, KV head)'s splits to finish merges them itself (a count per
// (token, KV head) in the buffer's first FOLD_COUNTS words, set back to 0 by
// the merging workgroup), which saves the combine's dispatch and barrier.
// Its merge loads every split's max and sum at once, then its weighted V
// FOLD_BATCH splits at a time (session 19's fold, a chain of one L2 round
// trip per split, lost to the combine: docs/perf/vulkan-h200.md). Splits
// past the positions (attention_chunk) return at once.
// Decode steps get many splits (few tokens, long contexts), prefill one.
// Constants: NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, SCALE, HAS_ROPE
// (+ ROPE_DIMS, ROPE_STYLE), USES_PARTIALS, VEC (4 where HEAD_DIM is a
// multiple of 4, else 1), KV_F16 (pages of halves; VEC 4), TILE, WG (a
// multiple of TILE), FOLD (+ MAX_SPLITS: at most that many splits, in steps
// of under MAX_SPLITS tokens).
// Push constants: in0 q, out0, kv_base, kv_half, splits.
// Launch shape: x = NUM_KV_HEADS, y = the bucket's tokens, z = splits.
#if HAS_ROPE
#include_rope
#endif
#define KV_W (NUM_KV_HEADS * HEAD_DIM)
#define GROUP (NUM_HEADS / NUM_KV_HEADS)
#define SLICES (HEAD_DIM / VEC)
#define OUTS (GROUP * SLICES)
#define PER_THREAD ((OUTS + WG - 1) / WG)
#define BATCH 8
#define PARTS (WG / TILE)
#define PER_PART ((SLICES + PARTS - 1) / PARTS)
#define K_BATCH (PER_PART < 16 ? PER_PART : 16)
#ifndef FOLD
#define FOLD 0
#endif
#if FOLD
#define FOLD_COUNTS uint(MAX_SPLITS * NUM_KV_HEADS)
#define FOLD_BATCH 16
shared float fold_m_[GROUP * MAX_SPLITS];
shared float fold_l_[GROUP * MAX_SPLITS];
shared uint last_;
#else
#define FOLD_COUNTS 0u
#endif

shared float q_[GROUP * HEAD_DIM];
shared float part_[PARTS * GROUP * TILE];
shared float score_[GROUP * TILE];
shared uint row_[TILE];  // element offset of each tile position's K row

#if VEC == 4 && KV_F16
#define VT vec4
// Pages of halves as 8-byte words of four (the planner asks for VEC 4 with
// KV_F16): kv_base, kv_half and every row start are multiples of 4.
layout(std430, set = 0, binding = 6) buffer KvPagesH { uvec2 kvh[]; };
VT kv_slice(uint at, uint i) {
  const uvec2 w = kvh[at / 4u + i];
  return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
}
VT q_slice(uint at) { return vec4(q_[at], q_[at + 1u], q_[at + 2u], q_[at + 3u]); }
#define VDOT(a, b) dot(a, b)
#elif VEC == 4
#define VT vec4
// The pages as 16-byte words: kv_base, kv_half and every row start are then
// multiples of 4 floats (HEAD_DIM is).
layout(std430, set = 0, binding = 6) buffer KvPages4 { vec4 kv4[]; };
VT kv_slice(uint at, uint i) { return kv4[at / 4u + i]; }
VT q_slice(uint at) { return vec4(q_[at], q_[at + 1u], q_[at + 2u], q_[at + 3u]); }
#define VDOT(a, b) dot(a, b)
#else
#define VT float
VT kv_slice(uint at, uint i) { return kv[at + i]; }
VT q_slice(uint at) { return q_[at]; }
#define VDOT(a, b) ((a) * (b))
#endif

// Output slice c of query head h for token t.
void write_out(uint t, uint h, uint c, VT v) {
  const uint dst = pc.out0 + (t * NUM_HEADS + h) * HEAD_DIM + c * VEC;
#if VEC == 4
  arena[dst] = v.x;
  arena[dst + 1u] = v.y;
  arena[dst + 2u] = v.z;
  arena[dst + 3u] = v.w;
#else
  arena[dst] = v;
#endif
}

#if FOLD
VT partial_slice(uint at) {
#if VEC == 4
  return vec4(partial_[at], partial_[at + 1u], partial_[at + 2u], partial_[at + 3u]);
#else
  return partial_[at];
#endif
}
#endif

void main() {
  const uint g = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  if (t >= step_tokens()) return;
  const uint tid = gl_LocalInvocationID.x;
  const uint pos = uint(io_at(IO_POSITIONS, t));
  const uint s = sequence_of(t);
  const uint table = s * uint(io[IO_PAGES_PER_SEQ]);
  const uint h0 = g * GROUP;
  // This split's positions: chunks of at least TILE; splits past them have
  // none (and no partials: the merge reads `used`).
  const uint split = gl_WorkGroupID.z;
  const uint chunk = attention_chunk(pos, pc.splits, uint(TILE));
  const uint used = min(pc.splits, (pos + chunk) / chunk);
  if (split >= used) return;  // the same for the whole workgroup
  for (uint i = tid; i < GROUP * HEAD_DIM; i += WG) {
    const uint q_head = pc.in0 + (t * NUM_HEADS + h0 + i / HEAD_DIM) * HEAD_DIM, c = i % HEAD_DIM;
#if HAS_ROPE
    q_[i] = c < ROPE_DIMS ? rope_element(q_head, c, pos) : arena[q_head + c];
#else
    q_[i] = arena[q_head + c];
#endif
  }

  const uint kv_col = g * HEAD_DIM;
  const uint first = split * chunk;
  const uint end = min(pos + 1u, first + chunk);

  // The outputs this thread owns: (head, slice) pairs o = tid + WG i.
  float m[PER_THREAD], l[PER_THREAD];
  VT acc[PER_THREAD];
  for (uint i = 0u; i < PER_THREAD; ++i) {
    m[i] = uintBitsToFloat(0xFF800000u);  // -inf
    l[i] = 0.0;
    acc[i] = VT(0.0);
  }
  for (uint j0 = first; j0 < end; j0 += TILE) {
    const uint n = min(uint(TILE), end - j0);
    barrier();  // q_ is written; the previous tile's scores and rows are read
    // Part r of position p's K row: slices r PER_PART .. (all of a
    // subgroup's threads take the same part, so their q reads are one
    // address).
    const uint part = tid / TILE, p = tid % TILE;
    if (p < n) {
      const uint j = j0 + p;
      const uint page = uint(io_at(IO_BLOCK_TABLES, table + j / PAGE_SIZE));
      const uint row = pc.kv_base + (page * PAGE_SIZE + j % PAGE_SIZE) * KV_W + kv_col;
      if (part == 0u) row_[p] = row;
      float d[GROUP];
      for (uint head = 0u; head < GROUP; ++head) d[head] = 0.0;
      const uint c_end = min(part * PER_PART + PER_PART, uint(SLICES));
      for (uint c0 = part * PER_PART; c0 < c_end; c0 += K_BATCH) {
        VT k[K_BATCH];
        for (uint b = 0u; b < K_BATCH; ++b) k[b] = kv_slice(row, min(c0 + b, c_end - 1u));
        for (uint b = 0u; b < K_BATCH; ++b) {
          if (c0 + b >= c_end) break;
          for (uint head = 0u; head < GROUP; ++head) d[head] += VDOT(q_slice(head * HEAD_DIM + (c0 + b) * VEC), k[b]);
        }
      }
      for (uint head = 0u; head < GROUP; ++head) part_[(part * GROUP + head) * TILE + p] = d[head];
    }
    barrier();
    for (uint i = tid; i < n * GROUP; i += WG) {
      const uint head = i / n, p = i % n;
      float d = 0.0;
      for (uint r = 0u; r < PARTS; ++r) d += part_[(r * GROUP + head) * TILE + p];
      score_[head * TILE + p] = d * SCALE;
    }
    barrier();
    for (uint i = 0u; i < PER_THREAD; ++i) {
      const uint o = tid + i * WG;
      if (o >= OUTS) break;
      const uint head = o / SLICES, c = o % SLICES;
      float tile_max = score_[head * TILE];
      for (uint p = 1u; p < n; ++p) tile_max = max(tile_max, score_[head * TILE + p]);
      const float m_new = max(m[i], tile_max);
      const float correction = exp(m[i] - m_new);
      // The tile's V rows BATCH at a time, loads first (positions past n
      // read row n - 1 and weigh it 0): a loop over n, loads waiting on
      // the previous sums, would wait on memory once per position.
      float sum = 0.0;
      VT a = VT(0.0);
      for (uint p0 = 0u; p0 < TILE; p0 += BATCH) {
        if (p0 >= n) break;
        VT v[BATCH];
        for (uint b = 0u; b < BATCH; ++b) v[b] = kv_slice(row_[min(p0 + b, n - 1u)] + pc.kv_half, c);
        for (uint b = 0u; b < BATCH; ++b) {
          const float w = p0 + b < n ? exp(score_[head * TILE + p0 + b] - m_new) : 0.0;
          sum += w;
          a += w * v[b];
        }
      }
      l[i] = l[i] * correction + sum;
      acc[i] = acc[i] * correction + a;
      m[i] = m_new;
    }
  }

  for (uint i = 0u; i < PER_THREAD; ++i) {
    const uint o = tid + i * WG;
    if (o >= OUTS) break;
    const uint head = o / SLICES, c = o % SLICES, h = h0 + head;
    if (pc.splits == 1u) {
      write_out(t, h, c, acc[i] / l[i]);
      continue;
    }
    // [token][head][split]: max, sum, then HEAD_DIM weighted V.
    const uint at = FOLD_COUNTS + ((t * NUM_HEADS + h) * pc.splits + split) * (HEAD_DIM + 2u);
    if (c == 0u) {
      partial_[at] = m[i];
      partial_[at + 1u] = l[i];
    }
#if VEC == 4
    partial_[at + 2u + 4u * c] = acc[i].x;
    partial_[at + 3u + 4u * c] = acc[i].y;
    partial_[at + 4u + 4u * c] = acc[i].z;
    partial_[at + 5u + 4u * c] = acc[i].w;
#else
    partial_[at + 2u + c] = acc[i];
#endif
  }
#if FOLD
  if (pc.splits == 1u) return;
  // Every thread's partials are written before the count says so; the
  // workgroup that brings the count to `used` merges (as attention_combine).
  memoryBarrierBuffer();
  barrier();
  if (tid == 0u) last_ = atomicAdd(fold_count_[t * NUM_KV_HEADS + g], 1u) == used - 1u ? 1u : 0u;
  barrier();
  if (last_ == 0u) return;
  memoryBarrierBuffer();
  // The group's heads' maxima and sums, every split's at once.
  const uint base = FOLD_COUNTS + (t * NUM_HEADS + h0) * pc.splits * (HEAD_DIM + 2u);
  for (uint i = tid; i < GROUP * used; i += WG) {
    const uint at = base + ((i / used) * pc.splits + i % used) * (HEAD_DIM + 2u);
    fold_m_[i] = partial_[at];
    fold_l_[i] = partial_[at + 1u];
  }
  barrier();
  for (uint i = 0u; i < PER_THREAD; ++i) {
    const uint o = tid + i * WG;
    if (o >= OUTS) break;
    const uint head = o / SLICES, c = o % SLICES;
    float mx = fold_m_[head * used];
    for (uint s = 1u; s < used; ++s) mx = max(mx, fold_m_[head * used + s]);
    // Every split has positions (s < used), so every weight is finite.
    const uint at0 = base + head * pc.splits * (HEAD_DIM + 2u) + 2u + c * VEC;
    float sum = 0.0;
    VT a = VT(0.0);
    for (uint s0 = 0u; s0 < used; s0 += FOLD_BATCH) {
      VT v[FOLD_BATCH];
      for (uint b = 0u; b < FOLD_BATCH; ++b) v[b] = partial_slice(at0 + min(s0 + b, used - 1u) * (HEAD_DIM + 2u));
      for (uint b = 0u; b < FOLD_BATCH; ++b) {
        if (s0 + b >= used) break;
        const float w = exp(fold_m_[head * used + s0 + b] - mx);
        sum += fold_l_[head * used + s0 + b] * w;
        a += w * v[b];
      }
    }
    write_out(t, h0 + head, c, a / sum);
  }
  if (tid == 0u) fold_count_[t * NUM_KV_HEADS + g] = 0u;  // for the next layer's dispatch
#endif
}

// matmul / fused_matmul (as matmul.comp defines them) for decode-sized
// buckets, one token per workgroup row. The workgroup stages its token's
// activations once in shared memory (RMS-normalised with the norm prologue):
// as f32 where K fits, else as f16, or as int8 codes for q4_K on integer dot
// products (DP4), XCHUNK elements at a time; each subgroup then takes R
// output rows at a time, round-robin over the dispatch's subgroups, and its
// lanes stride over K: q4_K on DP4 64 elements a lane step (two sub-blocks:
// 32 code bytes in two 16-byte loads, the block's 16-byte header in another,
// one scale and min decoding for both), q4_K otherwise 32 (16 code bytes and
// the header), other storages 4 elements through weights.glsl's WREAD4. A
// subgroup sum ends each row: no barrier between rows, only between staged
// chunks where K > XCHUNK.
//
// KS > 1 (launches with fewer rows than the GPU has subgroups, such as o and
// qkv): KS subgroups share each R rows, each taking every KS-th lane step
// along K, and their sums meet in shared memory, so that the rows' loads
// are spread over KS times the subgroups and each waits on fewer in a row.
//
// APPEND_KV (a q, k, v launch whose k and v feed the next launch's paged
// attention): the k and v rows also go into the layer's pages, k rotated at
// the token's position (interleaved pairs, which a subgroup's R rows hold
// whole), so that the step needs no kv_append dispatch (kv_append.comp's
// work, its constants too).
//
// Constants: K, NUM_W, N0..N2, EPILOGUE, HAS_NORM, EPS, WG, R, KS, DP4, XF16
// (1: staged as f16), XCHUNK (a multiple of 256, or K rounded up to 8 where
// K fits), Q4K_LANES, weight slots; with APPEND_KV: NUM_KV_HEADS, HEAD_DIM,
// PAGE_SIZE, KV_F16, HAS_ROPE (+ ROPE_DIMS, ROPE_STYLE 0).
// Push constants: in0 x, in1 residual, out0..out2 results; with APPEND_KV
// kv_base, kv_half.
// Launch shape: x = workgroups (any number: subgroups past the rows idle,
// too few take several rounds), y = the bucket's tokens.

#if EPILOGUE == 1
#define NACC 2
#else
#define NACC 1
#endif
#if EPILOGUE == 0
#define NCOLS (N0 + N1 + N2)
#else
#define NCOLS N0
#endif
#define NREDUCE 1
#include_reduce
#if defined(APPEND_KV)
#include_kv_pages
#if HAS_ROPE
#define ROPE_TABLE rope_
#include_rope
#endif
#endif
#if KS > 1
// Each subgroup's R x NACC sums (room for subgroups as narrow as 4 lanes).
shared float ks_sums_[(WG / 4) * R * NACC];
#endif

// The staged activations. For the q4_K lanes on f32 (no DP4; DP4 below) in
// the order the lanes read them: the eight 4-element words (f32; four
// 8-element words in f16) of lane chunk c lie 32 words apart, side by side
// with those of chunks c + 1..c + 31, so a subgroup's reads of one word
// touch every bank once (in K order, lanes whose chunks start 64 elements
// apart would share banks). Other storages in K order.
#if DP4
#define XSTAGED ((XCHUNK + 2047) / 2048 * 2048)
#elif Q4K_LANES
#define XSTAGED ((XCHUNK + 1023) / 1024 * 1024)
#else
#define XSTAGED XCHUNK
#endif
#if DP4
// Integer dot products (the q4_K lanes where the device has them): the
// activations as int8 codes, 32 to a scale (one q4_K sub-block), in the
// lanes' order: lane step p's two sub-blocks 2p and 2p + 1 (the low and
// high nibbles of code group p % 4 of block p / 4) as four 16-byte words 32
// words apart, side by side with those of steps p + 1..p + 31 (so that a
// subgroup's reads of one word touch every bank once); and per step, both
// sub-blocks' scales, f32 sums (for the blocks' minima) and offsets (below).
shared uvec4 xq_[XSTAGED / 16];
shared vec2 xd_[XSTAGED / 64];
shared vec2 xsum_[XSTAGED / 64];
shared vec2 xoff_[XSTAGED / 64];

// OpSUDotKHR, 4 x 8-bit packed: the sum of the products of a's signed bytes
// and b's unsigned bytes.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int sudot4(uint a, uint b, spirv_literal int packed_4x8_bit);
// Small integers as f32 by their bits, not by conversion instructions (a
// quarter of the float rate on NVIDIA): v < 2^23, |i| < 2^22.
float u2f(uint v) { return uintBitsToFloat(0x4B000000u | v) - 8388608.0; }
float i2f(int i) { return uintBitsToFloat(uint(0x4B400000 + i)) - 12582912.0; }
// The dot of 16 codes x with q's 16 bytes: nibbles in bits 0-3 (or 4-7, for
// 16 times their dot), the rest zero. The weights are nibbles - 8: centred,
// the codes' rounding errors meet factors of at most 8. So a lane takes
// dx dot(x, q) + off, where the staging's off = 8 (sum x - dx sum codes)
// holds the centring's -8 dx sum codes (exact in integers) and the 8 sum x
// it leaves (from the f32 sums): the sum of dx dot(x, q - 8) + 8 sum x,
// without re-centring every row's nibbles.
int dot16(uvec4 x, uvec4 q) {
  return sudot4(x.x, q.x, 0) + sudot4(x.y, q.y, 0) + sudot4(x.z, q.z, 0) + sudot4(x.w, q.w, 0);
}
#elif XF16
#define XPER 8u
shared uvec4 x_[XSTAGED / 8];  // eight f16 activations a word
#else
#define XPER 4u
shared vec4 x_[XSTAGED / 4];
#endif

#if !DP4
// Where staged element e (of the chunk) lies, counted in elements.
uint staged_at(uint e) {
#if Q4K_LANES
  // e is element j of the low (hi = 0) or high half of lane chunk c.
  const uint w = e % 256u, r = w % 64u, hi = r / 32u, j = r % 16u;
  const uint c = (e / 256u) * 8u + 2u * (w / 64u) + (r % 32u) / 16u;
  const uint word = hi * (16u / XPER) + j / XPER;
  return (((c / 32u) * (32u / XPER) + word) * 32u + c % 32u) * XPER + j % XPER;
#else
  return e;
#endif
}
#endif

#include_matmul

#if Q4K_LANES && !DP4
// The 32 staged activations of lane chunk c: xl (elements lo..lo+15) and xh
// (lo+32..lo+47).
void chunk_x(uint c, out vec4 xl[4], out vec4 xh[4]) {
  const uint at = (c / 32u) * (32u / XPER) * 32u + c % 32u;
#if XF16
  for (uint i = 0u; i < 2u; ++i) {
    const uvec4 l = x_[at + 32u * i], h = x_[at + 32u * (i + 2u)];
    xl[2u * i] = vec4(unpackHalf2x16(l.x), unpackHalf2x16(l.y));
    xl[2u * i + 1u] = vec4(unpackHalf2x16(l.z), unpackHalf2x16(l.w));
    xh[2u * i] = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
    xh[2u * i + 1u] = vec4(unpackHalf2x16(h.z), unpackHalf2x16(h.w));
  }
#else
  for (uint i = 0u; i < 4u; ++i) {
    xl[i] = x_[at + 32u * i];
    xh[i] = x_[at + 32u * (i + 4u)];
  }
#endif
}
#elif !Q4K_LANES
// Staged activations e..e+3 (e a multiple of 4) and e.
vec4 x4(uint e) {
#if XF16
  const uvec4 w = x_[e / 8u];
  return (e & 4u) != 0u ? vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w)) : vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
#else
  return x_[e / 4u];
#endif
}
float x1(uint e) {
#if XF16
  return unpackHalf2x16(x_[e / 8u][(e % 8u) / 2u])[e % 2u];
#else
  return x_[e / 4u][e % 4u];
#endif
}
#endif

#if Q4K_LANES
// 1 + q / 16 for the four nibbles of a code word at bits 0-3 of each byte
// (lo) or 4-7 (hi): each nibble moved into the top of 1.0f's mantissa, so
// a dot with it is sum x + sum q x / 16 in f32 without integer conversions.
vec4 nibbles_lo(uint w) {
  return uintBitsToFloat((uvec4(w << 19, w << 11, w << 3, w >> 5) & 0x00780000u) | 0x3F800000u);
}
vec4 nibbles_hi(uint w) {
  return uintBitsToFloat((uvec4(w << 15, w << 7, w >> 1, w >> 9) & 0x00780000u) | 0x3F800000u);
}

// Lane chunk gc of a q4_K row (16 code bytes: elements lo..lo+15 of
// sub-block s and lo+32..lo+47 of s + 1, lo = 256 (gc / 8) + 64 (gc % 8 / 2) +
// 16 (gc % 2)) lies at word at(row, gc) + 1 + gc % 8 of its weight, after its
// block's header at word at(row, gc).
uint q4k_at(uint row, uint gc) { return row * (K / 256u * 9u) + (gc / 8u) * 9u; }

// The dot of that chunk (header `head`, codes `codes`) with activations xl,
// xh (sums sum_lo, sum_hi).
float q4k_dot(uvec4 head, uvec4 codes, uint gc, vec4 xl[4], vec4 xh[4], float sum_lo, float sum_hi) {
  const vec2 dm = unpackHalf2x16(head.x);
  const uint q = gc % 8u, s = 2u * (q / 2u);
  float sc[2], mn[2];
  for (uint i = 0u; i < 2u; ++i) {
    const vec2 sm = q4k_scale_min(head.y, head.z, head.w, s + i);
    sc[i] = sm.x;
    mn[i] = sm.y;
  }
  const float lo = dot(nibbles_lo(codes.x), xl[0]) + dot(nibbles_lo(codes.y), xl[1]) +
                   dot(nibbles_lo(codes.z), xl[2]) + dot(nibbles_lo(codes.w), xl[3]);
  const float hi = dot(nibbles_hi(codes.x), xh[0]) + dot(nibbles_hi(codes.y), xh[1]) +
                   dot(nibbles_hi(codes.z), xh[2]) + dot(nibbles_hi(codes.w), xh[3]);
  return dm.x * sc[0] * 16.0 * (lo - sum_lo) - dm.y * mn[0] * sum_lo + dm.x * sc[1] * 16.0 * (hi - sum_hi) -
         dm.y * mn[1] * sum_hi;
}
#endif

#if DP4
// The arena as 16-byte words (the executor checks that the input's offset
// is a multiple of 4 floats; K is a multiple of 256).
layout(std430, set = 0, binding = 5) buffer Arena4 { vec4 arena4[]; };

// x' (normalised) of token t at k0..k0+len as int8 codes, 32 to a scale
// (one q4_K sub-block g): four neighbouring threads a group, eight elements
// each (two 16-byte loads, so a subgroup's loads are one contiguous run),
// the group's max |x|, sum and code sum through two shuffles each. The
// codes go to the low (g even) or high words of lane step g / 2. (A thread
// a group, 32 loads and the quantisation in a row, took ~8 us of every
// decode matmul on the H200: docs/perf/vulkan-h200.md, session 19.)
// stage()'s quantising body (stage() is below): elements 8e..8e+7 of the
// chunk, lo and hi (normalised), as the codes, scale and sums described
// above; a group's four threads call it together.
void stage_eight(uint e, vec4 lo, vec4 hi) {
  const uint g = e / 4u, j = e % 4u;
  const vec4 m = max(abs(lo), abs(hi));
  float amax = max(max(m.x, m.y), max(m.z, m.w));
  amax = max(amax, subgroupShuffleXor(amax, 1u));
  amax = max(amax, subgroupShuffleXor(amax, 2u));
  const float inv = amax > 0.0 ? 127.0 / amax : 0.0;
  const ivec4 ql = ivec4(round(lo * inv)), qh = ivec4(round(hi * inv));
  const uvec4 bl = uvec4(ql) & 0xFFu, bh = uvec4(qh) & 0xFFu;
  const uint w0 = bl.x | (bl.y << 8) | (bl.z << 16) | (bl.w << 24);
  const uint w1 = bh.x | (bh.y << 8) | (bh.z << 16) | (bh.w << 24);
  float sum = dot(lo + hi, vec4(1.0));
  sum += subgroupShuffleXor(sum, 1u);
  sum += subgroupShuffleXor(sum, 2u);
  int codes = ql.x + ql.y + ql.z + ql.w + qh.x + qh.y + qh.z + qh.w;
  codes += subgroupShuffleXor(codes, 1u);
  codes += subgroupShuffleXor(codes, 2u);
  const uint p = g / 2u, high = g % 2u;
  const uint word = (p / 32u) * 128u + (2u * high + j / 2u) * 32u + p % 32u, comp = 2u * (j % 2u);
  xq_[word][comp] = w0;
  xq_[word][comp + 1u] = w1;
  if (j == 0u) {
    xd_[p][high] = amax / 127.0;
    xsum_[p][high] = sum;
    xoff_[p][high] = 8.0 * (sum - amax / 127.0 * float(codes));
  }
}

void stage(uint t, uint k0, uint len, float scale) {
  // Counted by subgroup lane, so that a group's four threads are lanes
  // 4i..4i+3 of one subgroup (and leave the loop together).
  const uint first = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
  for (uint e = first; e < len / 8u; e += gl_NumSubgroups * gl_SubgroupSize) {
    const uint k = k0 + 8u * e;
    const uint at = (pc.in0 + t * K + k) / 4u;
    vec4 lo = arena4[at], hi = arena4[at + 1u];
#if HAS_NORM
    lo *= scale * vec4(vec_[k], vec_[k + 1u], vec_[k + 2u], vec_[k + 3u]);
    hi *= scale * vec4(vec_[k + 4u], vec_[k + 5u], vec_[k + 6u], vec_[k + 7u]);
#endif
    stage_eight(e, lo, hi);
  }
}

#if HAS_NORM && K <= XCHUNK && (K / 8 + WG - 1) / WG <= 4
// The norm launches' row in one pass where a few loads a thread cover it
// (K = 4096: two): x and gain are read once, for the sum of squares and the
// codes alike, where the RMS loop then stage() read x twice from memory,
// one barrier'd round trip after the other.
#define NORMED_PASSES ((K / 8 + WG - 1) / WG)
void stage_normed(uint t) {
  const uint first = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
  vec4 lo[NORMED_PASSES], hi[NORMED_PASSES];
  float ss[1];
  ss[0] = 0.0;
  for (uint i = 0u; i < NORMED_PASSES; ++i) {
    const uint e = first + i * WG, k = 8u * e;
    lo[i] = vec4(0.0);
    hi[i] = vec4(0.0);
    if (e < K / 8u) {
      const uint at = (pc.in0 + t * K + k) / 4u;
      lo[i] = arena4[at];
      hi[i] = arena4[at + 1u];
      ss[0] += dot(lo[i], lo[i]) + dot(hi[i], hi[i]);
      lo[i] *= vec4(vec_[k], vec_[k + 1u], vec_[k + 2u], vec_[k + 3u]);
      hi[i] *= vec4(vec_[k + 4u], vec_[k + 5u], vec_[k + 6u], vec_[k + 7u]);
    }
  }
  reduce_sum(ss);
  const float scale = inversesqrt(ss[0] / float(K) + EPS);
  for (uint i = 0u; i < NORMED_PASSES; ++i) {
    const uint e = first + i * WG;
    if (e < K / 8u) stage_eight(e, lo[i] * scale, hi[i] * scale);
  }
}
#endif
#else
// x' (normalised) of token t at k0..k0+len into x_, zeros past len.
void stage(uint t, uint k0, uint len, float scale) {
  const uint tid = gl_LocalInvocationID.x;
  for (uint i = tid; i < XCHUNK / 2u; i += WG) {
    vec2 v = vec2(0.0);
    for (uint j = 0u; j < 2u; ++j) {
      const uint e = 2u * i + j;
      if (e < len) {
        v[j] = arena[pc.in0 + t * K + k0 + e];
#if HAS_NORM
        v[j] *= scale * vec_[k0 + e];
#endif
      }
    }
    // Elements 2i and 2i + 1 stay neighbours in either order.
    const uint at = staged_at(2u * i);
#if XF16
    x_[at / 8u][(at % 8u) / 2u] = packHalf2x16(v);
#else
    x_[at / 4u][at % 4u] = v.x;
    x_[at / 4u][at % 4u + 1u] = v.y;
#endif
  }
}
#endif

void main() {
  const uint t = gl_WorkGroupID.y;
  if (t >= launch_rows()) return;  // the same for the whole workgroup
  const uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
  // The subgroup's row group and its slice of the lane steps (KS subgroups a
  // row group; fewer where the workgroup has fewer subgroups).
  const uint ks_n = min(uint(KS), gl_NumSubgroups), row_groups = gl_NumSubgroups / ks_n;
  const uint rg = gl_SubgroupID / ks_n, ks = gl_SubgroupID % ks_n;
  const uint groups = gl_NumWorkGroups.x * row_groups;
  const uint rounds = (NCOLS + groups * R - 1u) / (groups * R);
  if (gl_WorkGroupID.x * row_groups * R >= NCOLS) return;  // no rows in any round

  float scale = 1.0;
#ifdef NORMED_PASSES
  const bool one_chunk = true;
  stage_normed(t);
  barrier();
#else
#if HAS_NORM
  float ss[1];
  ss[0] = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < K; k += WG) {
    const float x = arena[pc.in0 + t * K + k];
    ss[0] += x * x;
  }
  reduce_sum(ss);
  scale = inversesqrt(ss[0] / float(K) + EPS);
#endif
  const bool one_chunk = K <= XCHUNK;
  if (one_chunk) {
    stage(t, 0u, K, scale);
    barrier();
  }
#endif

  for (uint round = 0u; round < rounds; ++round) {
    const uint n0 = ((round * gl_NumWorkGroups.x + gl_WorkGroupID.x) * row_groups + rg) * R;
    float acc[R * NACC];
    for (uint i = 0u; i < R * NACC; ++i) acc[i] = 0.0;
    for (uint k0 = 0u; k0 < K; k0 += XCHUNK) {
      const uint len = min(uint(XCHUNK), K - k0);
      if (!one_chunk) {
        barrier();  // the previous chunk's readers are done
        stage(t, k0, len, scale);
        barrier();
      }
      if (n0 >= NCOLS) continue;  // (no barrier until the chunk loop's next)
#if DP4
      // A lane step: every row's loads first, then their dots (rows past
      // NCOLS load row NCOLS - 1 and drop it; no breaks, so the words stay in
      // registers). Step p is code group p % 4 of block p / 4: sub-blocks
      // s = 2 (p % 4) (low nibbles) and s + 1 (high).
      for (uint p = lane + ks * lanes; p < len / 64u; p += lanes * ks_n) {
        const uint gp = k0 / 64u + p;
        uvec4 head_of[R][NACC], qa_of[R][NACC], qb_of[R][NACC];
        for (uint r = 0u; r < R; ++r) {
          const uint n = min(n0 + r, NCOLS - 1u), slot = slot_of(n), row = row_of(n, slot);
          const uint at = q4k_at(row, 2u * gp), codes_at = at + 1u + 2u * (gp % 4u);
          head_of[r][0] = wq(slot, at);
          qa_of[r][0] = wq(slot, codes_at);
          qb_of[r][0] = wq(slot, codes_at + 1u);
#if EPILOGUE == 1
          head_of[r][1] = w1q[at];
          qa_of[r][1] = w1q[codes_at];
          qb_of[r][1] = w1q[codes_at + 1u];
#endif
        }
        const uint xw = (p / 32u) * 128u + p % 32u;
        const uvec4 xl0 = xq_[xw], xl1 = xq_[xw + 32u], xh0 = xq_[xw + 64u], xh1 = xq_[xw + 96u];
        // dx_hi / 16: the high nibbles' dot is taken in place (16 times).
        const vec2 dx = xd_[p], sums = xsum_[p], offs = xoff_[p];
        const float dx_lo = dx.x, dx_hi = dx.y / 16.0;
        // Sub-blocks s and s + 1's 6-bit scales and mins as byte pairs
        // (q4k_scale_min's fields, both sub-blocks at once): bytes s, s + 1 of
        // the scale words, shifted by the same 8 (s % 4) for every row.
        const uint s = 2u * (gp % 4u), sh = 8u * (s % 4u);
        const bool low = s < 4u;
        for (uint r = 0u; r < R; ++r) {
          for (uint w = 0u; w < NACC; ++w) {
            const uvec4 head = head_of[r][w], qa = qa_of[r][w], qb = qb_of[r][w];
            const vec2 dm = unpackHalf2x16(head.x);
            const uint y = head.y >> sh, z = head.z >> sh, v = head.w >> sh;
            const uint scs = low ? y & 0x3F3Fu : (v & 0x0F0Fu) | ((y >> 2) & 0x3030u);
            const uint mns = low ? z & 0x3F3Fu : ((v >> 4) & 0x0F0Fu) | ((z >> 2) & 0x3030u);
            const int lo = dot16(xl0, qa & 0x0F0F0F0Fu) + dot16(xl1, qb & 0x0F0F0F0Fu);
            const int hi = dot16(xh0, qa & 0xF0F0F0F0u) + dot16(xh1, qb & 0xF0F0F0F0u);
            acc[r * NACC + w] += dm.x * (u2f(scs & 0xFFu) * (dx_lo * i2f(lo) + offs.x) + u2f(scs >> 8) * (dx_hi * i2f(hi) + offs.y)) -
                                 dm.y * (u2f(mns & 0xFFu) * sums.x + u2f(mns >> 8) * sums.y);
          }
        }
      }
#elif Q4K_LANES
      // A lane step: every row's loads first, then their dots (rows past
      // NCOLS load row NCOLS - 1 and drop it; no breaks, so the words stay in
      // registers).
      for (uint c = lane + ks * lanes; c < len / 32u; c += lanes * ks_n) {
        const uint gc = k0 / 32u + c;
        uvec4 head_of[R][NACC], codes_of[R][NACC];
        for (uint r = 0u; r < R; ++r) {
          const uint n = min(n0 + r, NCOLS - 1u), slot = slot_of(n), row = row_of(n, slot);
          const uint at = q4k_at(row, gc);
          head_of[r][0] = wq(slot, at);
          codes_of[r][0] = wq(slot, at + 1u + gc % 8u);
#if EPILOGUE == 1
          head_of[r][1] = w1q[at];
          codes_of[r][1] = w1q[at + 1u + gc % 8u];
#endif
        }
        vec4 xl[4], xh[4];
        chunk_x(c, xl, xh);
        const float sum_lo = dot(xl[0] + xl[1] + xl[2] + xl[3], vec4(1.0));
        const float sum_hi = dot(xh[0] + xh[1] + xh[2] + xh[3], vec4(1.0));
        for (uint r = 0u; r < R; ++r) {
          for (uint w = 0u; w < NACC; ++w) acc[r * NACC + w] += q4k_dot(head_of[r][w], codes_of[r][w], gc, xl, xh, sum_lo, sum_hi);
        }
      }
#else
      // Four k a lane step, then the K % 4 tail one at a time.
      for (uint e = 4u * (lane + ks * lanes); e + 4u <= len; e += 4u * lanes * ks_n) {
        const vec4 xs = x4(e);
        for (uint r = 0u; r < R; ++r) {
          const uint n = n0 + r;
          if (n >= NCOLS) break;
          const uint slot = slot_of(n), row = row_of(n, slot);
          acc[r * NACC] += dot(read_weight4(slot, row, k0 + e), xs);
#if EPILOGUE == 1
          acc[r * NACC + 1u] += dot(wread4_1(row, k0 + e), xs);
#endif
        }
      }
      for (uint e = (len / 4u) * 4u + lane; ks == 0u && e < len; e += lanes) {
        const float xs = x1(e);
        for (uint r = 0u; r < R; ++r) {
          const uint n = n0 + r;
          if (n >= NCOLS) break;
          const uint slot = slot_of(n), row = row_of(n, slot);
          acc[r * NACC] += read_weight(slot, row, k0 + e) * xs;
#if EPILOGUE == 1
          acc[r * NACC + 1u] += wread1(row, k0 + e) * xs;
#endif
        }
      }
#endif
    }
#if KS > 1
    // Every subgroup reaches these barriers (rounds is the workgroup's).
    for (uint i = 0u; i < R * NACC; ++i) acc[i] = subgroupAdd(acc[i]);
    if (subgroupElect()) {
      for (uint i = 0u; i < R * NACC; ++i) ks_sums_[gl_SubgroupID * R * NACC + i] = acc[i];
    }
    barrier();
    for (uint i = 0u; i < R * NACC; ++i) {
      float s = 0.0;
      for (uint j = 0u; j < ks_n; ++j) s += ks_sums_[(rg * ks_n + j) * R * NACC + i];
      acc[i] = s;
    }
    barrier();  // read before the next round's sums
    if (n0 >= NCOLS || ks != 0u) continue;
#else
    if (n0 >= NCOLS) continue;
    for (uint i = 0u; i < R * NACC; ++i) acc[i] = subgroupAdd(acc[i]);
#endif
    if (subgroupElect()) {
      for (uint r = 0u; r < R; ++r) {
        const uint n = n0 + r;
        if (n >= NCOLS) break;
        const uint slot = slot_of(n), row = row_of(n, slot);
        const float y = acc[r * NACC];
#if EPILOGUE == 0
        const uint width = slot == 0u ? N0 : (slot == 1u ? N1 : N2);
        const uint dst = slot == 0u ? pc.out0 : (slot == 1u ? pc.out1 : pc.out2);
        arena[dst + t * width + row] = y;
#elif EPILOGUE == 1
        arena[pc.out0 + t * N0 + row] = y / (1.0 + exp(-y)) * acc[r * NACC + 1u];
#else
        arena[pc.out0 + t * N0 + row] = y + arena[pc.in1 + t * N0 + row];
#endif
      }
#if defined(APPEND_KV)
      // N0, N1 and N2 are multiples of R: these R rows lie in one weight,
      // in (even, odd) pairs.
      const uint slot = slot_of(n0);
      if (slot != 0u) {
        const uint pos = uint(io_at(IO_POSITIONS, t)), at = k_row(t, pos) + (slot == 2u ? pc.kv_half : 0u);
        for (uint r = 0u; r < R; r += 2u) {
          const uint c = row_of(n0 + r, slot);
          float a = acc[r * NACC], b = acc[(r + 1u) * NACC];
#if HAS_ROPE
          const uint d = c % HEAD_DIM;
          if (slot == 1u && d < ROPE_DIMS) {
            const vec2 rotated = rope_pair(d / 2u, pos, a, b);
            a = rotated.x;
            b = rotated.y;
          }
#endif
          put_pair(at, c, a, b);
        }
      }
#endif
    }
  }
}

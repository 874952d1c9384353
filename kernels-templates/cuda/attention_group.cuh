// Attention of one token's query heads on tensor cores (buckets of
// AttentionGroupMinBucket tokens and more): a block takes the token, one
// KV head and one context slice, and the MMA's 16 rows are the query heads
// of that KV head's group (4 of them for Llama-3's 32 over 8; rows past the
// group are zeros). K and V come from the pool kGroupTile positions at a
// time into shared memory as halves, once for the whole group (an f16
// pool's as they are; attention_kernel converts every element for every
// query head, and with an f16 pool those conversions bound it), each warp scores 16
// positions of the tile (S = Q K^T, mma.sync m16n8k16 with f32 sums) and
// folds them into its online softmax (base 2, as attention_prefill_kernel)
// and its O += P V. The warps' states merge in shared memory; several
// slices merge through the partials as attention_kernel's do
// (MergeSlices). Steps without prefill tiles read this step's own rows from
// k/v and append them, as attention_kernel does.
#pragma once

#include "attention.cuh"
#include "attention_prefill.cuh"
#include "common.cuh"
#include "mma.cuh"

namespace kiln {

constexpr int kGroupTile = 64;  // positions staged a round: 4 warps of 16

// grid (bucket tokens, kv_heads, splits), 128 threads; kD a multiple of 16
// up to 128, a group (num_heads / kv_heads) of at most 16 heads.
template <int kD, class Kv>
__global__ void __launch_bounds__(128) attention_group_kernel(AttentionParams p) {
  static_assert(kD % 16 == 0 && kD <= 128, "head dims of 16..128 in steps of 16");
  constexpr int kT = kGroupTile, kStride = kD + 8;  // halves per smem row: conflict-free ldmatrix
  using Elem = typename Kv::Elem;
  const int t = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int group = p.num_heads / p.pool.kv_heads, h0 = kv_head * group;
  const int page_size = p.pool.page_size;
  const auto [token, pos, n, slice, begin, end, table, q0, first_pos] = TokenSliceOf(p, t, split);
  if (token && begin < n) PrefetchFirstRows<kD, Kv>(p, table, kv_head, begin, end, first_pos);
  WaitForPrevious();
  if (!token || begin >= n) return;  // empty slices are not counted by the merge either

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  // ks and vs hold a tile's K and V; before the first, ks holds Q; after the
  // last, both hold the warps' states (warp_o: 4 x 16 x kD floats fit in them).
  __shared__ __align__(16) unsigned short kvs[2][kT][kStride];
  unsigned short(*ks)[kStride] = kvs[0];
  unsigned short(*vs)[kStride] = kvs[1];
  __shared__ const Elem* rows[kT];
  __shared__ float warp_m[4][16], warp_l[4][16];

  // Q rows: the group's heads (rotated, times the scale and log2(e)), zeros past it.
  const float scale = p.scale * 1.4426950408889634f;
  for (int i = threadIdx.x; i < 16 * kD / 2; i += blockDim.x) {
    const int r = i / (kD / 2), d = 2 * (i % (kD / 2));
    float a = 0.0f, b = 0.0f;
    if (r < group) {
      const float* src = p.q + (static_cast<long long>(t) * p.num_heads + h0 + r) * kD;
      a = (p.use_rope ? RopeElement(p.rope, src, d, pos) : src[d]) * scale;
      b = (p.use_rope ? RopeElement(p.rope, src, d + 1, pos) : src[d + 1]) * scale;
    }
    *reinterpret_cast<unsigned*>(&ks[r][d]) = PackHalf2(a, b);
  }
  // This step's row of the token, for the steps after (the block whose slice holds pos).
  const float* ksrc = p.k + static_cast<long long>(t) * p.pool.kv_heads * kD + kv_head * kD;
  const float* vsrc = p.v + static_cast<long long>(t) * p.pool.kv_heads * kD + kv_head * kD;
  if (p.append && pos < end) {
    const int page = table[pos / page_size], slot = pos % page_size;
    Elem* krow = PoolRow<Kv>(p.pool, p.layer, 0, page, slot) + kv_head * kD;
    Elem* vrow = PoolRow<Kv>(p.pool, p.layer, 1, page, slot) + kv_head * kD;
    for (int d = threadIdx.x; d < kD; d += blockDim.x) {
      krow[d] = Kv::From(p.use_rope ? RopeElement(p.rope, ksrc, d, pos) : ksrc[d]);
      vrow[d] = Kv::From(vsrc[d]);
    }
  }
  __syncthreads();
  unsigned qa[kD / 16][4];
  const unsigned k_base = SharedAddress(&ks[0][0]), v_base = SharedAddress(&vs[0][0]);
#pragma unroll
  for (int c = 0; c < kD / 16; ++c) {
    LoadMatrixX4(k_base + ((lane % 16) * kStride + 16 * c + (lane / 16) * 8) * 2, qa[c]);
  }

  float o[kD / 8][4], m[2], l[2];
  StartRows<kD>(o, m, l);

  const long long v_offset =
      static_cast<long long>(PoolRow<Kv>(p.pool, p.layer, 1, 0, 0) - PoolRow<Kv>(p.pool, p.layer, 0, 0, 0));
  for (int j0 = begin; j0 < end; j0 += kT) {
    __syncthreads();  // every warp is done with the previous tile (and with Q's staging)
    if (threadIdx.x < kT) {
      // This step's positions (from first_pos) are not read from the pool: another block may be writing them.
      const int j = j0 + threadIdx.x;
      rows[threadIdx.x] = j < end && j < first_pos
                              ? PoolRow<Kv>(p.pool, p.layer, 0, table[j / page_size], j % page_size) + kv_head * kD
                              : nullptr;
    }
    __syncthreads();
    StageKvTile<kD, kT, kStride>(rows, v_offset, ks, vs);
    if (first_pos < min(j0 + kT, end)) {  // this step's rows, as the pool holds them
      __syncthreads();
      const int from = max(j0, first_pos), to = min(j0 + kT, end);
      for (int i = threadIdx.x; i < (to - from) * kD; i += blockDim.x) {
        const int j = from + i / kD, d = i % kD;
        const long long tj = q0 + (j - first_pos);
        const float* kj = p.k + tj * p.pool.kv_heads * kD + kv_head * kD;
        const float* vj = p.v + tj * p.pool.kv_heads * kD + kv_head * kD;
        ks[j - j0][d] = KvF16::From(p.use_rope ? RopeElement(p.rope, kj, d, j) : kj[d]);
        vs[j - j0][d] = KvF16::From(vj[d]);
      }
    }
    __syncthreads();
    const int w0 = j0 + 16 * warp;  // this warp's 16 positions
    if (w0 >= end) continue;        // (uniform per warp; the barriers above are the block's)

    // S: the 16 rows x 16 positions, as two C fragments.
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int c = 0; c < kD / 16; ++c) {
      unsigned kb[4];  // positions w0 .. w0 + 15 at dims 16 c ..
      LoadMatrixX4(k_base + ((16 * warp + lane % 8 + (lane / 16) * 8) * kStride + 16 * c + ((lane / 8) % 2) * 8) * 2,
                   kb);
      MmaF16(sc[0], qa[c], kb);
      MmaF16(sc[1], qa[c], kb + 2);
    }
    // Positions past the slice, then the online softmax of rows g and g + 8.
#pragma unroll
    for (int jt = 0; jt < 2; ++jt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (w0 + 8 * jt + 2 * q + (r % 2) >= end) sc[jt][r] = -__int_as_float(0x7f800000);
      }
    }
    float correction[2];
    unsigned pa[1][4];
    OnlineSoftmaxTiles<2>(sc, m, l, correction, pa);
    // O = O correction + P V: V rows [position][dim] through ldmatrix.trans.
#pragma unroll
    for (int dj = 0; dj < kD / 8; dj += 2) {
      unsigned vb[4];  // dims 8 dj .. 8 dj + 15 at positions w0 ..
      LoadMatrixX4Trans(v_base + ((16 * warp + lane % 16) * kStride + 8 * dj + (lane / 16) * 8) * 2, vb);
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        o[dj + x][0] *= correction[0];
        o[dj + x][1] *= correction[0];
        o[dj + x][2] *= correction[1];
        o[dj + x][3] *= correction[1];
      }
      MmaF16(o[dj], pa[0], vb);
      MmaF16(o[dj + 1], pa[0], vb + 2);
    }
  }
  LetNextLaunch();  // the block's K/V loads are done

  // The warps' states: row r's maximum (base 2), sum and unnormalised output.
  __syncthreads();  // the last tile is read: ks and vs become warp_o
  float(*warp_o)[16][kD] = reinterpret_cast<float(*)[16][kD]>(&kvs[0][0][0]);
  static_assert(sizeof(float) * 4 * 16 * kD <= sizeof(kvs), "warp_o fits in ks and vs");
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = g + 8 * i;
    if (q == 0) {
      warp_m[warp][r] = m[i];
      warp_l[warp][r] = l[i];
    }
#pragma unroll
    for (int dj = 0; dj < kD / 8; ++dj) {
      *reinterpret_cast<float2*>(&warp_o[warp][r][8 * dj + 2 * q]) = {o[dj][2 * i], o[dj][2 * i + 1]};
    }
  }
  __syncthreads();
  for (int r = 0; r < group; ++r) {
    float m_all = -__int_as_float(0x7f800000);
    for (int w = 0; w < 4; ++w) m_all = fmaxf(m_all, warp_m[w][r]);
    float l_all = 0.0f, scale_w[4];
    for (int w = 0; w < 4; ++w) {
      // A warp that saw no position has m = -inf and l = 0: weight 0.
      scale_w[w] = warp_l[w][r] > 0.0f ? exp2f(warp_m[w][r] - m_all) : 0.0f;
      l_all += warp_l[w][r] * scale_w[w];
    }
    const long long th = static_cast<long long>(t) * p.num_heads + h0 + r;
    float* out = p.splits == 1 ? p.y + th * kD : p.partials + (th * p.splits + split) * (kD + 2) + 2;
    for (int d = threadIdx.x; d < kD; d += blockDim.x) {
      float acc = 0.0f;
      for (int w = 0; w < 4; ++w) acc += warp_o[w][r][d] * scale_w[w];
      out[d] = p.splits == 1 ? acc / l_all : acc;
    }
    if (p.splits > 1 && threadIdx.x == 0) {
      out[-2] = m_all * 0.6931471805599453f;  // MergeSlices takes natural-log maxima
      out[-1] = l_all;
    }
  }
  if (p.splits == 1) return;
  // The last slice of the (token, KV head) to get here merges each head's slices.
  const int used = (n + slice - 1) / slice;
  if (!LastBlockToCount(p.split_done + static_cast<long long>(t) * p.num_heads + h0, used)) return;
  for (int r = 0; r < group; ++r) MergeSlices<kD>(p, static_cast<long long>(t) * p.num_heads + h0 + r, h0 + r, used);
}

}  // namespace kiln

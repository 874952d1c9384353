// Causal attention for tiles of kPrefillTileTokens consecutive tokens of one
// sequence (prefill), flash-attention style on tensor cores: a block of 4
// warps takes one tile and one query head, each warp 16 of its tokens. K and
// V come from the page pool kPrefillTileTokens positions at a time, in f16
// in shared memory (an f32 pool's rounded once for the whole tile, where
// attention_kernel reads them again for every token); scores S = Q K^T and the output
// O += P V are mma.sync m16n8k16 with f32 sums, P kept in registers (the
// score fragment of two 8-position tiles is the A fragment of one 16-position
// step), and the softmax is online per row. Tiles whose tokens span more than
// one sequence are left to attention_kernel, which skips the tokens of the
// tiles done here (PrefillTileDone, the same test in both kernels).
#pragma once

#include "attention.cuh"
#include "common.cuh"
#include "mma.cuh"

namespace kiln {

// Four pool elements from p as packed halves (an f32 pool's rounded).
__device__ __forceinline__ uint2 FourHalves(const float* p) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  return {PackHalf2(v.x, v.y), PackHalf2(v.z, v.w)};
}
__device__ __forceinline__ uint2 FourHalves(const unsigned short* p) { return *reinterpret_cast<const uint2*>(p); }

// The K and V rows of kT positions (rows[i]: position i's K row, its V
// row v_offset elements on; null: zeros) as halves in ks and vs, by 128
// threads. Coalesced: consecutive threads take consecutive 4-element chunks
// of a row (a warp reads 512 contiguous bytes per load when kD = 128 in
// f32; one lane per row's own 256-byte run took 80 us a layer at 512
// tokens, this 60), up to kBatch loads of K and of V in flight per thread.
template <int kD, int kT, int kStride, class Elem>
__device__ __forceinline__ void StageKvTile(const Elem* const* rows, long long v_offset, unsigned short (*ks)[kStride],
                                            unsigned short (*vs)[kStride]) {
  constexpr int kChunks = kD / 4, kPer = kT * kChunks / 128, kBatch = kPer < 8 ? kPer : 8;
#pragma unroll
  for (int b0 = 0; b0 < kPer; b0 += kBatch) {
    uint2 kv[kBatch], vv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = threadIdx.x + 128 * (b0 + b);
      const Elem* krow = b0 + b < kPer ? rows[i / kChunks] : nullptr;
      kv[b] = vv[b] = {0u, 0u};
      if (krow != nullptr) {
        kv[b] = FourHalves(krow + 4 * (i % kChunks));
        vv[b] = FourHalves(krow + v_offset + 4 * (i % kChunks));
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (b0 + b >= kPer) break;
      const int i = threadIdx.x + 128 * (b0 + b), r = i / kChunks, d = 4 * (i % kChunks);
      *reinterpret_cast<uint2*>(&ks[r][d]) = kv[b];
      *reinterpret_cast<uint2*>(&vs[r][d]) = vv[b];
    }
  }
}

// A warp's two rows (g, g + 8) of an online softmax before any position:
// the output fragments zero, the maxima -inf, the sums zero.
template <int kD>
__device__ __forceinline__ void StartRows(float (&o)[kD / 8][4], float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int j = 0; j < kD / 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) o[j][r] = 0.0f;
  m[0] = m[1] = -__int_as_float(0x7f800000);
  l[0] = l[1] = 0.0f;
}

// One step of a base-2 online softmax over kTiles score C fragments of
// 8 positions (rows g: r 0, 1; g + 8: r 2, 3; masked scores -inf): the
// rows' maxima m and sums l move on, `correction` is what the output's
// rows are scaled by, and the weights come out as kTiles / 2 A fragments of
// 16 positions (the score fragment of two 8-position tiles is the A
// fragment of one 16-position step).
template <int kTiles>
__device__ __forceinline__ void OnlineSoftmaxTiles(float (&sc)[kTiles][4], float (&m)[2], float (&l)[2],
                                                   float (&correction)[2], unsigned (&pa)[kTiles / 2][4]) {
  float m_new[2] = {m[0], m[1]}, sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int jt = 0; jt < kTiles; ++jt)
#pragma unroll
    for (int r = 0; r < 4; ++r) m_new[r / 2] = fmaxf(m_new[r / 2], sc[jt][r]);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    m_new[i] = fmaxf(m_new[i], __shfl_xor_sync(0xffffffffu, m_new[i], 1));
    m_new[i] = fmaxf(m_new[i], __shfl_xor_sync(0xffffffffu, m_new[i], 2));
    // A row with nothing visible yet (or an unused row) keeps m = -inf: no correction, weights 0.
    correction[i] = m_new[i] == -__int_as_float(0x7f800000) ? 1.0f : exp2f(m[i] - m_new[i]);
  }
#pragma unroll
  for (int jt = 0; jt < kTiles; ++jt) {
    float e[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      e[r] = sc[jt][r] == -__int_as_float(0x7f800000) ? 0.0f : exp2f(sc[jt][r] - m_new[r / 2]);
      sum[r / 2] += e[r];
    }
    pa[jt / 2][(jt % 2) * 2] = PackHalf2(e[0], e[1]);
    pa[jt / 2][(jt % 2) * 2 + 1] = PackHalf2(e[2], e[3]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
    sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
    l[i] = l[i] * correction[i] + sum[i];
    m[i] = m_new[i];
  }
}

// grid (ceil(bucket / kPrefillTileTokens), num_heads), 128 threads; kD a
// multiple of 16, at most 128.
template <int kD, class Kv>
__global__ void __launch_bounds__(128) attention_prefill_kernel(AttentionParams p) {
  WaitForPrevious();
  static_assert(kD % 16 == 0 && kD <= 128, "head dims of 16..128 in steps of 16");
  constexpr int kT = kPrefillTileTokens, kStride = kD + 8;  // halves per smem row: conflict-free ldmatrix
  const StepCounts counts = *p.counts;
  const int tile = blockIdx.x, h = blockIdx.y;
  if (!PrefillTileDone(p, counts, tile)) return;
  const int t0 = kT * tile, tokens = counts.tokens;
  const int s = SequenceOf(p.query_starts, counts.seqs, t0);
  const int* table = p.block_tables + static_cast<long long>(s) * p.pages_stride;
  const int kv_head = h / (p.num_heads / p.pool.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  __shared__ __align__(16) unsigned short ks[kT][kStride];
  __shared__ __align__(16) unsigned short vs[kT][kStride];

  // Q (rotated, times the scale and log2(e): the softmax below takes powers
  // of 2, the same weights for fewer instructions than expf) in f16, staged
  // in ks, then each warp's 16 rows as A fragments in registers.
  const float scale = p.scale * 1.4426950408889634f;
  for (int i = threadIdx.x; i < kT * kD / 2; i += blockDim.x) {
    const int r = i / (kD / 2), d = 2 * (i % (kD / 2)), t = t0 + r;
    float a = 0.0f, b = 0.0f;
    if (t < tokens) {
      const float* src = p.q + (static_cast<long long>(t) * p.num_heads + h) * kD;
      const int pos = p.positions[t];
      a = (p.use_rope ? RopeElement(p.rope, src, d, pos) : src[d]) * scale;
      b = (p.use_rope ? RopeElement(p.rope, src, d + 1, pos) : src[d + 1]) * scale;
    }
    *reinterpret_cast<unsigned*>(&ks[r][d]) = PackHalf2(a, b);
  }
  __syncthreads();
  unsigned qa[kD / 16][4];
  const unsigned k_base = SharedAddress(&ks[0][0]), v_base = SharedAddress(&vs[0][0]);
#pragma unroll
  for (int c = 0; c < kD / 16; ++c) {
    LoadMatrixX4(k_base + ((16 * warp + lane % 16) * kStride + 16 * c + (lane / 16) * 8) * 2, qa[c]);
  }
  // This thread's two rows (g, g + 8 of the warp's 16): their positions.
  int row_pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int t = t0 + 16 * warp + g + 8 * i;
    row_pos[i] = t < tokens ? p.positions[t] : -1;
  }
  const int last = min(t0 + kT, tokens) - 1;
  const int n = p.positions[last] + 1;  // positions the tile's last token attends to

  float o[kD / 8][4], m[2], l[2];
  StartRows<kD>(o, m, l);

  // K and V rows of the tile's positions (null past n), double-buffered so
  // a tile's pointers are written while no thread reads that buffer.
  using Elem = typename Kv::Elem;
  __shared__ const Elem* rows[2][kT];
  const long long v_offset =
      static_cast<long long>(PoolRow<Kv>(p.pool, p.layer, 1, 0, 0) - PoolRow<Kv>(p.pool, p.layer, 0, 0, 0));
  for (int j0 = 0; j0 < n; j0 += kT) {
    const int buf = (j0 / kT) % 2;
    if (threadIdx.x < kT) {
      const int j = j0 + threadIdx.x;
      rows[buf][threadIdx.x] =
          j < n ? PoolRow<Kv>(p.pool, p.layer, 0, table[j / p.pool.page_size], j % p.pool.page_size) + kv_head * kD
                : nullptr;
    }
    __syncthreads();  // every warp is done with the previous K and V (and Q's staging); the pointers are ready
    StageKvTile<kD, kT, kStride>(rows[buf], v_offset, ks, vs);
    __syncthreads();

    // S: 16 rows x kT positions, as kT / 8 C fragments.
    float sc[kT / 8][4];
#pragma unroll
    for (int jt = 0; jt < kT / 8; ++jt)
#pragma unroll
      for (int r = 0; r < 4; ++r) sc[jt][r] = 0.0f;
#pragma unroll
    for (int jt = 0; jt < kT / 8; jt += 2) {
#pragma unroll
      for (int c = 0; c < kD / 16; ++c) {
        unsigned kb[4];  // positions 8 jt .. 8 jt + 15 at dims 16 c ..
        LoadMatrixX4(k_base + ((8 * jt + lane % 8 + (lane / 16) * 8) * kStride + 16 * c + ((lane / 8) % 2) * 8) * 2, kb);
        MmaF16(sc[jt], qa[c], kb);
        MmaF16(sc[jt + 1], qa[c], kb + 2);
      }
    }
    // Causal mask, then the online softmax of rows g and g + 8.
#pragma unroll
    for (int jt = 0; jt < kT / 8; ++jt) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if (j0 + 8 * jt + 2 * q + (r % 2) > row_pos[r / 2]) sc[jt][r] = -__int_as_float(0x7f800000);
      }
    }
    float correction[2];
    unsigned pa[kT / 16][4];
    OnlineSoftmaxTiles<kT / 8>(sc, m, l, correction, pa);
#pragma unroll
    for (int dj = 0; dj < kD / 8; ++dj) {
      o[dj][0] *= correction[0];
      o[dj][1] *= correction[0];
      o[dj][2] *= correction[1];
      o[dj][3] *= correction[1];
    }
    // O += P V: per 16 positions, V rows [position][dim] through ldmatrix.trans.
#pragma unroll
    for (int c = 0; c < kT / 16; ++c) {
#pragma unroll
      for (int dj = 0; dj < kD / 8; dj += 2) {
        unsigned vb[4];  // dims 8 dj .. 8 dj + 15 at positions 16 c ..
        LoadMatrixX4Trans(v_base + ((16 * c + lane % 16) * kStride + 8 * dj + (lane / 16) * 8) * 2, vb);
        MmaF16(o[dj], pa[c], vb);
        MmaF16(o[dj + 1], pa[c], vb + 2);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int t = t0 + 16 * warp + g + 8 * i;
    if (t >= tokens) continue;
    float* y = p.y + (static_cast<long long>(t) * p.num_heads + h) * kD;
    const float inv = 1.0f / l[i];
#pragma unroll
    for (int dj = 0; dj < kD / 8; ++dj) {
      *reinterpret_cast<float2*>(y + 8 * dj + 2 * q) = {o[dj][2 * i] * inv, o[dj][2 * i + 1] * inv};
    }
  }
}

}  // namespace kiln

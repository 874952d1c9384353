// Paged attention over the f32 KV page pool, in two kernels: kv_append
// writes this step's k (rotated when the launch carries rope constants) and
// v rows into their pages; attention then runs causal grouped-query
// attention for every (token, query head). A block of kAttnWarps warps
// serves one (token, head): the warps split the context in 32-position tiles
// (split-K inside the block), each keeping an online-softmax state (running
// max, sum and output), and the block merges the states at the end. Lanes
// own positions while scoring and head dimensions while accumulating V.
#pragma once

#include "common.cuh"

namespace kiln {

constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ const float* PoolRow(const PagePoolView& pool, int layer, int v_half, int page, int slot) {
  const long long row = static_cast<long long>(pool.kv_heads) * pool.head_dim;
  const long long half = pool.num_pages * pool.page_size * row;
  return pool.data + (2LL * layer + v_half) * half + (static_cast<long long>(page) * pool.page_size + slot) * row;
}

// One block per token.
__global__ void __launch_bounds__(128) kv_append_kernel(AttentionParams p) {
  const int t = blockIdx.x;
  const StepCounts counts = *p.counts;
  if (t >= counts.tokens) return;
  const int s = SequenceOf(p.query_starts, counts.seqs, t);
  const int pos = p.positions[t];
  const int page = p.block_tables[static_cast<long long>(s) * p.pages_stride + pos / p.pool.page_size];
  const int slot = pos % p.pool.page_size;
  const int hd = p.pool.head_dim, width = p.pool.kv_heads * hd;
  float* krow = const_cast<float*>(PoolRow(p.pool, p.layer, 0, page, slot));
  float* vrow = const_cast<float*>(PoolRow(p.pool, p.layer, 1, page, slot));
  const float* k = p.k + static_cast<long long>(t) * width;
  const float* v = p.v + static_cast<long long>(t) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    krow[i] = p.use_rope ? RopeElement(p.rope, k + (i / hd) * hd, i % hd, pos) : k[i];
    vrow[i] = v[i];
  }
}

// grid (tokens of the bucket, num_heads), kAttnWarps warps.
__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(AttentionParams p) {
  const int t = blockIdx.x, h = blockIdx.y;
  const StepCounts counts = *p.counts;
  if (t >= counts.tokens) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = p.pool.head_dim;
  const int kv_head = h / (p.num_heads / p.pool.kv_heads);
  const int s = SequenceOf(p.query_starts, counts.seqs, t);
  const int pos = p.positions[t];
  const int n = pos + 1;
  const int* table = p.block_tables + static_cast<long long>(s) * p.pages_stride;

  __shared__ float q[kMaxHeadDim];
  __shared__ float warp_m[kAttnWarps], warp_l[kAttnWarps];
  __shared__ float warp_o[kAttnWarps][kMaxHeadDim];
  const float* qsrc = p.q + (static_cast<long long>(t) * p.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) q[d] = p.use_rope ? RopeElement(p.rope, qsrc, d, pos) : qsrc[d];
  __syncthreads();

  constexpr int kDimsPerLane = kMaxHeadDim / 32;
  float o[kDimsPerLane];
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) o[i] = 0.0f;
  float m = -__int_as_float(0x7f800000), l = 0.0f;
  const int tiles = (n + 31) / 32;
  for (int tile = warp; tile < tiles; tile += kAttnWarps) {
    const int j = tile * 32 + lane;
    float score = -__int_as_float(0x7f800000);
    const float* vrow = nullptr;
    if (j < n) {
      const int page = table[j / p.pool.page_size], slot = j % p.pool.page_size;
      const float* krow = PoolRow(p.pool, p.layer, 0, page, slot) + kv_head * hd;
      vrow = PoolRow(p.pool, p.layer, 1, page, slot) + kv_head * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot = fmaf(q[d], krow[d], dot);
      score = dot * p.scale;
    }
    const float m_new = fmaxf(m, WarpMax(score));
    const float e = j < n ? expf(score - m_new) : 0.0f;
    const float correction = expf(m - m_new);
    l = l * correction + WarpSum(e);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) o[i] *= correction;
    m = m_new;
    const int valid = min(32, n - tile * 32);
    for (int jj = 0; jj < valid; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, e, jj);
      const float* vj = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(vrow), jj));
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) o[i] = fmaf(pj, vj[d], o[i]);
      }
    }
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) warp_o[warp][d] = o[i];
  }
  __syncthreads();
  float m_all = -__int_as_float(0x7f800000);
  for (int w = 0; w < kAttnWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  float scale_w[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    // A warp that saw no position has m = -inf and l = 0: weight 0.
    scale_w[w] = warp_l[w] > 0.0f ? expf(warp_m[w] - m_all) : 0.0f;
    l_all += warp_l[w] * scale_w[w];
  }
  float* y = p.y + (static_cast<long long>(t) * p.num_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) acc += warp_o[w][d] * scale_w[w];
    y[d] = acc / l_all;
  }
}

}  // namespace kiln

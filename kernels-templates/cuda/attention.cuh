// Paged attention over the f32 KV page pool. kv_append writes this step's k
// (rotated when the launch carries rope constants) and v rows into their
// pages; attention_kernel<kD> then runs causal grouped-query attention for
// every (token, query head, context slice). A block of kAttnWarps warps
// serves one slice; the warps take 32-position tiles of it in turn, each
// lane scoring one position (a head_dim-long dot of 16-byte loads, all in
// flight) and then, for each position of the tile, accumulating its share of
// the V row (4 dims per lane, coalesced). Warps keep online-softmax states
// that the block merges. With one slice the block writes the output; with
// several (decode: few tokens, long contexts) each writes a partial state
// and attention_combine_kernel<kD> merges them.
#pragma once

#include "common.cuh"

namespace kiln {

constexpr int kAttnWarps = 4;
// The smallest context slice a block takes (a tile per warp).
constexpr int kMinSlice = 32 * kAttnWarps;

__device__ __forceinline__ const float* PoolRow(const PagePoolView& pool, int layer, int v_half, int page, int slot) {
  const long long row = static_cast<long long>(pool.kv_heads) * pool.head_dim;
  const long long half = pool.num_pages * pool.page_size * row;
  return pool.data + (2LL * layer + v_half) * half + (static_cast<long long>(page) * pool.page_size + slot) * row;
}

// Positions per slice for a context of n: at least kMinSlice, 32-aligned.
__device__ __forceinline__ int SliceOf(int n, int splits) {
  const int even = (n + splits - 1) / splits;
  return max(kMinSlice, (even + 31) / 32 * 32);
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

// q · k over kD dims: 16-byte loads where kD allows.
template <int kD>
__device__ __forceinline__ float HeadDot(const float* q, const float* k) {
  float dot = 0.0f;
  if constexpr (kD % 4 == 0) {
#pragma unroll
    for (int d = 0; d < kD; d += 4) {
      const float4 kv = *reinterpret_cast<const float4*>(k + d);
      const float4 qv = *reinterpret_cast<const float4*>(q + d);
      dot = fmaf(qv.x, kv.x, dot);
      dot = fmaf(qv.y, kv.y, dot);
      dot = fmaf(qv.z, kv.z, dot);
      dot = fmaf(qv.w, kv.w, dot);
    }
  } else {
#pragma unroll
    for (int d = 0; d < kD; ++d) dot = fmaf(q[d], k[d], dot);
  }
  return dot;
}

// Dims of the V row a lane accumulates: 4 * lane + 128 * i.
template <int kD>
struct LaneDims {
  static constexpr int kGroups = (kD + 127) / 128;
};

// grid (bucket tokens, num_heads, splits), kAttnWarps warps.
template <int kD>
__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(AttentionParams p) {
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const StepCounts counts = *p.counts;
  if (t >= counts.tokens) return;
  const int pos = p.positions[t];
  const int n = pos + 1;
  const int slice = SliceOf(n, p.splits);
  const int begin = split * slice;
  if (begin >= n) return;  // the combine kernel skips empty slices too
  const int end = min(n, begin + slice);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = h / (p.num_heads / p.pool.kv_heads);
  const int s = SequenceOf(p.query_starts, counts.seqs, t);
  const int* table = p.block_tables + static_cast<long long>(s) * p.pages_stride;
  const int page_size = p.pool.page_size;

  __shared__ __align__(16) float q[kD];
  __shared__ float warp_m[kAttnWarps], warp_l[kAttnWarps];
  __shared__ __align__(16) float warp_o[kAttnWarps][kD];
  const float* qsrc = p.q + (static_cast<long long>(t) * p.num_heads + h) * kD;
  for (int d = threadIdx.x; d < kD; d += blockDim.x) {
    q[d] = (p.use_rope ? RopeElement(p.rope, qsrc, d, pos) : qsrc[d]) * p.scale;
  }
  __syncthreads();

  constexpr int kGroups = LaneDims<kD>::kGroups;
  float4 o[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) o[g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float m = -__int_as_float(0x7f800000), l = 0.0f;
  for (int j0 = begin + warp * 32; j0 < end; j0 += 32 * kAttnWarps) {
    const int j = j0 + lane;
    float score = -__int_as_float(0x7f800000);
    const float* vrow = nullptr;
    if (j < end) {
      const int page = table[j / page_size], slot = j % page_size;
      score = HeadDot<kD>(q, PoolRow(p.pool, p.layer, 0, page, slot) + kv_head * kD);
      vrow = PoolRow(p.pool, p.layer, 1, page, slot) + kv_head * kD;
    }
    const float m_new = fmaxf(m, WarpMax(score));
    const float e = j < end ? expf(score - m_new) : 0.0f;
    const float correction = expf(m - m_new);
    l = l * correction + WarpSum(e);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      o[g].x *= correction;
      o[g].y *= correction;
      o[g].z *= correction;
      o[g].w *= correction;
    }
    m = m_new;
    const int valid = min(32, end - j0);
    for (int jj = 0; jj < valid; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, e, jj);
      const float* vj = reinterpret_cast<const float*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(vrow), jj));
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int d = 4 * lane + 128 * g;
        if (d < kD) {
          if constexpr (kD % 4 == 0) {
            const float4 v = *reinterpret_cast<const float4*>(vj + d);
            o[g].x = fmaf(pj, v.x, o[g].x);
            o[g].y = fmaf(pj, v.y, o[g].y);
            o[g].z = fmaf(pj, v.z, o[g].z);
            o[g].w = fmaf(pj, v.w, o[g].w);
          } else {
            float* og = &o[g].x;
            for (int i = 0; i < 4 && d + i < kD; ++i) og[i] = fmaf(pj, vj[d + i], og[i]);
          }
        }
      }
    }
  }
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const float* og = &o[g].x;
    for (int i = 0; i < 4; ++i) {
      const int d = 4 * lane + 128 * g + i;
      if (d < kD) warp_o[warp][d] = og[i];
    }
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
  if (p.splits == 1) {
    float* y = p.y + (static_cast<long long>(t) * p.num_heads + h) * kD;
    for (int d = threadIdx.x; d < kD; d += blockDim.x) {
      float acc = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) acc += warp_o[w][d] * scale_w[w];
      y[d] = acc / l_all;
    }
    return;
  }
  float* part = p.partials + ((static_cast<long long>(t) * p.num_heads + h) * p.splits + split) * (kD + 2);
  if (threadIdx.x == 0) {
    part[0] = m_all;
    part[1] = l_all;
  }
  for (int d = threadIdx.x; d < kD; d += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) acc += warp_o[w][d] * scale_w[w];
    part[2 + d] = acc;
  }
}

// grid (bucket tokens, num_heads): merges the slices' partial states.
template <int kD>
__global__ void __launch_bounds__(128) attention_combine_kernel(AttentionParams p) {
  const int t = blockIdx.x, h = blockIdx.y;
  const StepCounts counts = *p.counts;
  if (t >= counts.tokens) return;
  const int n = p.positions[t] + 1;
  const int used = (n + SliceOf(n, p.splits) - 1) / SliceOf(n, p.splits);
  const float* part = p.partials + (static_cast<long long>(t) * p.num_heads + h) * p.splits * (kD + 2);
  float m_all = -__int_as_float(0x7f800000);
  for (int sp = 0; sp < used; ++sp) m_all = fmaxf(m_all, part[sp * (kD + 2)]);
  float l_all = 0.0f;
  for (int sp = 0; sp < used; ++sp) l_all += part[sp * (kD + 2) + 1] * expf(part[sp * (kD + 2)] - m_all);
  float* y = p.y + (static_cast<long long>(t) * p.num_heads + h) * kD;
  for (int d = threadIdx.x; d < kD; d += blockDim.x) {
    float acc = 0.0f;
    for (int sp = 0; sp < used; ++sp) acc += part[sp * (kD + 2) + 2 + d] * expf(part[sp * (kD + 2)] - m_all);
    y[d] = acc / l_all;
  }
}

}  // namespace kiln

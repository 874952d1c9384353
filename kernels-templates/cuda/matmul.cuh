// Weight-times-activation: y[t, n] = epilogue(sum_k norm(x)[t, k] W[n, k])
// for every storage, on CUDA cores with f32 activations. kTile 1 is the
// decode GEMV; larger tiles serve small buckets (verification, batched
// decode), the weights read once per tile of tokens. Each block stages its
// tokens' activations in shared memory once, RMS-normalised when the launch
// has the norm prologue (1/rms over the whole row first), a chunk of K at a
// time; its warps then walk kRows weight rows each, a storage lane step
// (matmul_lanes.cuh) per iteration, with the loads of all rows issued before
// their arithmetic and two steps unrolled so several are in flight.
#pragma once

#include "common.cuh"
#include "matmul_lanes.cuh"

namespace kiln {

// a[i] without indexing the parameter arrays dynamically (which would copy
// the parameters to local memory).
template <class T>
__device__ __forceinline__ T Pick(const T (&a)[kMaxFusedWeights], int i) {
  return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
}

// Output row n of a launch (epilogue none: the rows of all its weights, in
// order): the weight it belongs to and its row there.
template <int kEpilogue>
__device__ __forceinline__ void WeightRowOf(const MatmulParams& p, int n, int* weight, int* row) {
  int wi = 0;
  if constexpr (kEpilogue == kEpilogueNone) {
    if (p.num_weights > 1 && n >= p.n[0]) {
      n -= p.n[0];
      wi = 1;
      if (p.num_weights > 2 && n >= p.n[1]) {
        n -= p.n[1];
        wi = 2;
      }
    }
  }
  *weight = wi;
  *row = n;
}

// Four activation floats at x[i..i+3] of a row of `len` (zeros past it),
// normalised when gamma is given.
__device__ __forceinline__ void LoadActivations4(const float* x, const float* gamma, float inv_rms, int i, int len,
                                                 float (&v)[4]) {
  if (i + 4 <= len && (reinterpret_cast<unsigned long long>(x + i) & 15) == 0) {
    const float4 a = *reinterpret_cast<const float4*>(x + i);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = i + j < len ? x[i + j] : 0.0f;
  }
  if (gamma != nullptr) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (i + j < len) v[j] = __fmul_rn(__fmul_rn(v[j], inv_rms), gamma[i + j]);
    }
  }
}

// The whole lane steps of one staged chunk [c0, c0 + len) for this warp's
// rows; returns where they end (the rest is the caller's element tail).
template <class Lane, int kRows, int kParts, int kTile>
__device__ __forceinline__ int WalkChunk(const unsigned char* const (&weight_rows)[kRows][kParts], int c0, int len,
                                         int lane, const float* xs, int xstride, const float* sums, int sstride,
                                         float (&acc)[kRows][kParts][kTile]) {
  const int full = len / Lane::kLane * Lane::kLane;
  // Two steps in flight for decode; a tile's sums need the registers.
#pragma unroll(kTile == 1 ? 2 : 1)
  for (int e = lane * Lane::kLane; e < full; e += 32 * Lane::kLane) {
    typename Lane::Raw raw[kRows][kParts];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int w = 0; w < kParts; ++w) raw[r][w] = Lane::Load(weight_rows[r][w], c0 + e);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int w = 0; w < kParts; ++w) Lane::template Dot<kTile>(raw[r][w], e, xs, xstride, sums, sstride, acc[r][w]);
  }
  return full;
}

template <class S, int kEpilogue, bool kNorm, int kTile>
__global__ void __launch_bounds__(32 * kMatmulWarps, kTile == 1 ? 2 : 1) matmul_kernel(MatmulParams p) {
  using Lane = typename LaneOf<S>::type;
  constexpr int kRows = kTile == 1 ? Lane::kRows : kMatmulTiledRowsPerWarp;
  constexpr int kParts = kEpilogue == kEpilogueSiluMul ? 2 : 1;
  constexpr int kThreads = 32 * kMatmulWarps;
  extern __shared__ float4 staged4[];
  float* xs = reinterpret_cast<float*>(staged4);
  __shared__ float inv_rms[kTile];
  __shared__ double partial[kMatmulWarps][kTile];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rows = *p.rows;
  const int t0 = blockIdx.y * kTile;
  if (t0 >= rows) return;
  const int tiles = min(kTile, rows - t0);

  // This warp's rows: per row its weight (q, k or v of a fused launch), its
  // row there, and its weight rows (gate and up for silu_mul).
  const int first = (blockIdx.x * kMatmulWarps + warp) * kRows;
  const bool active = first < p.total_n;
  int out_weight[kRows], out_row[kRows];
  const unsigned char* weight_rows[kRows][kParts];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    WeightRowOf<kEpilogue>(p, min(first + r, p.total_n - 1), &out_weight[r], &out_row[r]);
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      weight_rows[r][w] = Pick(p.w, out_weight[r] + w) + static_cast<long long>(out_row[r]) * p.row_bytes;
    }
  }
  float acc[kRows][kParts][kTile];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int t = 0; t < kTile; ++t) acc[r][w][t] = 0.0f;

  if constexpr (kNorm) {
    double sq[kTile];
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      sq[t] = 0.0;
      if (t < tiles) {
        const float* xr = p.x + static_cast<long long>(t0 + t) * p.k;
        for (int i = tid; i < p.k; i += kThreads) sq[t] += static_cast<double>(xr[i]) * xr[i];
      }
      sq[t] = WarpSumDouble(sq[t]);
      if (lane == 0) partial[warp][t] = sq[t];
    }
    __syncthreads();
    if (tid < kTile) {
      double sum = 0.0;
#pragma unroll
      for (int w = 0; w < kMatmulWarps; ++w) sum += partial[w][tid];
      inv_rms[tid] = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(p.k) + p.eps));
    }
  }

  const int xstride = MatmulPaddedLen(p.chunk), sstride = MatmulSumsLen(p.chunk);
  float* sums = xs + kTile * xstride;
  for (int c0 = 0; c0 < p.k; c0 += p.chunk) {
    const int len = min(p.chunk, p.k - c0);
    __syncthreads();  // the previous chunk's readers are done; 1/rms is ready
    // Stage: each thread four consecutive elements per token; groups of
    // four threads add up one 16-element sum.
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t >= tiles) break;
      const float* xr = p.x + static_cast<long long>(t0 + t) * p.k + c0;
      const float* g = kNorm ? p.gamma + c0 : nullptr;
      for (int base = 0; base < len; base += 4 * kThreads) {
        const int i = base + 4 * tid;
        float v[4];
        LoadActivations4(xr, g, kNorm ? inv_rms[t] : 1.0f, i, len, v);
        float* dst = xs + t * xstride;
        if (i + 4 <= len) {
          *reinterpret_cast<float4*>(dst + StagedIndex<Lane::kQ4KOrder>(i)) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            if (i + j < len) dst[StagedIndex<Lane::kQ4KOrder>(i + j)] = v[j];
          }
        }
        float s = (v[0] + v[1]) + (v[2] + v[3]);
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if ((tid & 3) == 0 && i < len) sums[t * sstride + i / 16] = s;
      }
    }
    __syncthreads();
    if (!active) continue;
    const int full = Lane::Fits(p.k) ? WalkChunk<Lane, kRows, kParts, kTile>(weight_rows, c0, len, lane, xs, xstride, sums, sstride, acc)
                                     : WalkChunk<LaneDecode8<S, Lane::kQ4KOrder>, kRows, kParts, kTile>(
                                           weight_rows, c0, len, lane, xs, xstride, sums, sstride, acc);
    // Elements past the last whole lane step (rows of plain types of odd
    // length, a single trailing q8_0 block).
    for (int e = full + lane; e < len; e += 32) {
      const int at = StagedIndex<Lane::kQ4KOrder>(e);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int w = 0; w < kParts; ++w) {
          const float wv = DecodeElement<S>(weight_rows[r][w], c0 + e);
#pragma unroll
          for (int t = 0; t < kTile; ++t) acc[r][w][t] = fmaf(wv, xs[t * xstride + at], acc[r][w][t]);
        }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int t = 0; t < kTile; ++t) acc[r][w][t] = WarpSum(acc[r][w][t]);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (first + r >= p.total_n) continue;
    const int width = Pick(p.n, out_weight[r]);
    float* y = Pick(p.y, out_weight[r]);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t >= tiles) break;
      const long long at = static_cast<long long>(t0 + t) * width + out_row[r];
      float v = acc[r][0][t];
      if constexpr (kEpilogue == kEpilogueSiluMul) v = Silu(acc[r][0][t]) * acc[r][kParts - 1][t];
      if constexpr (kEpilogue == kEpilogueResidualAdd) v = v + p.residual[at];
      y[at] = v;
    }
  }
}

}  // namespace kiln

// Weight-times-activation: y[t, n] = epilogue(sum_k norm(x)[t, k] W[n, k])
// for every storage. One warp per output feature, eight per block; lanes
// walk the row 8 elements (one Decode8) at a time, so each weight byte is
// read once per token tile and decoded once; the tile's kTile tokens reuse
// the decoded values. The optional RMS-norm prologue computes each token's
// 1/rms in the block first. kTile 1 is the decode GEMV; larger tiles serve
// prefill buckets.
#pragma once

#include "common.cuh"
#include "storage.cuh"

namespace kiln {

// a[i] without indexing the parameter arrays dynamically (which would copy
// the parameters to local memory).
template <class T>
__device__ __forceinline__ T Pick(const T (&a)[kMaxFusedWeights], int i) {
  return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
}

template <class S, int kEpilogue, bool kNorm, int kTile>
__global__ void __launch_bounds__(256) matmul_kernel(MatmulParams p) {
  constexpr int kWarps = 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = *p.rows;
  const int t0 = blockIdx.y * kTile;
  if (t0 >= rows) return;
  const int tiles = min(kTile, rows - t0);
  __shared__ float inv_rms[kTile];
  if constexpr (kNorm) {
    for (int t = warp; t < tiles; t += kWarps) {
      const float* xr = p.x + static_cast<long long>(t0 + t) * p.k;
      double sum = 0;
      for (int i = lane; i < p.k; i += 32) sum += static_cast<double>(xr[i]) * xr[i];
      sum = WarpSumDouble(sum);
      if (lane == 0) inv_rms[t] = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(p.k) + p.eps));
    }
    __syncthreads();
  }
  int n = blockIdx.x * kWarps + warp;
  if (n >= p.total_n) return;
  constexpr int kParts = kEpilogue == kEpilogueSiluMul ? 2 : 1;
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
  const unsigned char* weight_rows[kParts];
#pragma unroll
  for (int w = 0; w < kParts; ++w) weight_rows[w] = Pick(p.w, wi + w) + static_cast<long long>(n) * p.row_bytes;
  float acc[kParts][kTile];
#pragma unroll
  for (int w = 0; w < kParts; ++w)
#pragma unroll
    for (int t = 0; t < kTile; ++t) acc[w][t] = 0.0f;

  const int chunks = p.k / 8;
  for (int c = lane; c < chunks; c += 32) {
    const int e = c * 8;
    float xv[kTile][8];
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t < tiles) {
        LoadFloat8(p.x + static_cast<long long>(t0 + t) * p.k + e, xv[t]);
        if constexpr (kNorm) {
          float g[8];
          LoadFloat8(p.gamma + e, g);
#pragma unroll
          for (int i = 0; i < 8; ++i) xv[t][i] = __fmul_rn(__fmul_rn(xv[t][i], inv_rms[t]), g[i]);
        }
      }
    }
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      const unsigned char* row = weight_rows[w];
      float wv[8];
      S::Decode8(row + (e / S::kBlockElems) * S::kBlockBytes, e % S::kBlockElems, wv);
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        if (t < tiles) {
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[w][t] = fmaf(wv[i], xv[t][i], acc[w][t]);
        }
      }
    }
  }
  // Tail of a plain-typed row whose length is not a multiple of 8.
  for (int e = chunks * 8 + lane; e < p.k; e += 32) {
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      const float wv = DecodeElement<S>(weight_rows[w], e);
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        if (t < tiles) {
          float x = p.x[static_cast<long long>(t0 + t) * p.k + e];
          if constexpr (kNorm) x = __fmul_rn(__fmul_rn(x, inv_rms[t]), p.gamma[e]);
          acc[w][t] = fmaf(wv, x, acc[w][t]);
        }
      }
    }
  }
#pragma unroll
  for (int w = 0; w < kParts; ++w)
#pragma unroll
    for (int t = 0; t < kTile; ++t) acc[w][t] = WarpSum(acc[w][t]);
  if (lane != 0) return;
  const int width = Pick(p.n, wi);
  float* y = Pick(p.y, wi);
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    if (t >= tiles) break;
    const long long at = static_cast<long long>(t0 + t) * width + n;
    float v = acc[0][t];
    if constexpr (kEpilogue == kEpilogueSiluMul) v = Silu(acc[0][t]) * acc[kParts - 1][t];
    if constexpr (kEpilogue == kEpilogueResidualAdd) v = v + p.residual[at];
    y[at] = v;
  }
}

}  // namespace kiln

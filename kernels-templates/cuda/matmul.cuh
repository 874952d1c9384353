// Weight-times-activation: y[t, n] = epilogue(sum_k norm(x)[t, k] W[n, k])
// for every storage, on CUDA cores with f32 operands. Lanes walk the weight
// rows kLane elements (one decoder call) at a time, so each weight byte is
// read once per token tile and decoded once. kTile 1 is the decode GEMV:
// for quantised storages each warp computes kDecodeRowsPerWarp outputs, so
// the activation chunk a lane loads (and normalises) serves several rows,
// and a storage's wide decoder (32 elements, 16-byte loads) is used. kTile > 1 serves small
// prefill buckets: one output per warp, the decoded chunk serving kTile
// tokens. The optional RMS-norm prologue computes each token's 1/rms in the
// block first.
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
__global__ void __launch_bounds__(32 * (kTile == 1 ? kDecodeWarps : kTiledWarps)) matmul_kernel(MatmulParams p) {
  constexpr int kWarps = kTile == 1 ? kDecodeWarps : kTiledWarps;
  constexpr int kRows = kTile == 1 && !S::kPlain ? kDecodeRowsPerWarp : 1;
  constexpr int kParts = kEpilogue == kEpilogueSiluMul ? 2 : 1;
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
  const int first = (blockIdx.x * kWarps + warp) * kRows;
  if (first >= p.total_n) return;
  // Per row of this warp: its weight (q, k or v of a fused launch), its row
  // there, and its weight rows (gate and up for silu_mul).
  int out_weight[kRows], out_row[kRows];
  bool valid[kRows];
  const unsigned char* weight_rows[kRows][kParts];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    int n = min(first + r, p.total_n - 1), wi = 0;
    valid[r] = first + r < p.total_n;
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
    out_weight[r] = wi;
    out_row[r] = n;
#pragma unroll
    for (int w = 0; w < kParts; ++w) weight_rows[r][w] = Pick(p.w, wi + w) + static_cast<long long>(n) * p.row_bytes;
  }
  float acc[kRows][kParts][kTile];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int t = 0; t < kTile; ++t) acc[r][w][t] = 0.0f;

  // Elements per lane step: a storage's wide decoder for decode, 8 when a
  // tile of tokens needs registers for its activations.
  constexpr int kLane = kTile == 1 ? S::kLaneElems : 8;
  const int chunks = p.k / kLane;
  // Two 8-element steps in flight per lane; a wide step is enough on its own.
#pragma unroll(kLane == 8 ? 2 : 1)
  for (int c = lane; c < chunks; c += 32) {
    const int e = c * kLane;
    float xv[kTile][kLane];
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t < tiles) {
#pragma unroll
        for (int i = 0; i < kLane; i += 8) LoadFloat8(p.x + static_cast<long long>(t0 + t) * p.k + e + i, xv[t] + i);
        if constexpr (kNorm) {
#pragma unroll
          for (int i0 = 0; i0 < kLane; i0 += 8) {
            float g[8];
            LoadFloat8(p.gamma + e + i0, g);
#pragma unroll
            for (int i = 0; i < 8; ++i) xv[t][i0 + i] = __fmul_rn(__fmul_rn(xv[t][i0 + i], inv_rms[t]), g[i]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int w = 0; w < kParts; ++w) {
        float wv[kLane];
        DecodeLane<S, kLane>(weight_rows[r][w] + (e / S::kBlockElems) * S::kBlockBytes, e % S::kBlockElems, wv);
#pragma unroll
        for (int t = 0; t < kTile; ++t) {
          if (t < tiles) {
#pragma unroll
            for (int i = 0; i < kLane; ++i) acc[r][w][t] = fmaf(wv[i], xv[t][i], acc[r][w][t]);
          }
        }
      }
    }
  }
  // Tail of a plain-typed row whose length is not a multiple of kLane.
  for (int e = chunks * kLane + lane; e < p.k; e += 32) {
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      if (t < tiles) {
        float x = p.x[static_cast<long long>(t0 + t) * p.k + e];
        if constexpr (kNorm) x = __fmul_rn(__fmul_rn(x, inv_rms[t]), p.gamma[e]);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int w = 0; w < kParts; ++w) acc[r][w][t] = fmaf(DecodeElement<S>(weight_rows[r][w], e), x, acc[r][w][t]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int t = 0; t < kTile; ++t) acc[r][w][t] = WarpSum(acc[r][w][t]);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (!valid[r]) continue;
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

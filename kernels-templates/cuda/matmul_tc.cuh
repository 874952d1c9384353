// Tensor-core matmul that decodes the weights inside, for buckets of 64 tokens
// and more whose K matmul_f16_tc_kernel does not take (not a multiple of 32):
// mma.sync m16n8k16 with f16 operands and f32 accumulation. A block computes a
// 128-token x 64-output tile: per 32-wide K step its 256 threads load the
// activations (normalised by the RMS-norm prologue when there is one) and
// decode the weight rows of any storage (Decode8) into f16 shared-memory tiles,
// then each of the 8 warps (4 x 2) issues 16 mma for its 32 x 32 sub-tile. The
// next step's global loads and decoding are issued before the current step's
// mma, so memory latency overlaps the math. Same epilogues and parameters as
// matmul_kernel; rows beyond *p.rows or the weights are padded with zeros.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "mma.cuh"
#include "storage.cuh"

namespace kiln {

constexpr int kTcM = 128, kTcN = 64, kTcK = 32;
constexpr int kTcStride = kTcK + 8;  // halves per smem row: conflict-free fragment loads

// Whether both pointers are 16-byte aligned (null counts as aligned).
__device__ __forceinline__ bool BothAligned16(const float* a, const float* b) {
  return ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15) == 0;
}

// 1 / rms of the row x[0..k) over the whole block (in double, as the CPU
// backend), or 1 without the norm prologue.
template <bool kNorm>
__device__ __forceinline__ float BlockInvRms(const float* x, int k, float eps) {
  if constexpr (kNorm) {
    __shared__ double partial[32];
    double sum = 0;
    if (k % 4 == 0 && BothAligned16(x, nullptr)) {
      // 16-byte loads, four in flight a thread.
      const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
      for (int i = threadIdx.x; i < k / 4; i += blockDim.x) {
        const float4 v = x4[i];
        sum += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
               static_cast<double>(v.w) * v.w;
      }
    } else {
      for (int i = threadIdx.x; i < k; i += blockDim.x) sum += static_cast<double>(x[i]) * x[i];
    }
    sum = WarpSumDouble(sum);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
    __syncthreads();
    double total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w];
    return static_cast<float>(1.0 / sqrt(total / static_cast<double>(k) + eps));
  } else {
    return 1.0f;
  }
}

// gridDim.y blocks a row, each ~k / gridDim.y elements (the host launches
// ActivationsChunks(k) of kActivationsChunk, or one a row for the norm of
// large buckets): x (times 1/rms and the gain when kNorm; each block takes
// the row's 1/rms itself) rounded to f16; with
// kSplit also the rest, x - hi, as f16 (x = hi + lo to ~22 bits) and the sums
// of x per 32 elements (matmul_tile_tc_kernel; K a multiple of 32). One
// block per row left a small bucket's launch at 8 blocks and ~30 us for
// K = 14336, as long as the matmul it feeds.
template <bool kNorm, bool kSplit>
__global__ void __launch_bounds__(256) activations_f16_kernel(ActivationsF16Params p) {
  WaitForPrevious();
  // gridDim.y blocks share a row, a multiple of 32 elements each.
  const int chunk = ((p.k + gridDim.y - 1) / gridDim.y + 31) / 32 * 32;
  const int t = blockIdx.x, c0 = blockIdx.y * chunk;
  if (t >= *p.rows || c0 >= p.k) return;
  const int end = min(p.k, c0 + chunk);
  const float* x = p.x + static_cast<long long>(t) * p.k;
  const float scale = BlockInvRms<kNorm>(x, p.k, p.eps);
  unsigned short* y = p.y + static_cast<long long>(t) * p.k;
  if constexpr (!kSplit) {
    if (BothAligned16(x, p.gamma) && p.k % 4 == 0 && (reinterpret_cast<unsigned long long>(y) & 7) == 0) {
      // Four elements a thread: 16-byte loads, 8-byte stores (with scalar
      // ones the 512-token steps' conversions took ~17 us a launch).
      const float4* x4 = reinterpret_cast<const float4*>(x);
      const float4* g4 = reinterpret_cast<const float4*>(p.gamma);
      for (int i = c0 / 4 + threadIdx.x; i < end / 4; i += blockDim.x) {
        float4 v = x4[i];
        if constexpr (kNorm) {
          const float4 g = g4[i];
          v = make_float4(__fmul_rn(__fmul_rn(v.x, scale), g.x), __fmul_rn(__fmul_rn(v.y, scale), g.y),
                          __fmul_rn(__fmul_rn(v.z, scale), g.z), __fmul_rn(__fmul_rn(v.w, scale), g.w));
        }
        unsigned short h[4];
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h[0]) : "f"(v.x));
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h[1]) : "f"(v.y));
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h[2]) : "f"(v.z));
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h[3]) : "f"(v.w));
        reinterpret_cast<uint2*>(y)[i] = make_uint2(h[0] | (static_cast<unsigned>(h[1]) << 16), h[2] | (static_cast<unsigned>(h[3]) << 16));
      }
      return;
    }
    for (int i = c0 + threadIdx.x; i < end; i += blockDim.x) {
      const float v = kNorm ? __fmul_rn(__fmul_rn(x[i], scale), p.gamma[i]) : x[i];
      unsigned short h;
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
      y[i] = h;
    }
  } else {
    unsigned short* lo = p.y_lo + static_cast<long long>(t) * p.k;
    float* sums = p.sums + static_cast<long long>(t) * (p.k / 32);
    // A warp per 32-element group: lane i takes element i.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int g = c0 / 32 + warp; g < end / 32; g += blockDim.x / 32) {
      const int i = 32 * g + lane;
      const float v = kNorm ? __fmul_rn(__fmul_rn(x[i], scale), p.gamma[i]) : x[i];
      unsigned short h, l;
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(l) : "f"(v - HalfToFloat(h)));
      y[i] = h;
      lo[i] = l;
      const float s = WarpSum(v);
      if (lane == 0) sums[g] = s;
    }
  }
}

template <class S, int kEpilogue>
__global__ void __launch_bounds__(256) matmul_tc_kernel(MatmulParams p) {
  WaitForPrevious();
  constexpr int kParts = EpilogueParts(kEpilogue);
  const int rows = *p.rows;
  const int t0 = blockIdx.y * kTcM;
  if (t0 >= rows) return;
  const int n0 = blockIdx.x * kTcN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  __shared__ __align__(16) unsigned short xs[kTcM][kTcStride];
  __shared__ __align__(16) unsigned short ws[kParts][kTcN][kTcStride];
  // The weight row each loading thread decodes (tile row tid / 4), per part;
  // the two activation rows it loads (tid / 4 and 64 + tid / 4).
  const int load_row = tid / 4, load_col = (tid % 4) * 8;
  const unsigned char* wrow[kParts];
  {
    int wi, n;
    WeightRowOf<kEpilogue>(p, n0 + load_row, &wi, &n);
    const bool valid = n0 + load_row < p.total_n;
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      wrow[w] = valid ? WeightRow(p, wi + w, n) : nullptr;
    }
  }
  const unsigned short* xrow[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int token = t0 + 64 * h + load_row;
    xrow[h] = token < rows ? p.x_f16 + static_cast<long long>(token) * p.k : nullptr;
  }

  // Global -> registers (f16 pairs) for the K step at k0.
  uint4 x_stage[2], w_stage[kParts];
  auto load_step = [&](int k0) {
    const int e = k0 + load_col;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (xrow[h] != nullptr && e + 8 <= p.k && (p.k & 7) == 0) {
        x_stage[h] = *reinterpret_cast<const uint4*>(xrow[h] + e);
      } else {
        unsigned short v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = xrow[h] != nullptr && e + i < p.k ? xrow[h][e + i] : 0;
        x_stage[h] = {v[0] | (static_cast<unsigned>(v[1]) << 16), v[2] | (static_cast<unsigned>(v[3]) << 16),
                      v[4] | (static_cast<unsigned>(v[5]) << 16), v[6] | (static_cast<unsigned>(v[7]) << 16)};
      }
    }
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      float v[8];
      if (wrow[w] != nullptr && e + 8 <= p.k) {
        S::Decode8(wrow[w] + (e / S::kBlockElems) * S::kBlockBytes, e % S::kBlockElems, v);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = wrow[w] != nullptr && e + i < p.k ? DecodeElement<S>(wrow[w], e + i) : 0.0f;
      }
      w_stage[w] = {PackHalf2(v[0], v[1]), PackHalf2(v[2], v[3]), PackHalf2(v[4], v[5]), PackHalf2(v[6], v[7])};
    }
  };
  auto store_step = [&]() {
#pragma unroll
    for (int h = 0; h < 2; ++h) *reinterpret_cast<uint4*>(&xs[64 * h + load_row][load_col]) = x_stage[h];
#pragma unroll
    for (int w = 0; w < kParts; ++w) *reinterpret_cast<uint4*>(&ws[w][load_row][load_col]) = w_stage[w];
  };

  const int wm = warp / 2, wn = warp % 2;  // warp sub-tile: tokens 32 * wm .., outputs 32 * wn ..
  const int g = lane / 4, q = lane % 4;
  float acc[kParts][2][4][4];
#pragma unroll
  for (int w = 0; w < kParts; ++w)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[w][i][j][r] = 0.0f;

  load_step(0);
  store_step();
  __syncthreads();
  for (int k0 = 0; k0 < p.k; k0 += kTcK) {
    const bool more = k0 + kTcK < p.k;
    if (more) load_step(k0 + kTcK);
#pragma unroll
    for (int kk = 0; kk < kTcK; kk += 16) {
      unsigned a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = 32 * wm + 16 * i + g;
        a[i][0] = *reinterpret_cast<const unsigned*>(&xs[r][kk + 2 * q]);
        a[i][1] = *reinterpret_cast<const unsigned*>(&xs[r + 8][kk + 2 * q]);
        a[i][2] = *reinterpret_cast<const unsigned*>(&xs[r][kk + 2 * q + 8]);
        a[i][3] = *reinterpret_cast<const unsigned*>(&xs[r + 8][kk + 2 * q + 8]);
      }
#pragma unroll
      for (int w = 0; w < kParts; ++w) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = 32 * wn + 8 * j + g;
          const unsigned b[2] = {*reinterpret_cast<const unsigned*>(&ws[w][c][kk + 2 * q]),
                                 *reinterpret_cast<const unsigned*>(&ws[w][c][kk + 2 * q + 8])};
#pragma unroll
          for (int i = 0; i < 2; ++i) MmaF16(acc[w][i][j], a[i], b);
        }
      }
    }
    __syncthreads();
    if (more) {
      store_step();
      __syncthreads();
    }
  }
  // C fragment: r 0,1 at (token g, outputs 2q, 2q+1); r 2,3 at token g + 8.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int token = t0 + 32 * wm + 16 * i + g + (r >= 2 ? 8 : 0);
        const int out = n0 + 32 * wn + 8 * j + 2 * q + (r % 2);
        if (token < rows && out < p.total_n) StoreOutput<kEpilogue>(p, token, out, acc[0][i][j][r], acc[kParts - 1][i][j][r]);
      }
    }
  }
}

}  // namespace kiln

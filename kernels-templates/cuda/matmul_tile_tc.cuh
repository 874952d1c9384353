// Weight-times-activation for buckets of 2-63 tokens on tensor cores
// (mma.sync m16n8k16): a warp computes 16 weight rows x 8 tokens, the 8
// warps of a block split K, and one warp adds their sums and applies the
// epilogue. The weights enter the MMA as their raw codes (f16 values, q4_K
// nibbles, q8_0 integers: all exact in f16) with the block scales applied per
// 32-element step outside it; the activations enter as two f16 halves (hi +
// lo, written once per launch by activations_f16_kernel<kNorm, true>), so
// the products keep about f32 precision. Each thread takes 8 consecutive elements of a
// 32-element step (its A and B fragments read the same permutation of k).
// Storages with a TileCodes specialisation only (f16, q8_0, q4_K); the
// runtime sends the others to matmul_kernel's 8-token tiles.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "matmul_tc.cuh"
#include "storage.cuh"

namespace kiln {

constexpr int kTileTcRows = kTileTcRowsPerBlock, kTileTcTokens = kTileTcTokensPerBlock, kTileTcWarps = 8;

// Two f16 lanes: bytes b0, b1 of w (each 0..255) as 1024 + b.
__device__ __forceinline__ unsigned BytesToHalf2(unsigned w, unsigned selector) {
  return __byte_perm(w, 0x64646464u, selector);
}
__device__ __forceinline__ unsigned SubHalf2(unsigned a, unsigned b) {
  unsigned r;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
// Four bytes of w as two f16 pairs (b0, b1) and (b2, b3), minus `bias` (an
// f16x2 of 1024 + offset in both lanes).
__device__ __forceinline__ void BytesToHalves(unsigned w, unsigned bias, unsigned* lo, unsigned* hi) {
  *lo = SubHalf2(BytesToHalf2(w, 0x5140u), bias);
  *hi = SubHalf2(BytesToHalf2(w, 0x5342u), bias);
}

// Raw codes of elements e + 8q .. e + 8q + 7 of a row (e a multiple of 32)
// as four f16 pairs, and the step's scale and min: the step's dot product
// is scale * sum(code * x) - min * sum(x).
template <class S>
struct TileCodes;

template <>
struct TileCodes<StorageF16> {
  static constexpr bool kHasMin = false;
  __device__ static bool Fits(int k) { return k % 32 == 0; }
  __device__ static uint4 Codes(const unsigned char* row, int e, int q) {
    return __ldg(reinterpret_cast<const uint4*>(row + 2 * (e + 8 * q)));
  }
  __device__ static void Scale(const unsigned char*, int, float* scale, float* min) {
    *scale = 1.0f;
    *min = 0.0f;
  }
};

template <>
struct TileCodes<StorageQ8_0> {
  static constexpr bool kHasMin = false;
  __device__ static bool Fits(int k) { return k % 32 == 0; }
  __device__ static uint4 Codes(const unsigned char* row, int e, int q) {
    const unsigned char* b = row + (e / 32) * 34 + 2 + 8 * q;  // 2-byte aligned
    const unsigned w0 = (LoadU16(b) | (static_cast<unsigned>(LoadU16(b + 2)) << 16)) ^ 0x80808080u;
    const unsigned w1 = (LoadU16(b + 4) | (static_cast<unsigned>(LoadU16(b + 6)) << 16)) ^ 0x80808080u;
    uint4 r;
    BytesToHalves(w0, 0x64806480u, &r.x, &r.y);  // (1024 + q + 128) - 1152
    BytesToHalves(w1, 0x64806480u, &r.z, &r.w);
    return r;
  }
  __device__ static void Scale(const unsigned char* row, int e, float* scale, float* min) {
    *scale = LoadHalf(row + (e / 32) * 34);
    *min = 0.0f;
  }
};

template <>
struct TileCodes<StorageQ4_K> {
  static constexpr bool kHasMin = true;
  __device__ static bool Fits(int) { return true; }
  __device__ static uint4 Codes(const unsigned char* row, int e, int q) {
    const int x = e % 256, s = x / 32;
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(row + (e / 256) * 144 + 16 + 32 * (s / 2) + 8 * q));
    const int shift = 4 * (s % 2);
    uint4 r;
    BytesToHalves((u.x >> shift) & 0x0F0F0F0Fu, 0x64006400u, &r.x, &r.y);
    BytesToHalves((u.y >> shift) & 0x0F0F0F0Fu, 0x64006400u, &r.z, &r.w);
    return r;
  }
  __device__ static void Scale(const unsigned char* row, int e, float* scale, float* min) {
    const unsigned char* b = row + (e / 256) * 144;
    int sc, mn;
    ScaleMinK4(b + 4, (e % 256) / 32, &sc, &mn);
    const unsigned dm = __ldg(reinterpret_cast<const unsigned*>(b));
    *scale = HalfToFloat(static_cast<unsigned short>(dm & 0xFFFF)) * static_cast<float>(sc);
    *min = HalfToFloat(static_cast<unsigned short>(dm >> 16)) * static_cast<float>(mn);
  }
};

// grid (ceil(total_n / 16), ceil(bucket / 8)), kTileTcWarps warps.
template <class S, int kEpilogue>
__global__ void __launch_bounds__(32 * kTileTcWarps) matmul_tile_tc_kernel(MatmulParams p) {
  using Codes = TileCodes<S>;
  constexpr int kParts = kEpilogue == kEpilogueSiluMul ? 2 : 1;
  const int rows = *p.rows;
  const int t0 = blockIdx.y * kTileTcTokens;
  if (t0 >= rows) return;
  const int n0 = blockIdx.x * kTileTcRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;

  // Rows g and g + 8 of the tile: their weight (q, k or v) and row there.
  int out_weight[2], out_row[2];
  const unsigned char* wrow[2][kParts];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    WeightRowOf<kEpilogue>(p, min(n0 + g + 8 * h, p.total_n - 1), &out_weight[h], &out_row[h]);
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      wrow[h][w] = Pick(p.w, out_weight[h] + w) + static_cast<long long>(out_row[h]) * p.row_bytes;
    }
  }
  // Token g's activations (B fragments); past the step's rows, zeros.
  const int token = t0 + g;
  const bool token_ok = token < rows;
  const unsigned short* xhi = p.x_f16 + static_cast<long long>(token_ok ? token : 0) * p.k;
  const unsigned short* xlo = p.x_lo + static_cast<long long>(token_ok ? token : 0) * p.k;
  // Sums of tokens 2q and 2q + 1 (the C fragment's columns), for the mins.
  const int tok_c = min(t0 + 2 * q, rows - 1), tok_c1 = min(t0 + 2 * q + 1, rows - 1);
  const float* sums0 = p.x_sums + static_cast<long long>(tok_c) * (p.k / 32);
  const float* sums1 = p.x_sums + static_cast<long long>(tok_c1) * (p.k / 32);

  float acc[kParts][4];
#pragma unroll
  for (int w = 0; w < kParts; ++w)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[w][r] = 0.0f;

  const int steps = p.k / 32;
#pragma unroll 2
  for (int s = warp; s < steps; s += kTileTcWarps) {
    const int e = 32 * s;
    uint4 bh = make_uint4(0, 0, 0, 0), bl = make_uint4(0, 0, 0, 0);
    if (token_ok) {
      bh = __ldg(reinterpret_cast<const uint4*>(xhi + e + 8 * q));
      bl = __ldg(reinterpret_cast<const uint4*>(xlo + e + 8 * q));
    }
    uint4 codes[2][kParts];
    float scales[2][kParts], mins[2][kParts];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int w = 0; w < kParts; ++w) {
        codes[h][w] = Codes::Codes(wrow[h][w], e, q);
        Codes::Scale(wrow[h][w], e, &scales[h][w], &mins[h][w]);
      }
    float sx0 = 0.0f, sx1 = 0.0f;
    if constexpr (Codes::kHasMin) {
      sx0 = sums0[s];
      sx1 = sums1[s];
    }
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const unsigned a0[4] = {codes[0][w].x, codes[1][w].x, codes[0][w].y, codes[1][w].y};
      const unsigned a1[4] = {codes[0][w].z, codes[1][w].z, codes[0][w].w, codes[1][w].w};
      const unsigned bh0[2] = {bh.x, bh.y}, bh1[2] = {bh.z, bh.w};
      const unsigned bl0[2] = {bl.x, bl.y}, bl1[2] = {bl.z, bl.w};
      MmaF16(c, a0, bh0);
      MmaF16(c, a0, bl0);
      MmaF16(c, a1, bh1);
      MmaF16(c, a1, bl1);
      // c: (row g, tokens 2q, 2q + 1), (row g + 8, tokens 2q, 2q + 1).
      acc[w][0] += scales[0][w] * c[0] - mins[0][w] * sx0;
      acc[w][1] += scales[0][w] * c[1] - mins[0][w] * sx1;
      acc[w][2] += scales[1][w] * c[2] - mins[1][w] * sx0;
      acc[w][3] += scales[1][w] * c[3] - mins[1][w] * sx1;
    }
  }

  // The warps' K slices, added by warp 0.
  __shared__ float partial[kTileTcWarps][32][kParts * 4];
#pragma unroll
  for (int w = 0; w < kParts; ++w)
#pragma unroll
    for (int r = 0; r < 4; ++r) partial[warp][lane][4 * w + r] = acc[w][r];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < kParts * 4; ++i) {
    float v = 0.0f;
#pragma unroll
    for (int wp = 0; wp < kTileTcWarps; ++wp) v += partial[wp][lane][i];
    acc[i / 4][i % 4] = v;
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int h = r / 2, t = t0 + 2 * q + (r % 2);
    if (n0 + g + 8 * h >= p.total_n || t >= rows) continue;
    const int width = Pick(p.n, out_weight[h]);
    const long long at = static_cast<long long>(t) * width + out_row[h];
    float v = acc[0][r];
    if constexpr (kEpilogue == kEpilogueSiluMul) v = Silu(acc[0][r]) * acc[kParts - 1][r];
    if constexpr (kEpilogue == kEpilogueResidualAdd) v = v + p.residual[at];
    Pick(p.y, out_weight[h])[at] = v;
  }
}

}  // namespace kiln

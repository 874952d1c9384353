// Weight-times-activation for buckets of 2-63 tokens on tensor cores
// (mma.sync m16n8k16): a warp computes kTileTcRows weight rows (16-row MMA
// tiles sharing its activation fragments) x 8 tokens, the 8 warps of a
// block split K in spans of 64 elements, and one warp adds their sums and
// applies the epilogue. The weights enter the MMA as their raw codes (f16
// values, q4_K nibbles, q8_0 integers: all exact in f16) with the block
// scales applied per 32-element step outside it; the activations enter as
// two f16 halves (hi + lo, written once per launch by
// activations_f16_kernel<kNorm, true>), so the products keep about f32
// precision. Each thread takes 8 consecutive elements of a 32-element step
// (its A and B fragments read the same permutation of k).
// Storages with a TileCodes specialisation only (f16, q8_0, q4_K); the
// runtime sends the others to matmul_kernel's 8-token tiles.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "matmul_lanes.cuh"
#include "matmul_tc.cuh"
#include "storage.cuh"

namespace kiln {

constexpr int kTileTcRows = kTileTcRowsPerBlock, kTileTcTokens = kTileTcTokensPerBlock, kTileTcWarps = 8;
constexpr int kTileTcTiles = kTileTcRows / 16;  // 16-row MMA tiles per warp, sharing the activation fragments


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

// A span of kHalves 32-element steps of a row, from element e (a multiple of
// 32; of 64 when kHalves is 2), as the loads of one thread (its 8
// consecutive elements e + 32h + 8q .. + 7 of each step h): Load issues them
// all (so a warp has the spans of all its rows in flight before it uses
// any), Codes gives step h's raw codes as four f16 pairs, Scale its scale and
// min: the step's dot product is scale * sum(code * x) - min * sum(x).
// kInFlight spans per warp are loaded ahead, as the registers allow.
template <class S, int kHalves>
struct TileCodes;

template <int kHalves>
struct TileCodes<StorageF16, kHalves> {
  static constexpr bool kHasMin = false;
  static constexpr int kInFlight = 1;  // 32 bytes per row and span: two spans spill
  struct Raw {
    uint4 c[kHalves];
  };
  __device__ static Raw Load(const unsigned char* row, int e, int q) {
    Raw r;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) r.c[h] = __ldg(reinterpret_cast<const uint4*>(row + 2 * (e + 32 * h + 8 * q)));
    return r;
  }
  __device__ static uint4 Codes(const Raw& r, int h) { return r.c[h]; }
  __device__ static void Scale(const Raw&, int, int, float* scale, float* min) {
    *scale = 1.0f;
    *min = 0.0f;
  }
};

template <int kHalves>
struct TileCodes<StorageQ8_0, kHalves> {
  static constexpr bool kHasMin = false;
  static constexpr int kInFlight = 2;
  struct Raw {
    unsigned w[kHalves][2];
    unsigned short d[kHalves];
  };
  __device__ static Raw Load(const unsigned char* row, int e, int q) {
    Raw r;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const unsigned char* blk = row + (e / 32 + h) * 34;
      const unsigned char* b = blk + 2 + 8 * q;  // 2-byte aligned
      r.w[h][0] = LoadU16(b) | (static_cast<unsigned>(LoadU16(b + 2)) << 16);
      r.w[h][1] = LoadU16(b + 4) | (static_cast<unsigned>(LoadU16(b + 6)) << 16);
      r.d[h] = LoadU16(blk);
    }
    return r;
  }
  __device__ static uint4 Codes(const Raw& r, int h) {
    uint4 c;
    BytesToHalves(r.w[h][0] ^ 0x80808080u, 0x64806480u, &c.x, &c.y);  // (1024 + q + 128) - 1152
    BytesToHalves(r.w[h][1] ^ 0x80808080u, 0x64806480u, &c.z, &c.w);
    return c;
  }
  __device__ static void Scale(const Raw& r, int, int h, float* scale, float* min) {
    *scale = HalfToFloat(r.d[h]);
    *min = 0.0f;
  }
};

// q4_K: the two steps of a span are the low and high nibbles of the same 32
// code bytes (8 per thread), with the block's 16-byte header (d, dmin and
// the packed 6-bit scales and mins, unpacked as the decode GEMV does).
template <int kHalves>
struct TileCodes<StorageQ4_K, kHalves> {
  static constexpr bool kHasMin = true;
  static constexpr int kInFlight = 2;
  struct Raw {
    uint2 qs;
    uint4 head;
  };
  __device__ static Raw Load(const unsigned char* row, int e, int q) {
    const unsigned char* b = row + (e / 256) * 144;
    return {__ldg(reinterpret_cast<const uint2*>(b + 16 + 32 * ((e % 256) / 64) + 8 * q)),
            __ldg(reinterpret_cast<const uint4*>(b))};
  }
  __device__ static uint4 Codes(const Raw& r, int h) {
    // Step h of the span is nibble ((e / 32) + h) % 2; a span of one step
    // starts at an even sub-block (K is a multiple of 256).
    const int shift = 4 * h;
    uint4 c;
    BytesToHalves((r.qs.x >> shift) & 0x0F0F0F0Fu, 0x64006400u, &c.x, &c.y);
    BytesToHalves((r.qs.y >> shift) & 0x0F0F0F0Fu, 0x64006400u, &c.z, &c.w);
    return c;
  }
  __device__ static void Scale(const Raw& r, int e, int h, float* scale, float* min) {
    float sc, mn;
    LaneQ4_K::ScaleMin(r.head, (e % 256) / 32 + h, &sc, &mn);
    *scale = HalfToFloat(static_cast<unsigned short>(r.head.x & 0xFFFF)) * sc;
    *min = HalfToFloat(static_cast<unsigned short>(r.head.x >> 16)) * mn;
  }
};

// One span of kHalves steps from element e for this thread's rows g and
// g + 8 and token g: every load first, then per step the codes of both rows
// as A fragments and the hi and lo activations as B fragments.
template <class S, int kParts, int kHalves>
__device__ __forceinline__ void TileSpan(const unsigned char* const (&wrow)[2 * kTileTcTiles][kParts], int e, int q,
                                         bool token_ok, const unsigned short* xhi, const unsigned short* xlo,
                                         const float* sums0, const float* sums1,
                                         float (&acc)[kTileTcTiles][kParts][4]) {
  using Codes = TileCodes<S, kHalves>;
  uint4 bh[kHalves], bl[kHalves];
  float sx0[kHalves], sx1[kHalves];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    bh[h] = bl[h] = make_uint4(0, 0, 0, 0);
    if (token_ok) {
      bh[h] = __ldg(reinterpret_cast<const uint4*>(xhi + e + 32 * h + 8 * q));
      bl[h] = __ldg(reinterpret_cast<const uint4*>(xlo + e + 32 * h + 8 * q));
    }
    sx0[h] = sx1[h] = 0.0f;
    if constexpr (Codes::kHasMin) {
      sx0[h] = sums0[e / 32 + h];
      sx1[h] = sums1[e / 32 + h];
    }
  }
  typename Codes::Raw raw[2 * kTileTcTiles][kParts];
#pragma unroll
  for (int r = 0; r < 2 * kTileTcTiles; ++r)
#pragma unroll
    for (int w = 0; w < kParts; ++w) raw[r][w] = Codes::Load(wrow[r][w], e, q);
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    const unsigned bh0[2] = {bh[h].x, bh[h].y}, bh1[2] = {bh[h].z, bh[h].w};
    const unsigned bl0[2] = {bl[h].x, bl[h].y}, bl1[2] = {bl[h].z, bl[h].w};
#pragma unroll
    for (int t = 0; t < kTileTcTiles; ++t)
#pragma unroll
      for (int w = 0; w < kParts; ++w) {
        const typename Codes::Raw& r0 = raw[2 * t][w];
        const typename Codes::Raw& r1 = raw[2 * t + 1][w];
        const uint4 c0 = Codes::Codes(r0, h), c1 = Codes::Codes(r1, h);
        float scale[2], min[2];
        Codes::Scale(r0, e, h, &scale[0], &min[0]);
        Codes::Scale(r1, e, h, &scale[1], &min[1]);
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const unsigned a0[4] = {c0.x, c1.x, c0.y, c1.y};
        const unsigned a1[4] = {c0.z, c1.z, c0.w, c1.w};
        MmaF16(c, a0, bh0);
        MmaF16(c, a0, bl0);
        MmaF16(c, a1, bh1);
        MmaF16(c, a1, bl1);
        // c: (row g, tokens 2q, 2q + 1), (row g + 8, tokens 2q, 2q + 1) of tile t.
        acc[t][w][0] += scale[0] * c[0] - min[0] * sx0[h];
        acc[t][w][1] += scale[0] * c[1] - min[0] * sx1[h];
        acc[t][w][2] += scale[1] * c[2] - min[1] * sx0[h];
        acc[t][w][3] += scale[1] * c[3] - min[1] * sx1[h];
      }
  }
}

// Tokens t0 .. t0 + 7 of the block's kTileTcRows outputs.
template <class S, int kEpilogue>
__device__ __forceinline__ void TileTcTokens(const MatmulParams& p, int rows, int t0) {
  constexpr int kParts = EpilogueParts(kEpilogue);
  constexpr int kHalfRows = 2 * kTileTcTiles;  // this thread's rows: g and g + 8 of each 16-row tile
  const int n0 = blockIdx.x * kTileTcRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;

  // Row g + 8r of the block (r = 2 * tile + half): its weight rows (q, k or
  // v; gate and up). Which weight and row it is comes again in the epilogue
  // (registers).
  const unsigned char* wrow[kHalfRows][kParts];
#pragma unroll
  for (int r = 0; r < kHalfRows; ++r) {
    int weight, row;
    WeightRowOf<kEpilogue>(p, min(n0 + g + 8 * r, p.total_n - 1), &weight, &row);
#pragma unroll
    for (int w = 0; w < kParts; ++w) wrow[r][w] = WeightRow(p, weight + w, row);
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

  float acc[kTileTcTiles][kParts][4];
#pragma unroll
  for (int t = 0; t < kTileTcTiles; ++t)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[t][w][r] = 0.0f;

  // Spans of two steps split among the warps, kInFlight at a time (gate
  // and up: one, for the registers); an odd last step alone.
  const int steps = p.k / 32, pairs = steps / 2;
#pragma unroll(kParts == 1 ? TileCodes<S, 2>::kInFlight : 1)
  for (int s2 = warp; s2 < pairs; s2 += kTileTcWarps) {
    TileSpan<S, kParts, 2>(wrow, 64 * s2, q, token_ok, xhi, xlo, sums0, sums1, acc);
  }
  if (steps % 2 == 1 && warp == pairs % kTileTcWarps) {
    TileSpan<S, kParts, 1>(wrow, 32 * (steps - 1), q, token_ok, xhi, xlo, sums0, sums1, acc);
  }

  AddWarpSlicesAndStore<kTileTcWarps, kEpilogue>(p, acc, n0, t0, rows);
}

// grid (ceil(total_n / kTileTcRows), ceil(bucket / 8)), kTileTcWarps
// warps. kLogitRows: the logit rows of a larger bucket (usually one a
// sequence), on a grid of one token tile whose blocks take tiles 0, 1, ...
// in turn (sized by the bucket, the grid of a 512-token step's head was
// 256k blocks, nearly all leaving at once); the loop is an instance of its
// own because it spills registers of the buckets' instances.
template <class S, int kEpilogue, bool kLogitRows = false>
__global__ void __launch_bounds__(32 * kTileTcWarps, 2) matmul_tile_tc_kernel(MatmulParams p) {
  WaitForPrevious();
  const int rows = *p.rows;
  if constexpr (kLogitRows) {
    for (int t0 = blockIdx.y * kTileTcTokens; t0 < rows; t0 += gridDim.y * kTileTcTokens) {
      TileTcTokens<S, kEpilogue>(p, rows, t0);
    }
  } else {
    const int t0 = blockIdx.y * kTileTcTokens;
    if (t0 < rows) TileTcTokens<S, kEpilogue>(p, rows, t0);
  }
}

}  // namespace kiln

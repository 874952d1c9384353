// Weight-times-activation for buckets of 2-63 tokens of q4_K weights on the
// integer tensor cores (mma.sync m16n8k32, s8 x s8 -> s32). The weights'
// 4-bit codes enter the MMA as they are (a nibble is a non-negative int8),
// the activations as int8 codes with one scale dx per 256-element unit and
// token (activations_int8_kernel; llama.cpp's q8_K for K-quants). One MMA
// covers one 32-element sub-block s; its integer sums take the sub-block's
// 6-bit scale as an integer multiply, so a unit's dx and d apply once:
//   sum_i (d sc_s q_i - dmin mn_s) x_i
//     ~ dx (d sum_s sc_s sum_i q_i c_i + sum_s (8 d sc_s R_s - dmin mn_s S_s))
// (S_s the sub-block's exact sum of x, R_s what the codes miss of it, both
// in units of dx; the 8 R_s stands in for sum_i q_i (x_i - dx c_i), as in
// LaneQ4_K). The second sum, per row and token over the unit's 8
// sub-blocks, is one f16 MMA (m16n8k16: k = the 8 scales then the 8 mins,
// against the 8 R then 8 S).
// Per sub-block a thread's work is 8 bit operations, one MMA, two byte
// permutes and four integer multiply-adds (with a float scale per
// sub-block it was ~30 instructions, the kernel's bound).
//
// A block computes tile_row_tiles x kTileInt8Rows outputs (silu_mul: each
// a gate and an up row) x 8 kTokenTiles tokens: its kTileInt8Warps warps
// take a row tile each (warp % tile_row_tiles) and split K by 256-element
// units with the other warps of that tile; a warp of each tile adds their
// sums and applies the epilogue. More tiles a block mean fewer blocks, each
// paying its start and its reduction once (the tiles' warps read the same
// activations, but at the same moment: on the H200 each miss still went to
// L2, so that traffic did not fall), and longer walks of K per warp
// (TileInt8RowTiles chooses).
// With two token tiles a block's weight loads and nibble unpacking serve
// 16 tokens (steps of 9-63 tokens), where two blocks side by side did each
// once.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "mma.cuh"
#include "storage.cuh"

namespace kiln {

// A block of kActivationsInt8Threads per row: x (times 1/rms and the gain
// when kNorm) as int8 codes c = rint(x 127 / max|x|) per 256-element unit,
// in element order; per unit its scale dx = max|x| / 127 and 16 halves:
// per 32 elements R = sum(x - dx c), then S = sum(x), both divided by dx.
// A warp takes a unit, a lane 8 consecutive elements (4 lanes a 32-element
// group), the units of kUnits passes loaded at once (64 units, K = 16384,
// in one round trip to L2; more spill at 1024 threads). K a multiple of 256.
template <bool kNorm>
__global__ void __launch_bounds__(kActivationsInt8Threads) activations_int8_kernel(ActivationsInt8Params p) {
  WaitForPrevious();
  constexpr int kThreads = kActivationsInt8Threads, kBatch = kActivationsInt8Batch, kPass = 4 * kThreads;
  constexpr int kWarps = kThreads / 32, kUnits = 2;
  const int t = blockIdx.x;
  if (t >= *p.rows) return;
  const float* x = p.x + static_cast<long long>(t) * p.k;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float inv_rms = 1.0f;
  if constexpr (kNorm) {
    __shared__ double partial[kWarps];
    double sq = 0.0;
    for (int base = 0; base < p.k; base += kBatch * kPass) {
      float4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = base + b * kPass + 4 * tid;
        v[b] = i < p.k ? *reinterpret_cast<const float4*>(x + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        sq += static_cast<double>(v[b].x) * v[b].x + static_cast<double>(v[b].y) * v[b].y;
        sq += static_cast<double>(v[b].z) * v[b].z + static_cast<double>(v[b].w) * v[b].w;
      }
    }
    sq = WarpSumDouble(sq);
    if (lane == 0) partial[warp] = sq;
    __syncthreads();
    double total = 0.0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += partial[w];
    inv_rms = static_cast<float>(1.0 / sqrt(total / static_cast<double>(p.k) + p.eps));
  }
  const int units = p.k / 256;
  unsigned char* codes = reinterpret_cast<unsigned char*>(p.codes) + static_cast<long long>(t) * p.k;
  unsigned short* sums = p.sums + static_cast<long long>(t) * units * 16;
  float* scales = p.scales + static_cast<long long>(t) * units;
  for (int base = 0; base < units; base += kUnits * kWarps) {
    float e[kUnits][8];
#pragma unroll
    for (int b = 0; b < kUnits; ++b) {
      const int u = base + b * kWarps + warp, i = 256 * u + 8 * lane;
      const bool in = u < units;
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float4 lo = in ? *reinterpret_cast<const float4*>(x + i) : zero;
      const float4 hi = in ? *reinterpret_cast<const float4*>(x + i + 4) : zero;
      float4 glo = zero, ghi = zero;
      if constexpr (kNorm) {
        glo = in ? *reinterpret_cast<const float4*>(p.gamma + i) : zero;
        ghi = in ? *reinterpret_cast<const float4*>(p.gamma + i + 4) : zero;
      }
      const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      const float g[8] = {glo.x, glo.y, glo.z, glo.w, ghi.x, ghi.y, ghi.z, ghi.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) e[b][j] = kNorm ? __fmul_rn(__fmul_rn(v[j], inv_rms), g[j]) : v[j];
    }
#pragma unroll
    for (int b = 0; b < kUnits; ++b) {
      const int u = base + b * kWarps + warp;
      if (u >= units) break;  // warp-uniform
      float dx, sum, miss;
      unsigned packed[2];
      QuantiseInt8<8, 32>(e[b], packed, &dx, &sum, &miss);
#pragma unroll
      for (int o = 1; o < 4; o <<= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        miss += __shfl_xor_sync(0xffffffffu, miss, o);
      }
      *reinterpret_cast<uint2*>(codes + 256 * u + 8 * lane) = make_uint2(packed[0], packed[1]);
      if (lane % 4 == 0) {
        // In units of dx: |R / dx| <= 16 and |S / dx| <= 32 x 127 stay in
        // f16's range whatever the activations' magnitude (S itself would
        // pass 65504 where 32 activations sum past it).
        const float inv = dx > 0.0f ? 1.0f / dx : 0.0f;
        unsigned short* s = sums + 16 * u + lane / 4;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(s[0]) : "f"(miss * inv));
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(s[8]) : "f"(sum * inv));
      }
      if (lane == 0) scales[u] = dx;
    }
  }
}

__device__ __forceinline__ void MmaS8(int* c, const unsigned* a, const unsigned* b) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Byte b of `packed` (a 6-bit scale or min) times `d`: the byte permuted
// into the mantissa of 2^23, whose offset the fma's -2^23 d removes.
__device__ __forceinline__ float ScaledByte(unsigned packed, int b, float d) {
  return fmaf(d, __int_as_float(__byte_perm(packed, 0x4B000000u, 0x7650u | b)), -8388608.0f * d);
}

// One 256-element q4_K block of one weight row as this thread holds it:
// the 16-byte header and, of each 32-byte code chunk c (sub-blocks 2c and
// 2c + 1 in its low and high nibbles), the 8 bytes 8q .. 8q + 7.
struct TileInt8Block {
  uint4 head;
  uint2 qs[4];
};

__device__ __forceinline__ TileInt8Block LoadTileInt8Block(const unsigned char* row, int unit, int q) {
  const unsigned char* b = row + static_cast<long long>(unit) * 144;
  TileInt8Block r;
  r.head = __ldg(reinterpret_cast<const uint4*>(b));
#pragma unroll
  for (int c = 0; c < 4; ++c) r.qs[c] = __ldg(reinterpret_cast<const uint2*>(b + 16 + 32 * c + 8 * q));
  return r;
}

// The block's scales and mins, d sc and dmin mn of sub-blocks 0..7, as the
// four words of 6-bit values and the two factors they are scaled by.
struct TileInt8Scales {
  unsigned sc03, sc47, mn03, mn47;
  float d, dmin;
};

__device__ __forceinline__ TileInt8Scales UnpackTileInt8Scales(const uint4& h) {
  TileInt8Scales s;
  s.sc03 = h.y & 0x3F3F3F3Fu;
  s.mn03 = h.z & 0x3F3F3F3Fu;
  s.sc47 = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
  s.mn47 = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
  s.d = HalfToFloat(static_cast<unsigned short>(h.x & 0xFFFFu));
  s.dmin = HalfToFloat(static_cast<unsigned short>(h.x >> 16));
  return s;
}

// A block's 8 kTokenTiles tokens from t0 (grid: see matmul_tile_int8_kernel;
// y = ceil(total_n / (kTileInt8Rows tile_row_tiles))). Each warp walks its units of K
// (u = slice, slice + slices, ...), one unit's loads at a time (keeping the
// next unit's loads in flight during this one's MMAs, in registers, was
// 2-3% slower for launches of one weight per row; gate and up's two have
// no registers left).
template <class S, int kEpilogue, int kTokenTiles>
__device__ __forceinline__ void TileInt8Tokens(const MatmulParams& p, int rows, int t0) {
  static_assert(S::kBlockElems == 256 && S::kBlockBytes == 144, "q4_K only");
  constexpr int kParts = EpilogueParts(kEpilogue);
  constexpr int kT = kTokenTiles;
  const int groups = p.tile_row_tiles, slices = kTileInt8Warps / groups;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int slice = warp / groups;  // this warp's share of K: units slice, slice + slices, ...
  const int n0 = blockIdx.y * kTileInt8Rows * groups, tile_n0 = n0 + kTileInt8Rows * (warp % groups);

  // Rows g and g + 8 of the tile (h = 0, 1): their weight rows (gate and up for silu_mul).
  const unsigned char* wrow[2][kParts];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int weight, row;
    WeightRowOf<kEpilogue>(p, min(tile_n0 + 8 * h + g, p.total_n - 1), &weight, &row);
#pragma unroll
    for (int w = 0; w < kParts; ++w) wrow[h][w] = WeightRow(p, weight + w, row);
  }
  // Per token tile: token g's codes and sums (the B fragments), the scales
  // of tokens 2q and 2q + 1 (the C fragment's columns). Past the step's
  // rows: the last row again, whose sums are not stored.
  const int units = p.k / 256;
  // (Token indices, not pointers: two token tiles' pointers spilled gate/up.)
  int tg[kT], ta[kT], tb[kT];
#pragma unroll
  for (int i = 0; i < kT; ++i) {
    const int tt = t0 + 8 * i;
    tg[i] = min(tt + g, rows - 1);
    ta[i] = min(tt + 2 * q, rows - 1);
    tb[i] = min(tt + 2 * q + 1, rows - 1);
  }
  const int mine = slice < units ? (units - 1 - slice) / slices + 1 : 0;  // units this warp walks

  struct Unit {
    TileInt8Block blk[2][kParts];
    uint2 xq[kT][8];
    unsigned r[kT], s[kT];     // token g's R and S of sub-blocks 2q, 2q + 1 (f16 pairs)
    float dxa[kT], dxb[kT];    // the scales of tokens 2q, 2q + 1
  };
  Unit in;
  auto load = [&](Unit& d, int u) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int w = 0; w < kParts; ++w) d.blk[h][w] = LoadTileInt8Block(wrow[h][w], u, q);
#pragma unroll
    for (int i = 0; i < kT; ++i) {
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        d.xq[i][s] = __ldg(reinterpret_cast<const uint2*>(p.x_i8 + tg[i] * p.k + 256 * u + 32 * s + 8 * q));
      }
      const unsigned* xs = reinterpret_cast<const unsigned*>(p.x_i8_sums) + (tg[i] * units + u) * 8;
      d.r[i] = __ldg(xs + q);
      d.s[i] = __ldg(xs + 4 + q);
      d.dxa[i] = __ldg(p.x_i8_scales + ta[i] * units + u);
      d.dxb[i] = __ldg(p.x_i8_scales + tb[i] * units + u);
    }
  };
  if (mine > 0) load(in, slice);

  float acc[kT][kParts][4];
#pragma unroll
  for (int i = 0; i < kT; ++i)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][w][r] = 0.0f;

  auto compute = [&](const Unit& d) {
#pragma unroll
    for (int w = 0; w < kParts; ++w) {
      const TileInt8Scales k[2] = {UnpackTileInt8Scales(d.blk[0][w].head), UnpackTileInt8Scales(d.blk[1][w].head)};
      // Per token tile, sum_s sc_s sum_i q_i c_i: (row g, tokens 2q, 2q + 1), (row g + 8, ...)
      int isum[kT][4];
#pragma unroll
      for (int i = 0; i < kT; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) isum[i][r] = 0;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        const int c = s / 2, shift = 4 * (s % 2);
        const TileInt8Block& r0 = d.blk[0][w];
        const TileInt8Block& r1 = d.blk[1][w];
        // Thread q's 8 elements of the sub-block (k order 8q ..) for rows g, g + 8.
        const unsigned a[4] = {(r0.qs[c].x >> shift) & 0x0F0F0F0Fu, (r1.qs[c].x >> shift) & 0x0F0F0F0Fu,
                               (r0.qs[c].y >> shift) & 0x0F0F0F0Fu, (r1.qs[c].y >> shift) & 0x0F0F0F0Fu};
        const int sc0 = static_cast<int>(__byte_perm(s < 4 ? k[0].sc03 : k[0].sc47, 0u, 0x4440u | (s % 4)));
        const int sc1 = static_cast<int>(__byte_perm(s < 4 ? k[1].sc03 : k[1].sc47, 0u, 0x4440u | (s % 4)));
#pragma unroll
        for (int i = 0; i < kT; ++i) {
          const unsigned b[2] = {d.xq[i][s].x, d.xq[i][s].y};
          int part[4] = {0, 0, 0, 0};
          MmaS8(part, a, b);
          isum[i][0] += sc0 * part[0];
          isum[i][1] += sc0 * part[1];
          isum[i][2] += sc1 * part[2];
          isum[i][3] += sc1 * part[3];
        }
      }
      // The unit's 8 d sc_s R_s - dmin mn_s S_s for the same rows and
      // tokens: A rows g, g + 8 at k = 2q, 2q + 1 (scales) and 2q + 8, 2q + 9
      // (mins), B token g's R then S of sub-blocks 2q, 2q + 1. R and S come
      // in units of the token's dx (activations_int8_kernel), so the MMA
      // adds them to d isum (in the integer sums' registers) and dx scales
      // the whole.
      unsigned bias_a[4];
      const int byte = 2 * (q % 2);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned scw = q < 2 ? k[h].sc03 : k[h].sc47, mnw = q < 2 ? k[h].mn03 : k[h].mn47;
        bias_a[h] = PackHalf2(ScaledByte(scw, byte, 8.0f * k[h].d), ScaledByte(scw, byte + 1, 8.0f * k[h].d));
        bias_a[2 + h] = PackHalf2(ScaledByte(mnw, byte, -k[h].dmin), ScaledByte(mnw, byte + 1, -k[h].dmin));
      }
#pragma unroll
      for (int i = 0; i < kT; ++i) {
        const unsigned bias_b[2] = {d.r[i], d.s[i]};
        float unit[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) unit[r] = k[r / 2].d * static_cast<float>(isum[i][r]);
        MmaF16(unit, bias_a, bias_b);
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][w][r] = fmaf(r % 2 == 0 ? d.dxa[i] : d.dxb[i], unit[r], acc[i][w][r]);
      }
    }
  };
  for (int j = 0; j < mine; ++j) {
    compute(in);
    if (j + 1 < mine) load(in, slice + slices * (j + 1));
  }

  AddWarpSlicesAndStore<kTileInt8Warps, kEpilogue, kT, kParts, true>(p, acc, n0, t0, rows, groups, kTileInt8Rows);
}

// grid (ceil(bucket / (8 kTokenTiles)), ceil(total_n / (kTileInt8Rows
// tile_row_tiles))). Token tiles are the grid's x: the blocks of one set of
// weight rows run side by side, so a step of several tiles reads those rows
// from DRAM once and from L2 for the rest. kLogitRows: a larger bucket's
// logit rows, blocks taking token blocks blockIdx.x, + gridDim.x, ... (as
// in matmul_tile_tc_kernel).
template <class S, int kEpilogue, int kTokenTiles, bool kLogitRows = false>
__global__ void __launch_bounds__(32 * kTileInt8Warps, 2) matmul_tile_int8_kernel(MatmulParams p) {
  WaitForPrevious();
  const int rows = *p.rows;
  constexpr int kTokens = kTileInt8Tokens * kTokenTiles;
  if constexpr (kLogitRows) {
    for (int t0 = blockIdx.x * kTokens; t0 < rows; t0 += gridDim.x * kTokens) {
      TileInt8Tokens<S, kEpilogue, kTokenTiles>(p, rows, t0);
    }
  } else {
    const int t0 = blockIdx.x * kTokens;
    if (t0 < rows) TileInt8Tokens<S, kEpilogue, kTokenTiles>(p, rows, t0);
  }
}

}  // namespace kiln

// Weight-times-activation for buckets of 2-63 tokens of q4_K weights on the
// integer tensor cores (mma.sync m16n8k32, s8 x s8 -> s32). The weights'
// 4-bit codes enter the MMA as they are (a nibble is a non-negative int8),
// the activations as int8 codes with a scale per 32 elements
// (activations_int8_kernel, the quantisation of the decode GEMV's int8
// lane), and one MMA covers one 32-element sub-block, whose integer sums
// get the sub-block's scales outside it:
//   sum_i (d sc q_i - dmin mn) x_i ~ d sc (dx sum_i q_i c_i + 8 R) - dmin mn S
// (S the sub-block's exact sum of x, R what the codes miss of it; see
// LaneQ4_K). Against matmul_tile_tc_kernel's f16 path: no code-to-f16
// conversion, one MMA instead of four (hi and lo halves) per 16 x 8 x 32,
// a 256-element block's 6-bit scales unpacked once (8 bit operations per
// row), and 1.5 bytes of activations per element instead of 4.
//
// A block computes TileInt8RowsPerBlock outputs (silu_mul: 16, each a gate
// and an up row; else 32) x 8 tokens; its kTileInt8Warps warps split K by
// 256-element blocks and warp 0 adds their sums and applies the epilogue.
// The tokens' float4s per 32 elements are staged in shared memory once per
// block (loaded per sub-block, their latency was exposed 8 times per block).
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "storage.cuh"

namespace kiln {

// A block of kActivationsInt8Threads per row: x (times 1/rms and the gain
// when kNorm) as int8 codes c = rint(x 127 / max|x|) in element order, and
// per 32 elements the float4 {dx = max|x| / 127, 8 sum(x - dx c), sum(x),
// 0}. Each thread takes runs of 4 elements (8 threads a group), the runs of
// kActivationsInt8Batch passes loaded at once: the kernel is one or two
// round trips to L2, not a chain of them (a warp per group, one group after
// another, took 11.5 us for K = 4096). K a multiple of 32.
template <bool kNorm>
__global__ void __launch_bounds__(kActivationsInt8Threads) activations_int8_kernel(ActivationsInt8Params p) {
  constexpr int kThreads = kActivationsInt8Threads, kBatch = kActivationsInt8Batch, kPass = 4 * kThreads;
  const int t = blockIdx.x;
  if (t >= *p.rows) return;
  const float* x = p.x + static_cast<long long>(t) * p.k;
  const int tid = threadIdx.x;
  float inv_rms = 1.0f;
  if constexpr (kNorm) {
    __shared__ double partial[kThreads / 32];
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
    if (tid % 32 == 0) partial[tid / 32] = sq;
    __syncthreads();
    double total = 0.0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
    inv_rms = static_cast<float>(1.0 / sqrt(total / static_cast<double>(p.k) + p.eps));
  }
  unsigned* codes = reinterpret_cast<unsigned*>(p.codes + static_cast<long long>(t) * p.k);
  float4* meta = reinterpret_cast<float4*>(p.meta) + static_cast<long long>(t) * (p.k / 32);
  for (int base = 0; base < p.k; base += kBatch * kPass) {
    float4 v[kBatch], gm[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * kPass + 4 * tid;
      const bool in = i < p.k;
      v[b] = in ? *reinterpret_cast<const float4*>(x + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if constexpr (kNorm) gm[b] = in ? *reinterpret_cast<const float4*>(p.gamma + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (base + b * kPass >= p.k) break;  // block-uniform
      const int i = base + b * kPass + 4 * tid;
      float e[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
      if constexpr (kNorm) {
        const float g[4] = {gm[b].x, gm[b].y, gm[b].z, gm[b].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) e[j] = __fmul_rn(__fmul_rn(e[j], inv_rms), g[j]);
      }
      float dx, sum, miss;
      const unsigned packed = QuantiseInt8Run(e, &dx, &sum, &miss);
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        miss += __shfl_xor_sync(0xffffffffu, miss, o);
      }
      if (i < p.k) {
        codes[i / 4] = packed;
        if (tid % 8 == 0) meta[i / 32] = make_float4(dx, 8.0f * miss, sum, 0.0f);
      }
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

// grid (ceil(bucket / 8), ceil(total_n / TileInt8RowsPerBlock(kEpilogue))),
// kTileInt8Warps warps, TileInt8SmemBytes(k) of dynamic shared memory.
template <class S, int kEpilogue>
__global__ void __launch_bounds__(32 * kTileInt8Warps, 2) matmul_tile_int8_kernel(MatmulParams p) {
  static_assert(S::kBlockElems == 256 && S::kBlockBytes == 144, "q4_K only");
  constexpr int kParts = kEpilogue == kEpilogueSiluMul ? 2 : 1;
  constexpr int kTiles = TileInt8RowsPerBlock(kEpilogue) / 16;  // 16-row MMA tiles of outputs per warp
  extern __shared__ float4 meta[];  // [kTileInt8Tokens][TileInt8MetaStride(k)]
  const int rows = *p.rows;
  // Token tiles are the grid's x: the blocks of one set of weight rows run
  // side by side, so a step of several tiles reads those rows from DRAM
  // once and from L2 for the rest.
  const int t0 = blockIdx.x * kTileInt8Tokens;
  if (t0 >= rows) return;
  const int n0 = blockIdx.y * TileInt8RowsPerBlock(kEpilogue);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;

  // Rows g and g + 8 of each tile (h = 0, 1): their weight rows (gate and up for silu_mul).
  const unsigned char* wrow[kTiles][2][kParts];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int weight, row;
      WeightRowOf<kEpilogue>(p, min(n0 + 16 * t + 8 * h + g, p.total_n - 1), &weight, &row);
#pragma unroll
      for (int w = 0; w < kParts; ++w) wrow[t][h][w] = Pick(p.w, weight + w) + static_cast<long long>(row) * p.row_bytes;
    }
  // Token g's codes (the B fragments). Past the step's rows: the last row
  // again, whose sums are not stored.
  const signed char* xc = p.x_i8 + static_cast<long long>(min(t0 + g, rows - 1)) * p.k;
  const int units = p.k / 256, stride = TileInt8MetaStride(p.k);

  // This warp's first block of K in flight before the tokens' float4s are
  // staged (one round trip each, overlapped).
  TileInt8Block blk[kTiles][2][kParts];
  uint2 xq[8];
  auto load = [&](int u) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int w = 0; w < kParts; ++w) blk[t][h][w] = LoadTileInt8Block(wrow[t][h][w], u, q);
#pragma unroll
    for (int s = 0; s < 8; ++s) xq[s] = __ldg(reinterpret_cast<const uint2*>(xc + 256 * u + 32 * s + 8 * q));
  };
  if (warp < units) load(warp);
  for (int i = threadIdx.x; i < kTileInt8Tokens * (p.k / 32); i += 32 * kTileInt8Warps) {
    const int tok = i / (p.k / 32), grp = i % (p.k / 32);
    meta[tok * stride + grp] =
        __ldg(reinterpret_cast<const float4*>(p.x_meta) + static_cast<long long>(min(t0 + tok, rows - 1)) * (p.k / 32) + grp);
  }
  __syncthreads();
  // The C fragment's columns: tokens 2q and 2q + 1.
  const float4* meta0 = meta + (2 * q) * stride;
  const float4* meta1 = meta + (2 * q + 1) * stride;

  float acc[kTiles][kParts][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[t][w][r] = 0.0f;

  for (int u = warp; u < units; u += kTileInt8Warps) {
    if (u != warp) load(u);
    TileInt8Scales sc[kTiles][2][kParts];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int w = 0; w < kParts; ++w) sc[t][h][w] = UnpackTileInt8Scales(blk[t][h][w].head);
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const float4 m0 = meta0[8 * u + s], m1 = meta1[8 * u + s];
      const unsigned b[2] = {xq[s].x, xq[s].y};
      const int c = s / 2, shift = 4 * (s % 2);
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int w = 0; w < kParts; ++w) {
          const TileInt8Block& r0 = blk[t][0][w];
          const TileInt8Block& r1 = blk[t][1][w];
          // Thread q's 8 elements of the sub-block (k order 8q ..) for rows g, g + 8.
          const unsigned a[4] = {(r0.qs[c].x >> shift) & 0x0F0F0F0Fu, (r1.qs[c].x >> shift) & 0x0F0F0F0Fu,
                                 (r0.qs[c].y >> shift) & 0x0F0F0F0Fu, (r1.qs[c].y >> shift) & 0x0F0F0F0Fu};
          int isum[4] = {0, 0, 0, 0};
          MmaS8(isum, a, b);
          float rs[2], rm[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const TileInt8Scales& k = sc[t][h][w];
            rs[h] = ScaledByte(s < 4 ? k.sc03 : k.sc47, s % 4, k.d);
            rm[h] = ScaledByte(s < 4 ? k.mn03 : k.mn47, s % 4, k.dmin);
          }
          // isum: (row g, tokens 2q, 2q + 1), (row g + 8, tokens 2q, 2q + 1).
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const float4& m = r % 2 == 0 ? m0 : m1;
            const float v = fmaf(static_cast<float>(isum[r]), m.x, m.y);
            acc[t][w][r] = fmaf(rs[r / 2], v, acc[t][w][r]);
            acc[t][w][r] = fmaf(-rm[r / 2], m.z, acc[t][w][r]);
          }
        }
    }
  }

  AddWarpSlicesAndStore<kTileInt8Warps, kEpilogue>(p, acc, n0, t0, rows);
}

}  // namespace kiln

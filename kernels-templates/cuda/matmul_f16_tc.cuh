// Prefill matmul over f16 weight rows on tensor cores. Quantised weights
// are first decoded to f16 rows in a scratch buffer (dequantize_f16_kernel:
// bandwidth-bound, ~4 bytes moved per weight); f16 weights are read in
// place. matmul_f16_tc_kernel then computes a 128-token x 128-row tile per
// block: a kGemmStages-deep ring of cp.async copies (32-wide K steps of both
// operands) keeps the loads ahead of the math, fragments come from shared
// memory by ldmatrix, and each of the 8 warps (2 x 4) issues 16 mma.sync
// m16n8k16 per 16 elements of K for its 64 x 32 sub-tile. For silu_mul the
// tile's rows are 64 gate rows then the same 64 up rows, and every warp takes
// 16 of each, so a thread holds gate and up of the same outputs.
// Same epilogues and parameters as matmul_kernel, with p.w pointing at f16
// rows (p.row_bytes = 2 k); k is a multiple of kGemmK.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "mma.cuh"
#include "storage.cuh"

namespace kiln {

// Rows of the weights one after another in f16: y[row][0..k).
template <class S>
__global__ void __launch_bounds__(256) dequantize_f16_kernel(DequantizeParams p) {
  WaitForPrevious();
  int row = blockIdx.x, wi = 0;
  while (wi + 1 < p.num_weights && row >= Pick(p.n, wi)) row -= Pick(p.n, wi++);
  const unsigned char* src = Pick(p.w, wi) + static_cast<long long>(row) * p.row_bytes;
  uint4* dst = reinterpret_cast<uint4*>(p.y + static_cast<long long>(blockIdx.x) * p.k);
  const int e = (blockIdx.y * 256 + threadIdx.x) * 8;
  if (e >= p.k) return;
  float v[8];
  S::Decode8(src + (e / S::kBlockElems) * S::kBlockBytes, e % S::kBlockElems, v);
  dst[e / 8] = {PackHalf2(v[0], v[1]), PackHalf2(v[2], v[3]), PackHalf2(v[4], v[5]), PackHalf2(v[6], v[7])};
}

template <int kEpilogue>
__global__ void __launch_bounds__(256, 2) matmul_f16_tc_kernel(MatmulParams p) {
  WaitForPrevious();
  constexpr int kParts = EpilogueParts(kEpilogue);
  constexpr int kOutputs = kGemmN / kParts;  // outputs per block
  constexpr int kStageHalves = (kGemmM + kGemmN) * kGemmStride;
  const int rows = *p.rows;
  const int t0 = blockIdx.x * kGemmM;  // token tiles fastest: blocks in flight share weight tiles
  if (t0 >= rows) return;
  const int n0 = blockIdx.y * kOutputs;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  extern __shared__ __align__(16) unsigned short gemm_smem[];
  const unsigned smem = SharedAddress(gemm_smem);

  // Each thread copies two 16-byte pieces of each operand per K step: tile
  // rows tid / 4 and 64 + tid / 4, elements (tid % 4) * 8 ...
  const int copy_row = tid / 4, copy_col = (tid % 4) * 8;
  const unsigned short* a_src[2];
  const unsigned short* b_src[2];
  bool a_ok[2], b_ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = copy_row + 64 * h;
    const int token = t0 + r;
    a_ok[h] = token < rows;
    a_src[h] = p.x_f16 + static_cast<long long>(a_ok[h] ? token : 0) * p.k + copy_col;
    b_src[h] = TileWeightRow<kEpilogue>(p, n0, r, &b_ok[h]) + copy_col;
  }
  auto copy_step = [&](int stage, int k0) {
    const unsigned base = smem + stage * kStageHalves * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = copy_row + 64 * h;
      CopyAsync16(base + (r * kGemmStride + copy_col) * 2, a_src[h] + k0, a_ok[h]);
      CopyAsync16(base + ((kGemmM + r) * kGemmStride + copy_col) * 2, b_src[h] + k0, b_ok[h]);
    }
  };

  const int wm = warp / 4, wn = warp % 4;  // warp sub-tile: tokens 64 wm .., tile rows below
  // The tile row of the warp's j-th 8-row group: for silu_mul j 0-1 gate
  // rows 16 wn .., j 2-3 the up rows of the same outputs.
  auto b_row = [&](int j) { return kParts == 2 ? (j < 2 ? 16 * wn + 8 * j : 64 + 16 * wn + 8 * (j - 2)) : 32 * wn + 8 * j; };
  // ldmatrix addresses (halves within a stage): A lanes 0-15 rows 0-15 at k 0,
  // lanes 16-31 the same rows at k 8; B lanes 0-7 / 8-15 rows 0-7 at k 0 / 8,
  // lanes 16-31 the next 8 rows.
  const int a_off = (64 * wm + lane % 16) * kGemmStride + (lane / 16) * 8;
  int b_off[2];
#pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    b_off[jj] = (kGemmM + b_row(2 * jj) + lane % 8 + (lane / 16) * 8) * kGemmStride + ((lane / 8) % 2) * 8;
  }
  // b_row(2 jj + 1) is b_row(2 jj) + 8 for both layouts, so one x4 load covers j = 2 jj and 2 jj + 1.

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

  const int steps = p.k / kGemmK;
#pragma unroll
  for (int s = 0; s < kGemmStages - 1; ++s) {
    if (s < steps) copy_step(s, s * kGemmK);
    asm volatile("cp.async.commit_group;");
  }
  for (int step = 0; step < steps; ++step) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kGemmStages - 2));
    __syncthreads();  // step's stage is in; every warp is done with the stage refilled next
    const int next = step + kGemmStages - 1;
    if (next < steps) copy_step(next % kGemmStages, next * kGemmK);
    asm volatile("cp.async.commit_group;");
    const unsigned base = smem + (step % kGemmStages) * kStageHalves * 2;
#pragma unroll
    for (int kk = 0; kk < kGemmK; kk += 16) {
      unsigned a[4][4], b[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) LoadMatrixX4(base + (a_off + 16 * i * kGemmStride + kk) * 2, a[i]);
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) LoadMatrixX4(base + (b_off[jj] + kk) * 2, b[jj]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) MmaF16(acc[i][j], a[i], &b[j / 2][(j % 2) * 2]);
      }
    }
  }
  asm volatile("cp.async.wait_group 0;");

  // C fragment of (i, j): r 0,1 at token g, tile rows 2q, 2q+1 of group j; r 2,3 at token g + 8.
  const int g = lane / 4, q = lane % 4;
  constexpr int kGroups = kParts == 2 ? 2 : 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int token = t0 + 64 * wm + 16 * i + g + (r >= 2 ? 8 : 0);
        const int out = n0 + b_row(j) + 2 * q + (r % 2);
        if (token < rows && out < p.total_n) StoreOutput<kEpilogue>(p, token, out, acc[i][j][r], acc[i][(j + 2) % 4][r]);
      }
    }
  }
}

}  // namespace kiln

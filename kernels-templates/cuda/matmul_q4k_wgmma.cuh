// Prefill matmul over q4_K weight rows as they are stored, for small prefill
// steps: at 64 tokens the f16 copy of the weights that
// matmul_f16_wgmma_kernel reads (2 bytes a weight against q4_K's 0.56) is
// what bounds a step. A block computes 64 tokens x 256 weight rows: each
// warpgroup one 128-row tile (the tiles, silu_mul's gate and up halves and
// the epilogues of matmul_f16_wgmma_kernel) with wgmma m64n128k16 over the
// same 64 tokens. Per 64-element K step (a quarter of a q4_K block) each
// thread copies its own row's 32 bytes of codes and the block's 16-byte
// header into a ring of kWgmmaStages raw stages (cp.async, so the loads run
// ahead without registers), then decodes them into its warpgroup's rows of
// the swizzled f16 operand tile: the sub-block's d sc and dmin m rounded to
// f16, then q sc - m per pair of codes in f16 arithmetic (within an f16
// rounding of the copy's values; a first version that made the copy's
// exact values, each converted from f32, was slower than reading the copy
// on the H200). A thread decodes only rows its
// own warpgroup multiplies, so one block barrier a step (for the shared
// activation stage) is enough.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "matmul_f16_wgmma.cuh"
#include "matmul_tile_int8.cuh"
#include "matmul_tile_tc.cuh"
#include "mma.cuh"
#include "storage.cuh"

namespace kiln {

// a b + c on f16 pairs.
__device__ __forceinline__ unsigned FmaHalf2(unsigned a, unsigned b, unsigned c) {
  unsigned r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Eight codes (nibble `shift` of bytes 0..7 of the pair w0, w1) as f16
// values q scale - min, in element order (four f16 pairs): each nibble
// byte becomes the f16 1024 + q (BytesToHalf2), 1024 comes off exactly,
// and one f16 multiply-add per pair applies the sub-block's scale and min.
__device__ __forceinline__ uint4 DecodeQ4KEight(unsigned w0, unsigned w1, int shift, unsigned scale, unsigned neg_min) {
  constexpr unsigned k1024 = 0x64006400u;
  const unsigned n0 = (w0 >> shift) & 0x0F0F0F0Fu, n1 = (w1 >> shift) & 0x0F0F0F0Fu;
  const unsigned h[4] = {BytesToHalf2(n0, 0x5140u), BytesToHalf2(n0, 0x5342u), BytesToHalf2(n1, 0x5140u),
                         BytesToHalf2(n1, 0x5342u)};
  unsigned v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = FmaHalf2(SubHalf2(h[i], k1024), scale, neg_min);
  return make_uint4(v[0], v[1], v[2], v[3]);
}

template <int kEpilogue>
__global__ void __launch_bounds__(256, 2) matmul_q4k_wgmma_kernel(MatmulParams p) {
  WaitForPrevious();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kParts = EpilogueParts(kEpilogue);
  constexpr int kOutputs = kGemmN / kParts;
  constexpr int kATileBytes = kQ4KWgmmaTokens * kWgmmaK * 2;  // 64 tokens x 64 halves (8 KB)
  constexpr int kBTileBytes = kGemmN * kWgmmaK * 2;           // one warpgroup's 128 rows (16 KB)
  constexpr int kRawStageBytes = 256 * kQ4KWgmmaRawBytes;     // a thread's header and codes each
  static_assert(2 * kBTileBytes + kWgmmaStages * (kATileBytes + kRawStageBytes) + 1024 == Q4KWgmmaSmemBytes(),
                "the host sizes the shared memory");
  const int rows = *p.rows;
  const int t0 = blockIdx.x * kQ4KWgmmaTokens;
  if (t0 >= rows) return;
  const int tid = threadIdx.x, wg = tid / 128;
  const int tile = 2 * blockIdx.y + wg;  // this warpgroup's 128-row tile
  extern __shared__ unsigned char wgmma_smem[];
  const unsigned smem = (SharedAddress(wgmma_smem) + kWgmmaAtomBytes - 1) & ~(kWgmmaAtomBytes - 1);
  const unsigned b_tile = smem, a_ring = smem + 2 * kBTileBytes;
  const unsigned raw_ring = a_ring + kWgmmaStages * kATileBytes;

  // Activations: chunk tid % 8 of token rows tid / 8 and tid / 8 + 32.
  const int copy_chunk = tid % 8;
  const unsigned short* a_src[2];
  bool a_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = tid / 8 + 32 * i;
    a_ok[i] = t0 + r < rows;
    a_src[i] = p.x_f16 + static_cast<long long>(a_ok[i] ? t0 + r : 0) * p.k + copy_chunk * 8;
  }
  const unsigned a_dst = WgmmaOffset(tid / 8, copy_chunk * 8);  // row + 32: 4 atoms (4 KB) on
  // Weights: thread tid copies and decodes row tid of the block's 256 (row
  // tid % 128 of its warpgroup's tile).
  bool w_ok;
  const unsigned char* w_row = TileWeightBytes<kEpilogue>(p, tile * kOutputs, tid % 128, &w_ok);
  w_ok = w_ok && tile * kOutputs < p.total_n;
  const unsigned raw_mine = raw_ring + tid * kQ4KWgmmaRawBytes;

  const int splits = p.k_splits > 1 ? p.k_splits : 1;
  const int all_steps = p.k / kWgmmaK, per = (all_steps + splits - 1) / splits;
  const int first = blockIdx.z * per, steps = min(all_steps - first, per);
  auto copy_step = [&](int stage, int step) {
    const int k0 = (first + step) * kWgmmaK;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      CopyAsync16(a_ring + stage * kATileBytes + a_dst + 4 * kWgmmaAtomBytes * i, a_src[i] + k0, a_ok[i]);
    }
    // q4_K element 64c + 32h + l is nibble h of qs[32c + l]: this step is c = (k0 / 64) % 4.
    const unsigned char* block = w_row + static_cast<long long>(k0 / 256) * 144;
    const unsigned char* codes = block + 16 + 32 * ((k0 / kWgmmaK) % 4);
    const unsigned raw = raw_mine + stage * kRawStageBytes;
    CopyAsync16(raw, block, w_ok);
    CopyAsync16(raw + 16, codes, w_ok);
    CopyAsync16(raw + 32, codes + 16, w_ok);
  };
  // Step `step`'s 64 elements of this thread's row into the B tile (local k
  // 0..31: sub-block 2c's low nibbles; 32..63: 2c + 1's high nibbles).
  auto decode_step = [&](int stage, int step) {
    const int c = (first + step) % 4;
    const unsigned char* raw = wgmma_smem + (raw_mine - SharedAddress(wgmma_smem)) + stage * kRawStageBytes;
    const TileInt8Scales k = UnpackTileInt8Scales(*reinterpret_cast<const uint4*>(raw));
    const unsigned scw = c < 2 ? k.sc03 : k.sc47, mnw = c < 2 ? k.mn03 : k.mn47;
    const int b0 = 2 * (c % 2);  // byte of sub-block 2c in those words
    unsigned scale[2], neg_min[2];  // both lanes alike
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sc = k.d * static_cast<float>((scw >> (8 * (b0 + h))) & 0xFF);
      const float mn = k.dmin * static_cast<float>((mnw >> (8 * (b0 + h))) & 0xFF);
      scale[h] = PackHalf2(sc, sc);
      neg_min[h] = PackHalf2(-mn, -mn);
    }
    unsigned char* b_rows = wgmma_smem + (b_tile - SharedAddress(wgmma_smem));
#pragma unroll
    for (int pair = 0; pair < 4; ++pair) {
      // Codes 8 pair .. 8 pair + 7: their low nibbles are elements 8 pair
      // .., their high ones 32 + 8 pair .. (16-byte chunks pair, 4 + pair).
      const uint2 w = *reinterpret_cast<const uint2*>(raw + 16 + 8 * pair);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<uint4*>(b_rows + WgmmaOffset(tid, 8 * (4 * h + pair))) =
            DecodeQ4KEight(w.x, w.y, 4 * h, scale[h], neg_min[h]);
      }
    }
  };

  float d[64];
  WgmmaStart(d, steps, [&](int s) { copy_step(s, s); });
  constexpr int kAhead = kWgmmaStages - 1;
  for (int step = 0; step < steps; ++step) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kAhead - 1) : "memory");  // this thread's copies of the step are in
    decode_step(step % kWgmmaStages, step);  // the warpgroup's MMAs of the step before are done
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the decoded rows and the copies, seen by the MMAs
    __syncthreads();  // every thread's activation copies are in; every MMA of the step before is done
    const int next = step + kAhead;
    if (next < steps) copy_step(next % kWgmmaStages, next);
    asm volatile("cp.async.commit_group;");
    WgmmaStep(d, a_ring + (step % kWgmmaStages) * kATileBytes, b_tile + wg * kBTileBytes);
    // Each warp waited for its own share of the MMAs; all four read every
    // row of the tile the next decode overwrites.
    asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  WgmmaStoreTile<kEpilogue>(p, d, rows, t0, tile, blockIdx.z);
#endif
}

}  // namespace kiln

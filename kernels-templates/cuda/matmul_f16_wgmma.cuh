// Prefill matmul over f16 weight rows on sm_90a's warpgroup MMA: the
// same tiles, parameters and epilogues as matmul_f16_tc_kernel (128 tokens x
// 128 weight rows per block; silu_mul tiles hold 64 gate rows then the same
// 64 up rows), but each of the two warpgroups issues wgmma m64n128k16 over
// its 64 tokens straight from shared memory, so no ldmatrix or fragment
// shuffling runs on the CUDA cores. Operands sit in shared memory in the
// 128-byte-swizzled K-major layout wgmma reads without bank conflicts: 64
// elements of K per row (128 bytes), 8-row atoms of 1 KB whose 16-byte
// chunks are XOR-permuted by the row. A ring of kWgmmaStages cp.async stages
// (64 of K each) feeds it; each step's MMAs complete before the barrier that
// lets their stage be refilled, and the second block on the SM keeps the
// tensor cores busy meanwhile. With p.k_splits > 1 (grid z) a block takes
// one slice of K and stores its raw sums for matmul_split_sum_kernel.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "mma.cuh"

namespace kiln {

// K per stage (one swizzle atom's width) and stages: 3 x 32 KB, two blocks per SM.
static_assert(kWgmmaK == 64, "one 128-byte swizzle atom of f16 per stage row");
constexpr int kWgmmaAtomBytes = 1024;                                 // 8 rows x 128 bytes
constexpr int kWgmmaOperandBytes = kGemmM / 8 * kWgmmaAtomBytes;      // one operand's tile per stage (16 KB)
static_assert(kGemmM == 128 && kGemmN == 128, "two warpgroups of m64n128");

// Byte offset of (row, element k) of an operand tile: 16-byte chunk k / 8
// of the row's 128 bytes lands at chunk (k / 8) ^ (row % 8).
__device__ __forceinline__ unsigned WgmmaOffset(int row, int k) {
  return (row / 8) * kWgmmaAtomBytes + (row % 8) * 128 + (((k / 8) ^ (row % 8)) * 16) + (k % 8) * 2;
}

// Shared-memory matrix descriptor of a K-major operand in 128-byte swizzle:
// start address and the 8-row atom stride in 16-byte units (the leading
// offset is unused when a row's K fits one atom), swizzle mode 1. Atoms
// must start 1 KB-aligned.
__device__ __forceinline__ unsigned long long WgmmaDescriptor(unsigned smem_addr) {
  return static_cast<unsigned long long>((smem_addr & 0x3FFFF) >> 4) | (1ULL << 16) |
         (static_cast<unsigned long long>(kWgmmaAtomBytes >> 4) << 32) | (1ULL << 62);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous MMAs, which own the registers until their group completes.
__device__ __forceinline__ void WgmmaFenceOperands(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (64 tokens x 128 rows, f32) += A (64 x 16) B (128 x 16)^T.
__device__ __forceinline__ void WgmmaM64N128K16(float (&d)[64], unsigned long long a, unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(1));
}

// One 64-element K step of a warpgroup: d (64 tokens x 128 rows) += the
// operand tiles at a (64 token rows) and b (128 weight rows), both in the
// swizzled layout; returns once the MMAs have completed.
__device__ __forceinline__ void WgmmaStep(float (&d)[64], unsigned a, unsigned b) {
  WgmmaFenceOperands(d);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < kWgmmaK / 16; ++kk) {
    // k16 slice kk starts 32 bytes into each row; the hardware applies the swizzle.
    WgmmaM64N128K16(d, WgmmaDescriptor(a + 32 * kk), WgmmaDescriptor(b + 32 * kk));
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  WgmmaFenceOperands(d);
}
#endif

// The start of a wgmma K walk: zeroed sums, and the ring's first
// kWgmmaStages - 1 stages issued (copy(stage) for those below `steps`), a
// cp.async group each, so the walk can wait for all but the newest.
template <class CopyStage>
__device__ __forceinline__ void WgmmaStart(float (&d)[64], int steps, CopyStage copy) {
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;
#pragma unroll
  for (int s = 0; s < kWgmmaStages - 1; ++s) {
    if (s < steps) copy(s);
    asm volatile("cp.async.commit_group;");
  }
}

// A warpgroup's sums d (tokens token0 .. token0 + 63 by the 128 rows of
// tile `tile`, whose outputs start at tile * GemmTileOutputs): d[4 j + r]
// is token token0 + 16 w + g (+ 8 for r >= 2), tile row 8 j + 2 q + (r &
// 1); silu_mul's up sums sit 64 rows on (j + 8). With p.k_splits > 1 the
// raw sums of all 128 rows go to slice `slice` of p.k_partials, else the
// outputs with the epilogue.
template <int kEpilogue>
__device__ __forceinline__ void WgmmaStoreTile(const MatmulParams& p, const float (&d)[64], int rows, int token0,
                                               int tile, int slice) {
  constexpr int kParts = EpilogueParts(kEpilogue);
  constexpr int kOutputs = kGemmN / kParts;
  const int w = (threadIdx.x % 128) / 32, g = (threadIdx.x % 32) / 4, q = threadIdx.x % 4;
  if (tile * kOutputs >= p.total_n) return;  // a block's second tile past the last
  if (p.k_splits > 1) {
    const int stride = WgmmaPartialStride(p.total_n, kEpilogue);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int token = token0 + 16 * w + g + 8 * h;
        if (token < rows) {
          float* dst = p.k_partials + (static_cast<long long>(slice) * p.max_rows + token) * stride + tile * kGemmN +
                       8 * j + 2 * q;
          *reinterpret_cast<float2*>(dst) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        }
      }
    }
    return;
  }
  const int n0 = tile * kOutputs;
  constexpr int kGroups = 16 / kParts;
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int token = token0 + 16 * w + g + (r >= 2 ? 8 : 0);
      const int out = n0 + 8 * j + 2 * q + (r & 1);
      if (token < rows && out < p.total_n) {
        StoreOutput<kEpilogue>(p, token, out, d[4 * j + r], d[(4 * (j + 8) + r) % 64]);
      }
    }
  }
}

template <int kEpilogue>
__global__ void __launch_bounds__(256, 2) matmul_f16_wgmma_kernel(MatmulParams p) {
  WaitForPrevious();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kParts = EpilogueParts(kEpilogue);
  constexpr int kOutputs = kGemmN / kParts;
  constexpr int kStageBytes = 2 * kWgmmaOperandBytes;
  static_assert(kWgmmaStages * kStageBytes + kWgmmaAtomBytes == WgmmaSmemBytes(), "the host sizes the ring");
  const int rows = *p.rows;
  const int t0 = blockIdx.x * kGemmM;  // token tiles fastest: blocks in flight share weight tiles
  if (t0 >= rows) return;
  const int n0 = blockIdx.y * kOutputs;
  const int tid = threadIdx.x, wg = tid / 128;
  extern __shared__ unsigned char wgmma_smem[];
  const unsigned smem = (SharedAddress(wgmma_smem) + kWgmmaAtomBytes - 1) & ~(kWgmmaAtomBytes - 1);

  // Each thread copies four 16-byte chunks of each operand per stage: chunk
  // tid % 8 of tile rows tid / 8 + 32 i.
  constexpr int kCopies = 4;
  const int copy_chunk = tid % 8;
  const unsigned short* a_src[kCopies];
  const unsigned short* b_src[kCopies];
  bool a_ok[kCopies], b_ok[kCopies];
  unsigned dst[kCopies];
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    const int r = tid / 8 + 32 * i;
    dst[i] = WgmmaOffset(r, copy_chunk * 8);
    const int token = t0 + r;
    a_ok[i] = token < rows;
    a_src[i] = p.x_f16 + static_cast<long long>(a_ok[i] ? token : 0) * p.k + copy_chunk * 8;
    b_src[i] = TileWeightRow<kEpilogue>(p, n0, r, &b_ok[i]) + copy_chunk * 8;
  }
  // This block's slice of the K steps: [first, first + steps).
  const int splits = p.k_splits > 1 ? p.k_splits : 1;  // 0 in parameters that never set it
  const int all_steps = (p.k + kWgmmaK - 1) / kWgmmaK, per = (all_steps + splits - 1) / splits;
  const int first = blockIdx.z * per, steps = min(all_steps - first, per);
  if (first > 0) {
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      a_src[i] += first * kWgmmaK;
      b_src[i] += first * kWgmmaK;
    }
  }
  const int k_end = p.k - first * kWgmmaK;  // K left from the slice's start (copy_step's bound)
  auto copy_step = [&](int stage, int k0) {
    const unsigned base = smem + stage * kStageBytes;
    const bool k_ok = k0 + copy_chunk * 8 < k_end;  // K a multiple of 32: the last stage may be half full
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      CopyAsync16(base + dst[i], a_src[i] + k0, a_ok[i] && k_ok);
      CopyAsync16(base + kWgmmaOperandBytes + dst[i], b_src[i] + k0, b_ok[i] && k_ok);
    }
  };

  float d[64];
  WgmmaStart(d, steps, [&](int s) { copy_step(s, s * kWgmmaK); });
  constexpr int kAhead = kWgmmaStages - 1;
  for (int step = 0; step < steps; ++step) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kAhead - 1));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async's writes, seen by the MMAs' async proxy
    __syncthreads();  // the stage is in; every warpgroup's MMAs of the previous step are done
    const int next = step + kAhead;
    if (next < steps) copy_step(next % kWgmmaStages, next * kWgmmaK);
    asm volatile("cp.async.commit_group;");
    const unsigned base = smem + (step % kWgmmaStages) * kStageBytes;
    WgmmaStep(d, base + wg * (kWgmmaOperandBytes / 2), base + kWgmmaOperandBytes);
  }
  asm volatile("cp.async.wait_group 0;");
  WgmmaStoreTile<kEpilogue>(p, d, rows, t0 + 64 * wg, blockIdx.y, blockIdx.z);
#endif
}

// The slices of matmul_f16_wgmma_kernel's K added in slice order (so the
// result does not depend on which finished first) and the epilogue applied.
// grid (max_rows, ceil(total_n / 256)), 256 threads.
template <int kEpilogue>
__global__ void __launch_bounds__(256) matmul_split_sum_kernel(MatmulParams p) {
  WaitForPrevious();
  const int token = blockIdx.x, out = blockIdx.y * 256 + threadIdx.x;
  if (token >= *p.rows || out >= p.total_n) return;
  const int stride = WgmmaPartialStride(p.total_n, kEpilogue);
  // silu_mul: output o's gate row is tile o / 64's row o % 64, its up row 64 further.
  const int col = kEpilogue == kEpilogueSiluMul ? out / (kGemmN / 2) * kGemmN + out % (kGemmN / 2) : out;
  const float* src = p.k_partials + static_cast<long long>(token) * stride + col;
  const long long slice = static_cast<long long>(p.max_rows) * stride;
  float sum = 0.0f, up = 0.0f;
  for (int z = 0; z < p.k_splits; ++z) {
    sum += src[z * slice];
    if constexpr (kEpilogue == kEpilogueSiluMul) up += src[z * slice + kGemmN / 2];
  }
  StoreOutput<kEpilogue>(p, token, out, sum, up);
}

}  // namespace kiln

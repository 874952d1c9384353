// One-token decode of q8_0 weights streamed through shared memory by the
// bulk copy engine (sm_90's cp.async.bulk, completing on an
// mbarrier). matmul_kernel's decode holds its weight loads in registers, so
// the bytes in flight are what 16 warps of 128 registers can hold while
// they also compute (ncu of gate/up: q4_K's at 48% of DRAM, 45% of the
// time stalled on loads; q8_0's at 52%, spilling); here a ring of kStreamStages
// stages per block keeps that many times kStreamSlices row slices in flight
// whatever the warps are doing, a producer warp issues them (one
// instruction a slice), and the consumer warps wait only for the bytes
// they read. (q4_K stayed on matmul_kernel: streamed, its decode was
// 5-18% slower on the H200, docs/perf/cuda-h200.md, session 11.)
//
// A block walks row groups g = blockIdx.x, + gridDim.x, ... (kStreamSlices
// weight rows each, or half as many gate and up row pairs of silu_mul), each
// in chunks of kStreamChunk elements of K; stage j of the ring holds one
// (group, chunk): per slice the chunk's whole blocks of one row. Consumer
// warp w takes the slices w n .. w n + n - 1 (n = slices / kMatmulWarps:
// rows, or gate and up rows of n / 2 outputs) and dots them with the
// activations, staged once as int8 codes as for matmul_kernel's decode,
// through the same int8 lane (LaneQ8_0Int8: same arithmetic, same results),
// each step's activations loaded once for its n rows.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "matmul_lanes.cuh"
#include "mma.cuh"

namespace kiln {

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void MbarrierInit(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void MbarrierArrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// One arrival that also expects `bytes` from copies completing on the barrier.
__device__ __forceinline__ void MbarrierArriveExpect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void MbarrierWait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared,
// completing on `bar`.
__device__ __forceinline__ void BulkCopy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
#endif

// The int8 lane of a storage with a stream kernel, in the stream kernel's
// terms: a consumer lane's Pos (what stays the same over its steps: a
// step's kStepElems cover 32 lanes x the lane's elements), its activations
// and raw bytes of step t of a chunk at c0, and the dot. (A storage whose
// lane step is not a warp's 2048 elements would take a Pos of more.)
template <class S>
struct StreamLaneOf;
template <>
struct StreamLaneOf<StorageQ8_0> {
  using Lane = LaneQ8_0Int8;
  static constexpr int kStepElems = 32 * Lane::kLane;  // a pair of blocks a lane
  struct Pos {
    unsigned first;  // the lane's first element in a step
  };
  __device__ static Pos PosOf(int lane) { return {static_cast<unsigned>(Lane::kLane * lane)}; }
  __device__ static Lane::X LoadX(unsigned c0, int t, const Pos& k, const float* xs, int xstride, const float* sums) {
    return Lane::LoadX(c0 + t * kStepElems + k.first, xs, xstride, sums);
  }
  __device__ static Lane::Raw Raw(const unsigned char* slice, int t, const Pos& k) {
    const unsigned* w = reinterpret_cast<const unsigned*>(slice + (t * kStepElems + k.first) / 32 * 34);
    Lane::Raw r;
#pragma unroll
    for (int i = 0; i < 17; ++i) r.w[i] = w[i];
    return r;
  }
  __device__ static void Dot(const Lane::Raw& r, const Pos&, const Lane::X& x, float& acc) { Lane::DotX(r, 0u, x, acc); }
};

// grid (<= groups), kStreamThreads threads (kMatmulWarps consumer warps and
// a producer), StreamSmemBytes(k, slice bytes) of dynamic shared memory; K
// a multiple of 256.
template <class S, int kEpilogue, bool kNorm>
__global__ void __launch_bounds__(kStreamThreads, kStreamBlocksPerSm) matmul_stream_kernel(MatmulParams p) {
#if __CUDA_ARCH__ >= 900
  static_assert(kStreamThreads == 32 * (kMatmulWarps + 1), "consumer warps and a producer");
  using Stream = StreamLaneOf<S>;
  using Lane = typename Stream::Lane;
  constexpr int kChunk = kStreamChunk, kSlices = kStreamSlices, kStages = kStreamStages;
  constexpr int kSliceBytes = StreamSliceBytes(S::kBlockElems, S::kBlockBytes), kStageBytes = kSlices * kSliceBytes;
  constexpr int kMine = kSlices / kMatmulWarps;  // slices per consumer warp
  constexpr int kSteps = kChunk / Stream::kStepElems;
  constexpr int kParts = EpilogueParts(kEpilogue);
  constexpr int kOutputs = kSlices / kParts;  // outputs per row group
  static_assert(kSlices <= 32 && kMine % 2 == 0 && kChunk % Stream::kStepElems == 0, "the ring's shape");
  extern __shared__ float4 stream_smem[];
  unsigned char* ring = reinterpret_cast<unsigned char*>(stream_smem);
  // The activations after the ring: int8 codes, scales and residuals in a
  // token stride of K / 2 floats (see Int8CodeIndex), then the sums per 16.
  float* xs = reinterpret_cast<float*>(ring + kStages * kStageBytes);
  const int xstride = p.k / 2;
  float* sums = xs + xstride;
  // full: a stage's copies landed; empty: every consumer warp is done with it.
  __shared__ unsigned long long full[kStages], empty[kStages];
  __shared__ float inv_rms[1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int chunks = (p.k + kChunk - 1) / kChunk;
  const int groups = (p.total_n + kOutputs - 1) / kOutputs;
  const int mine = static_cast<int>(blockIdx.x) < groups ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int stages = mine * chunks;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(SharedAddress(&full[s]), 1);
      MbarrierInit(SharedAddress(&empty[s]), kMatmulWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // The output slice `slice` of row group g serves (it exists below total_n).
  auto output_of = [&](int g, int slice) { return g * kOutputs + slice / kParts; };

  if (warp == kMatmulWarps) {
    // The producer: stage j's copies into slot j % kStages, lane i <
    // kSlices copying slice i's chunk of its row, once the consumers
    // are done with the slot's previous stage. It reads only weights and
    // writes only this block's shared memory, so the ring's first round is
    // under way before the launch before this one has ended (the consumers
    // wait for it, WaitForPrevious); its last copies let the next launch start.
    for (int j = 0; j < stages; ++j) {
      const int g = blockIdx.x + (j / chunks) * gridDim.x, c0 = (j % chunks) * kChunk;
      const unsigned bytes = static_cast<unsigned>(min(kChunk, p.k - c0) / S::kBlockElems * S::kBlockBytes);
      const int out = output_of(g, lane);
      const bool copies = lane < kSlices && out < p.total_n;
      const unsigned slices = __popc(__ballot_sync(0xffffffffu, copies));
      if (j >= kStages) {
        MbarrierWait(SharedAddress(&empty[j % kStages]), (j / kStages - 1) & 1);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the consumers' reads, then the copy's writes
      }
      const unsigned bar = SharedAddress(&full[j % kStages]);
      if (lane == 0) MbarrierArriveExpect(bar, slices * bytes);
      __syncwarp();
      if (copies) {
        int wi, row;
        WeightRowOf<kEpilogue>(p, out, &wi, &row);
        const unsigned char* src = WeightRow(p, wi + lane % kParts, row) +
                                   c0 / S::kBlockElems * S::kBlockBytes;
        BulkCopy(SharedAddress(ring + (j % kStages) * kStageBytes + lane * kSliceBytes), src, bytes, bar);
      }
      if (j == stages - 1) LetNextLaunch();
      // The consumers' two (three with the norm) barriers below, after the
      // ring's first round is under way.
      if (j == min(kStages, stages) - 1) {
        if constexpr (kNorm) __syncthreads();
        __syncthreads();
        __syncthreads();
      }
    }
    if (stages == 0) {
      if constexpr (kNorm) __syncthreads();
      __syncthreads();
      __syncthreads();
    }
    return;
  }

  // The consumers. Meanwhile: 1/rms and the activations, staged whole.
  WaitForPrevious();
  if constexpr (kNorm) InverseRms<1>(p, 0, 1, inv_rms);  // (one barrier inside)
  __syncthreads();
  StageTokens<1, kNorm>(p, 0, 1, 0, p.k, inv_rms, true, xs, xstride, sums, 0);
  __syncthreads();

  const typename Stream::Pos pos = Stream::PosOf(lane);
  float acc[kMine];
#pragma unroll
  for (int r = 0; r < kMine; ++r) acc[r] = 0.0f;
  for (int j = 0; j < stages; ++j) {
    const int g = blockIdx.x + (j / chunks) * gridDim.x, c = j % chunks, c0 = c * kChunk;
    const int len = min(kChunk, p.k - c0);
    bool live[kMine];
#pragma unroll
    for (int r = 0; r < kMine; ++r) live[r] = output_of(g, kMine * warp + r) < p.total_n;
    MbarrierWait(SharedAddress(&full[j % kStages]), (j / kStages) & 1);
    const unsigned char* slot = ring + (j % kStages) * kStageBytes + kMine * warp * kSliceBytes;
    // Each step's activations once, then its rows' bytes and dots.
#pragma unroll
    for (int t = 0; t < kSteps; ++t) {
      if (t * Stream::kStepElems + static_cast<int>(pos.first) >= len) continue;
      const typename Lane::X x = Stream::LoadX(c0, t, pos, xs, xstride, sums);
#pragma unroll
      for (int r = 0; r < kMine; ++r) {
        if (live[r]) Stream::Dot(Stream::Raw(slot + r * kSliceBytes, t, pos), pos, x, acc[r]);
      }
    }
    __syncwarp();
    if (lane == 0) MbarrierArrive(SharedAddress(&empty[j % kStages]));
    if (c == chunks - 1) {
#pragma unroll
      for (int r = 0; r < kMine; ++r) acc[r] = WarpSum(acc[r]);
      if (lane == 0 && *p.rows >= 1) {
#pragma unroll
        for (int r = 0; r < kMine; r += kParts) {
          if (!live[r]) continue;
          const int out = output_of(g, kMine * warp + r);
          if constexpr (kEpilogue == kEpilogueSiluMul) {
            p.y[0][out] = Silu(acc[r]) * acc[r + 1];
          } else {
            int wi, row;
            WeightRowOf<kEpilogue>(p, out, &wi, &row);
            float v = acc[r];
            if constexpr (kEpilogue == kEpilogueResidualAdd) v += p.residual[row];
            Pick(p.y, wi)[row] = v;
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kMine; ++r) acc[r] = 0.0f;
    }
  }
#endif
}

}  // namespace kiln

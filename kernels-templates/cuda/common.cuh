// Small device helpers every kernel template uses: warp reductions, 8-float
// loads, SiLU, rotary embedding and the sequence of a token.
#pragma once

#include "kernel_abi.h"

namespace kiln {

using namespace cuda_abi;

// Programmatic dependent launch (sm_90; no-ops before it, and where the
// runtime launched without it): a launch may start while the one before it
// ends, so every kernel calls WaitForPrevious before it reads or writes
// anything another launch touches (activations, KV, counters), on every path
// of every block: then a grid's completion still implies its predecessors'.
// Only reads of what no launch writes may come before it: weights, and the
// step's inputs (counts, positions, block tables), copied before the graph's
// first launch started.
// LetNextLaunch lets the next launch's blocks take the SM slots that this
// launch's blocks leave; kernels call it once their blocks have issued
// their last weight loads (a kernel that never calls it lets the next one
// start as its last block leaves).
__device__ __forceinline__ void WaitForPrevious() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void LetNextLaunch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Whether this block is the last of `expected` to count at `counter` (the
// last resets it: the graph replays), with every counted block's stores
// visible to it (read them past L1: __ldcg). The threads meet at a barrier,
// then one of them counts with an acquire-release atomic, which orders what
// the barrier ordered before it (a block's stores) before the count, and the
// counted blocks' stores before what follows the second barrier: one memory
// operation a block, no fence.
__device__ __forceinline__ bool LastBlockToCount(unsigned* counter, unsigned expected) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
    last = before == expected - 1;
    if (last) *counter = 0;
  }
  __syncthreads();
  return last;
}
__device__ __forceinline__ void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double WarpSumDouble(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Eight floats at p: two 16-byte loads where aligned.
__device__ __forceinline__ void LoadFloat8(const float* p, float* y) {
  if ((reinterpret_cast<unsigned long long>(p) & 15) == 0) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    y[0] = a.x; y[1] = a.y; y[2] = a.z; y[3] = a.w; y[4] = b.x; y[5] = b.y; y[6] = b.z; y[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = p[i];
  }
}

// x / (1 + e^-x), as the CPU backend computes it (no fast-math exp).
__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

// cos and sin of pair i's angle at position pos (the runtime's table).
__device__ __forceinline__ void RopeAngle(const RopeConstants& r, int pos, int i, float* c, float* s) {
  const float2 cs = reinterpret_cast<const float2*>(r.table)[static_cast<long long>(pos) * (r.dims / 2) + i];
  *c = cs.x;
  *s = cs.y;
}

// Element d of one head vector `x` after rotary embedding at position pos.
__device__ __forceinline__ float RopeElement(const RopeConstants& r, const float* x, int d, int pos) {
  if (d >= r.dims) return x[d];
  const int pairs = r.dims / 2;
  int i, a, b;
  if (r.half_style) {
    i = d < pairs ? d : d - pairs;
    a = i;
    b = i + pairs;
  } else {
    i = d / 2;
    a = 2 * i;
    b = a + 1;
  }
  float c, s;
  RopeAngle(r, pos, i, &c, &s);
  const float x0 = x[a], x1 = x[b];
  return d == a ? __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)) : __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

// The sequence holding token t: query_starts[s] <= t < query_starts[s + 1].
__device__ __forceinline__ int SequenceOf(const int* query_starts, int seqs, int t) {
  int lo = 0, hi = seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_starts[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

}  // namespace kiln

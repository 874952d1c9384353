// Row-wise kernels: element-wise ops, RMS norm, embedding lookup, row
// gather, argmax and standalone rotary embedding. Each reads its row count
// from the device (the step's T or R), so one graph serves every batch up to
// its bucket.
#pragma once

#include "common.cuh"
#include "storage.cuh"

namespace kiln {

// Grid-stride over rows * width elements.
__global__ void elementwise_kernel(ElementwiseParams p) {
  WaitForPrevious();
  const long long total = static_cast<long long>(*p.rows) * p.width;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float a = p.a[i];
    float v;
    switch (p.op) {
      case kSilu: v = Silu(a); break;
      case kMul: v = a * p.b[i]; break;
      case kAdd: v = a + p.b[i]; break;
      case kBiasAdd: v = a + p.b[i % p.width]; break;
      default: v = Silu(a) * p.b[i]; break;
    }
    p.y[i] = v;
  }
}

// One block per row; the sum of squares in double, as the CPU does.
__global__ void __launch_bounds__(256) rms_norm_kernel(RmsNormParams p) {
  WaitForPrevious();
  const int t = blockIdx.x;
  if (t >= *p.rows) return;
  const float* x = p.x + static_cast<long long>(t) * p.width;
  double sum = 0;
  for (int i = threadIdx.x; i < p.width; i += blockDim.x) sum += static_cast<double>(x[i]) * x[i];
  __shared__ double partial[8];
  sum = WarpSumDouble(sum);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += partial[w];
  const float scale = static_cast<float>(1.0 / sqrt(total / static_cast<double>(p.width) + p.eps));
  float* y = p.y + static_cast<long long>(t) * p.width;
  for (int i = threadIdx.x; i < p.width; i += blockDim.x) y[i] = __fmul_rn(__fmul_rn(x[i], scale), p.gamma[i]);
}

// One block per token: decodes its table row. A token outside the table
// writes NaNs (the host validated tokens; this only guards memory).
template <class S>
__global__ void __launch_bounds__(256) embedding_kernel(EmbeddingParams p) {
  WaitForPrevious();
  const int t = blockIdx.x;
  if (t >= *p.rows) return;
  const int token = p.tokens[t];
  float* y = p.y + static_cast<long long>(t) * p.width;
  if (token < 0 || token >= p.vocab) {
    for (int i = threadIdx.x; i < p.width; i += blockDim.x) y[i] = __int_as_float(0x7fc00000);
    return;
  }
  const unsigned char* row = p.table + static_cast<long long>(token) * p.row_bytes;
  const int chunks = p.width / 8;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const int e = c * 8;
    float v[8];
    S::Decode8(row + (e / S::kBlockElems) * S::kBlockBytes, e % S::kBlockElems, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[e + i] = v[i];
  }
  for (int e = chunks * 8 + threadIdx.x; e < p.width; e += blockDim.x) y[e] = DecodeElement<S>(row, e);
}

__global__ void __launch_bounds__(256) gather_rows_kernel(GatherRowsParams p) {
  WaitForPrevious();
  const int r = blockIdx.x;
  if (r >= *p.count) return;
  const float* x = p.x + static_cast<long long>(p.indices[r]) * p.width;
  float* y = p.y + static_cast<long long>(r) * p.width;
  for (int i = threadIdx.x; i < p.width; i += blockDim.x) y[i] = x[i];
}

// One block of kArgmaxThreads per row; ties keep the first index, as the
// CPU does. 16-byte loads, four in flight a thread: with 256 threads and one
// load at a time a 128256-logit row took 190 us on the H200, 7% of a decode step.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(ArgmaxParams p) {
  WaitForPrevious();
  const int t = blockIdx.x;
  if (t >= *p.rows) return;
  const float* x = p.x + static_cast<long long>(t) * p.width;
  float best = -__int_as_float(0x7f800000);
  int index = 0x7fffffff;
  // Each thread's elements in increasing order, so `>` keeps its first maximum.
  auto take = [&](float v, int i) {
    if (v > best) {
      best = v;
      index = i;
    }
  };
  if (p.width % 4 == 0 && (reinterpret_cast<unsigned long long>(x) & 15) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
    for (int i = threadIdx.x; i < p.width / 4; i += blockDim.x) {
      const float4 v = x4[i];
      take(v.x, 4 * i);
      take(v.y, 4 * i + 1);
      take(v.z, 4 * i + 2);
      take(v.w, 4 * i + 3);
    }
  } else {
    for (int i = threadIdx.x; i < p.width; i += blockDim.x) take(x[i], i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, index, o);
    if (ob > best || (ob == best && oi < index)) {
      best = ob;
      index = oi;
    }
  }
  __shared__ float wb[kArgmaxThreads / 32];
  __shared__ int wi[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) {
    wb[threadIdx.x / 32] = best;
    wi[threadIdx.x / 32] = index;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
    if (wb[w] > best || (wb[w] == best && wi[w] < index)) {
      best = wb[w];
      index = wi[w];
    }
  }
  p.y[t] = index == 0x7fffffff ? 0 : index;
}

// One block per token; y may alias x (each block reads its row before writing).
__global__ void __launch_bounds__(256) rope_kernel(RopeParams p) {
  WaitForPrevious();
  const int t = blockIdx.x;
  if (t >= *p.rows) return;
  const int width = p.num_heads * p.head_dim;
  extern __shared__ float row[];
  const float* x = p.x + static_cast<long long>(t) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) row[i] = x[i];
  __syncthreads();
  float* y = p.y + static_cast<long long>(t) * width;
  const int pos = p.positions[t];
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const int h = i / p.head_dim, d = i % p.head_dim;
    y[i] = RopeElement(p.rope, row + h * p.head_dim, d, pos);
  }
}

}  // namespace kiln

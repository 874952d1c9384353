// y[T, N] = x[T, K] · W[N, K]^T for a weight in any storage the CPU kernels
// read (weight_storage.h). Each weight row is decoded block by block inside
// its dot products; the matrix is never dequantised as a whole. Rows are
// spread over the thread pool; each output element is computed by the same
// instructions whatever the thread count, the partition or T, so results are
// bitwise identical across thread counts and between a decode step and a
// prefill containing the same token row.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/cpu/weight_storage.h"

namespace kiln::cpu {

// The kernel Matmul runs for `storage` when asked for `requested`: AVX2 where
// both the CPU and the storage have it (f32, f16, bf16, the legacy blocks, the
// k-quants, int4, int2), scalar otherwise.
CpuIsa MatmulIsa(const WeightStorage& storage, CpuIsa requested);

// How the activations enter a matmul over quantised weights. kInt8: where
// AVX2 has an integer kernel for the storage (q8_dot.h: q8_0, q4_0, q4_1,
// q5_0, q5_1, q4_K, q5_K, q6_K), x is quantised to int8 per 32 elements
// first, as llama.cpp's CPU path does (several times faster; relative error
// ~1e-3). kF32: always the f32 kernels (the reference the GPU backends are
// checked against).
enum class Activations { kF32, kInt8 };

// x: [tokens, w.cols] row-major; y: [tokens, w.rows] row-major (not aliasing
// x). Errors: unsupported storage, cols not whole blocks, negative sizes, a
// null buffer with a non-empty shape.
absl::Status Matmul(const float* x, int64_t tokens, const WeightMatrix& w, float* y,
                    ThreadPool& pool, CpuIsa isa = DetectCpuIsa(), Activations activations = Activations::kF32);

}  // namespace kiln::cpu

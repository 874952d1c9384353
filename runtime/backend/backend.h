// Picks the backend that runs a program: the one asked for, or with "auto"
// the fastest one present (cuda, then vulkan, then cpu), and says which and
// why, so a user never wonders where their model ran.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/program.h"

namespace kiln {

struct BackendOptions {
  std::string backend = "auto";  // auto | cpu | cuda | vulkan
  int device = 0;                // GPU index for cuda / vulkan
  int threads = 0;               // cpu: 0 = all cores
  int64_t num_pages = 0;         // KV pages; 0 = sized by the fractions below
  // With num_pages 0: the KV pool takes this fraction of the memory left free
  // by the backend's other allocations (GPU: device memory; cpu: available
  // RAM), at most max_kv_pages pages (0: no cap). A fraction of 0: one
  // context's pages (the plan's max_tokens).
  double gpu_kv_fraction = 0;
  double cpu_kv_fraction = 0;
  int64_t max_kv_pages = 0;
};

struct SelectedBackend {
  std::unique_ptr<Executor> executor;
  // Why this backend, when "auto" passed over others: "no CUDA driver
  // (libcuda.so.1 not found); the artifact has no vulkan kernels".
  std::string reason;
};

// An explicit backend that cannot run (no driver, no kernels of its target in
// the program, wrong SM) is an error that says why; "auto" falls back.
absl::StatusOr<SelectedBackend> CreateExecutor(const Program& program, const BackendOptions& options);

// Compiles a program's kernels for a codegen target ("cuda:sm_90", "vulkan"):
// codegen, which only a kiln built with the compiler links.
using KernelCompiler = absl::StatusOr<std::vector<uint8_t>> (*)(const Program& program, const std::string& target);

// As above, for a model compiled in memory: where a GPU backend that would be
// tried lacks kernels and its device is here, `compile` makes them for that
// device (added to program.kernels) before the backend starts. Only the
// backend that runs compiles: "auto" stops at the first GPU that starts.
absl::StatusOr<SelectedBackend> CreateExecutor(Program& program, const BackendOptions& options,
                                               KernelCompiler compile);

// A device's two ceilings, measured by a probe on it (`kiln bench --probe`):
// copy bandwidth (bytes read + written per second) and matrix FLOP/s.
struct Ceilings {
  double bytes_per_second = 0;
  double flops_per_second = 0;
  std::string what;  // how they were measured: "device-to-device copy 4 GiB; f16 mma GEMM 8192^3"
};

// Probes the device `executor` runs on (the same backend and device).
absl::StatusOr<Ceilings> ProbeCeilings(const Executor& executor, const BackendOptions& options);

// For `kiln inspect`: what a kernels section holds (each module or kernel
// with its template, constants, size and resource use), one line each.
std::string DescribeKernelBundle(const std::string& target, std::span<const uint8_t> bytes);

}  // namespace kiln

// The CPU's ceilings, measured: memory bandwidth (a large buffer read by
// every thread at once, as a decode step streams its weights) and the
// arithmetic peak of every thread at once
// for the matmuls' instructions, f32 FMAs and the integer kernel's
// multiply-adds (peak.h). `kiln bench --probe` prints the CPU backend's
// figures against these.
#pragma once

#include "absl/status/statusor.h"
#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {

struct CpuCeilings {
  double bytes_per_second = 0;
  double f32_flops_per_second = 0;  // 256-bit FMAs
  double int8_ops_per_second = 0;   // the best integer kernel's multiply-adds; 0 without one
  Q8Kernel int8_kernel = Q8Kernel::kAvx2;
};

absl::StatusOr<CpuCeilings> ProbeCpuCeilings(ThreadPool& pool);

}  // namespace kiln::cpu

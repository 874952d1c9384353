// The CPU's two ceilings, measured: memory bandwidth (a large parallel copy,
// bytes read plus written) and the f32 matmul rate of kiln's own kernel.
// `kiln bench --probe` prints the CPU backend's figures against these.
#pragma once

#include "absl/status/statusor.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {

struct CpuCeilings {
  double bytes_per_second = 0;
  double flops_per_second = 0;
};

absl::StatusOr<CpuCeilings> ProbeCpuCeilings(ThreadPool& pool);

}  // namespace kiln::cpu

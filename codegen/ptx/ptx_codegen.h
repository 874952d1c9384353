// The CUDA branch of codegen: every kernel a plan needs on target
// "cuda:sm_NN", compiled ahead of time into one module, as the bytes of the
// artifact's kernels section (runtime/cuda/cuda_bundle.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/plan.h"

namespace kiln::codegen::ptx {

absl::StatusOr<std::vector<uint8_t>> GenerateCudaKernels(const Plan& plan, const std::string& target);

}  // namespace kiln::codegen::ptx

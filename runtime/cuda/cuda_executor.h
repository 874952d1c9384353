// Runs a plan on an NVIDIA GPU with the kernels codegen compiled ahead of
// time (the program's "cuda:sm_NN" kernels section). Weights, the f32 KV
// page pool, the activation arena and the step inputs live in one device
// allocation. Each batch bucket's launches are captured once into a CUDA
// graph (on its first step) and replayed: a step is one async copy of the
// inputs from pinned memory, one graph launch and one copy of the R logit
// rows back.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/program.h"

namespace kiln::cuda {

// Unavailable (with the reason) when there is no driver, no such device,
// no cuda kernels in the program, or kernels for an SM this GPU cannot run.
absl::StatusOr<std::unique_ptr<Executor>> CreateCudaExecutor(const Program& program, const BackendOptions& options);

// The codegen target ("cuda:sm_90") whose kernels run on options.device, for a
// model compiled in memory: the GPU's own SM where codegen has it, else
// sm_80's PTX (JIT-compiled by the driver). Unavailable without a driver or
// device, or below sm_80.
absl::StatusOr<std::string> CudaTargetOfDevice(const BackendOptions& options);

}  // namespace kiln::cuda

namespace kiln {
using cuda::CreateCudaExecutor;
}  // namespace kiln

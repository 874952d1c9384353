// The Vulkan backend: runs a plan with the SPIR-V kernels that codegen put in
// the artifact. At load it creates one pipeline per kernel instance, places
// weights, KV pages, the activation arena and a host-visible io buffer in a
// few large allocations, and records one command buffer per batch bucket
// with its descriptor sets and push constants. A step only writes the step's
// inputs into the io buffer, submits the bucket's command buffer, waits on a
// fence and copies out the R logit rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/plan.h"
#include "runtime/executor/program.h"

namespace kiln::vulkan {

struct VulkanExecutorOptions {
  int device = 0;          // index among the devices the loader lists
  int64_t num_pages = 0;   // KV pages; 0 = what the plan's context needs
  // With num_pages 0 and a fraction: that fraction of the device-local heap's
  // free memory once the weights are uploaded, at most max_kv_pages.
  double kv_fraction = 0;
  int64_t max_kv_pages = 0;
  // Tests: fill the arena with NaN before every step, so a kernel that skips
  // an output element shows up as NaN instead of last step's value.
  bool poison_arena = false;
  // `--backend auto`: a CPU implementation of Vulkan (lavapipe) is
  // Unavailable, since the CPU executor is faster than emulated dispatches.
  bool skip_cpu_devices = false;
  // Attention's most splits of a decode step's context (1 to 64); 0: 64 on
  // a GPU, 4 on a CPU implementation, which pays for every workgroup
  // (tests set 64 there to cover the GPU's merge).
  int64_t max_attention_splits = 0;
};

// Unavailable (with the reason) when there is no loader, no such device or
// no compute queue with subgroup arithmetic; other errors for a bad bundle
// (kernels missing for a launch) or when memory runs out.
absl::StatusOr<std::unique_ptr<Executor>> CreateVulkanExecutor(const Plan& plan, const WeightSource& weights,
                                                               std::span<const uint8_t> bundle,
                                                               const VulkanExecutorOptions& options);

// The backend table's entry: the program's "vulkan" kernels on BackendOptions::device.
absl::StatusOr<std::unique_ptr<Executor>> CreateVulkanExecutor(const Program& program, const BackendOptions& options);

// "vulkan" where options.device opens, for a model compiled in memory;
// Unavailable without a loader or device, and under "auto" for a CPU
// implementation of Vulkan (lavapipe), which the CPU executor outruns.
absl::StatusOr<std::string> VulkanTargetOfDevice(const BackendOptions& options);

}  // namespace kiln::vulkan

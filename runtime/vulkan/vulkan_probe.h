// `kiln bench --probe` for the Vulkan backend: the device's memory bandwidth
// (a compute-shader copy), what a step pays at a dispatch boundary and at a
// device-wide barrier inside a dispatch, and, where the device has
// workgroup-scope cooperative matrices, a matmul's FLOP/s.
#pragma once

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"

namespace kiln::vulkan {

// The ceilings of BackendOptions::device; `what` says how each was measured
// and carries the boundary figures (us), which are no ceiling but the fixed
// cost a step's launches pay.
absl::StatusOr<Ceilings> ProbeVulkanCeilings(const BackendOptions& options);

}  // namespace kiln::vulkan

// `kiln bench --probe` for the Vulkan backend: the device's memory bandwidth,
// measured with device-to-device buffer copies.
#pragma once

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"

namespace kiln::vulkan {

// Bandwidth of BackendOptions::device from timed vkCmdCopyBuffer between two
// device-local buffers (bytes read + written per second). No FLOP figure: the
// runtime carries no compute kernel of its own to time (flops_per_second 0).
absl::StatusOr<Ceilings> ProbeVulkanCeilings(const BackendOptions& options);

}  // namespace kiln::vulkan

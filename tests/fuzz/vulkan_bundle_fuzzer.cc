// Feeds arbitrary bytes to the Vulkan kernels-section parser: it must refuse
// or accept without crashing, and whatever it accepts must serialize back to
// the same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/vulkan/vulkan_bundle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  absl::StatusOr<std::vector<kiln::vulkan::SpirvModule>> modules = kiln::vulkan::ParseBundle(bytes);
  (void)kiln::vulkan::DescribeBundle(bytes);
  if (!modules.ok()) return 0;
  const std::vector<uint8_t> written = kiln::vulkan::SerializeBundle(*modules);
  if (written.size() != size || !std::equal(written.begin(), written.end(), data)) __builtin_trap();
  return 0;
}

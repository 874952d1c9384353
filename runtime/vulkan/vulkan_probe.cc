#include "runtime/vulkan/vulkan_probe.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "runtime/vulkan/vulkan_device.h"

namespace kiln::vulkan {

absl::StatusOr<Ceilings> ProbeVulkanCeilings(const BackendOptions& options) {
  VulkanDevice dev;
  if (absl::Status s = dev.Open(options.device); !s.ok()) return s;
  // The largest pair of buffers the device gives us, from 1 GiB down.
  Buffer a, b;
  VkDeviceSize size = VkDeviceSize{1} << 30;
  for (; size >= (VkDeviceSize{16} << 20); size /= 4) {
    absl::StatusOr<Buffer> x = dev.CreateBuffer(size, false, "probe source");
    if (!x.ok()) continue;
    absl::StatusOr<Buffer> y = dev.CreateBuffer(size, false, "probe destination");
    if (!y.ok()) {
      dev.DestroyBuffer(*x);
      continue;
    }
    a = *x;
    b = *y;
    break;
  }
  if (a.buffer == VK_NULL_HANDLE) return absl::ResourceExhaustedError("vulkan probe: no room for two 16 MiB buffers");
  constexpr int kCopies = 8;
  const VkBufferCopy region{0, 0, size};
  auto copies = [&](int n) {
    return dev.RunOnce([&](VkCommandBuffer cb) {
      for (int i = 0; i < n; ++i) {
        dev.api().vkCmdCopyBuffer(cb, i % 2 ? b.buffer : a.buffer, i % 2 ? a.buffer : b.buffer, 1, &region);
        VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        dev.api().vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                                       nullptr, 0, nullptr);
      }
    });
  };
  absl::Status s = copies(1);  // first touch of the memory, driver warm-up
  const auto start = std::chrono::steady_clock::now();
  if (s.ok()) s = copies(kCopies);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  dev.DestroyBuffer(a);
  dev.DestroyBuffer(b);
  if (!s.ok()) return s;
  Ceilings c;
  c.bytes_per_second = 2.0 * static_cast<double>(size) * kCopies / seconds;
  c.what = absl::StrFormat("%s: device-to-device copy %d MiB x %d (no FLOP probe on Vulkan)", dev.description(),
                           size >> 20, kCopies);
  return c;
}

}  // namespace kiln::vulkan

#include "runtime/vulkan/vulkan_probe.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "runtime/vulkan/vulkan_device.h"

namespace kiln::vulkan {
namespace {

// bandwidth_probe.comp compiled to SPIR-V (see that file).
constexpr uint32_t kCopySpirv[] = {
#include "runtime/vulkan/bandwidth_probe_spirv.inc"
};
constexpr uint32_t kCopyThreads = 256;  // local_size_x of bandwidth_probe.comp

// The copy pipeline and its one descriptor set over (src, dst), destroyed with it.
class CopyPipeline {
 public:
  explicit CopyPipeline(VulkanDevice& dev) : dev_(dev) {}
  ~CopyPipeline() {
    const VulkanApi& api = dev_.api();
    if (pipeline_ != VK_NULL_HANDLE) api.vkDestroyPipeline(dev_.device(), pipeline_, nullptr);
    if (pool_ != VK_NULL_HANDLE) api.vkDestroyDescriptorPool(dev_.device(), pool_, nullptr);
    if (layout_ != VK_NULL_HANDLE) api.vkDestroyPipelineLayout(dev_.device(), layout_, nullptr);
    if (set_layout_ != VK_NULL_HANDLE) api.vkDestroyDescriptorSetLayout(dev_.device(), set_layout_, nullptr);
  }

  absl::Status Create(const Buffer& src, const Buffer& dst) {
    if (absl::Status s = dev_.CreateComputeLayouts(2, sizeof(uint32_t), &set_layout_, &layout_); !s.ok()) return s;
    absl::StatusOr<VkPipeline> pipeline = dev_.CreateComputePipeline(kCopySpirv, "main", layout_, "of the probe");
    if (!pipeline.ok()) return pipeline.status();
    pipeline_ = *pipeline;

    absl::StatusOr<VkDescriptorPool> pool = dev_.CreateDescriptorPool(1, 2);
    if (!pool.ok()) return pool.status();
    pool_ = *pool;
    absl::StatusOr<VkDescriptorSet> set = dev_.AllocateDescriptorSet(pool_, set_layout_);
    if (!set.ok()) return set.status();
    set_ = *set;
    const VkDescriptorBufferInfo infos[2] = {{src.buffer, 0, src.size}, {dst.buffer, 0, dst.size}};
    dev_.WriteStorageBuffers(set_, infos);
    return absl::OkStatus();
  }

  // `n` copies of `vectors` 16-byte vectors, a barrier between copies.
  void Record(VkCommandBuffer cb, uint32_t vectors, int n) const {
    const VulkanApi& api = dev_.api();
    api.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_);
    api.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout_, 0, 1, &set_, 0, nullptr);
    api.vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(vectors), &vectors);
    // Enough workgroups to fill any GPU; each thread loops over the rest.
    const uint32_t groups = std::clamp<uint32_t>(vectors / kCopyThreads, 1, 8192);
    for (int i = 0; i < n; ++i) {
      api.vkCmdDispatch(cb, groups, 1, 1);
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      api.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                               &mb, 0, nullptr, 0, nullptr);
    }
  }

 private:
  VulkanDevice& dev_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkDescriptorSet set_ = VK_NULL_HANDLE;
};

}  // namespace

absl::StatusOr<Ceilings> ProbeVulkanCeilings(const BackendOptions& options) {
  VulkanDevice dev;
  if (absl::Status s = dev.Open(options.device); !s.ok()) return s;
  // The largest pair of buffers the device gives us, from 1 GiB down (a
  // 16-byte vector count must fit the shader's 32-bit index).
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
  // A compute-shader copy, as the kernels move memory: vkCmdCopyBuffer may run
  // on a copy engine well below the memory's bandwidth (840 GB/s against 4.2
  // TB/s on an H200 with NVIDIA's driver).
  constexpr int kCopies = 8;
  absl::Status s;
  double seconds = 0;
  {
    CopyPipeline copy(dev);
    s = copy.Create(a, b);
    const uint32_t vectors = static_cast<uint32_t>(size / 16);
    if (s.ok()) s = dev.RunOnce([&](VkCommandBuffer cb) { copy.Record(cb, vectors, 1); });  // first touch, warm-up
    const auto start = std::chrono::steady_clock::now();
    if (s.ok()) s = dev.RunOnce([&](VkCommandBuffer cb) { copy.Record(cb, vectors, kCopies); });
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  dev.DestroyBuffer(a);
  dev.DestroyBuffer(b);
  if (!s.ok()) return s;
  Ceilings c;
  c.bytes_per_second = 2.0 * static_cast<double>(size) * kCopies / seconds;
  c.what = absl::StrFormat("%s: compute-shader copy %d MiB x %d, bytes read + written (no FLOP probe on Vulkan)",
                           dev.description(), size >> 20, kCopies);
  return c;
}

}  // namespace kiln::vulkan

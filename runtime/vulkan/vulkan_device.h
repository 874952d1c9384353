// One Vulkan device opened for kiln: instance, physical device, logical
// device, one compute queue and a command pool, plus the buffer and one-off
// submit helpers the executor and the bandwidth probe share.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/vulkan/vulkan_api.h"

namespace kiln::vulkan {

// Returns Internal naming the call when a Vulkan call fails.
#define KILN_VK_CHECK(call, what)                                                                       \
  do {                                                                                                  \
    const VkResult kiln_vk_result = (call);                                                             \
    if (kiln_vk_result != VK_SUCCESS) {                                                                 \
      return absl::InternalError(absl::StrCat("vulkan: ", what, " failed: ", VkResultName(kiln_vk_result))); \
    }                                                                                                   \
  } while (0)

struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  void* mapped = nullptr;  // host-visible buffers only
  VkDeviceSize heap_bytes = 0;  // what it took from the device-local heap
};

class VulkanDevice {
 public:
  VulkanDevice() = default;
  VulkanDevice(const VulkanDevice&) = delete;
  VulkanDevice& operator=(const VulkanDevice&) = delete;
  ~VulkanDevice();

  // Opens device `index` of those the loader lists. Unavailable (with the
  // reason) without a loader, a device, a compute queue or subgroup
  // arithmetic in compute shaders.
  absl::Status Open(int index);
  // The properties of device `index` without opening it (no logical device):
  // what choosing a backend needs before the executor opens the device.
  static absl::StatusOr<VkPhysicalDeviceProperties> Properties(int index);

  // A storage buffer (also a copy source and destination): host-visible and
  // coherent (mapped) when asked, else device-local where the device has it.
  absl::StatusOr<Buffer> CreateBuffer(VkDeviceSize size, bool host_visible, const char* what);
  void DestroyBuffer(Buffer& b);
  // Records with `record`, submits and waits for the queue to go idle.
  absl::Status RunOnce(const std::function<void(VkCommandBuffer)>& record);
  // A descriptor-set layout of `buffers` storage buffers (bindings 0..) and a
  // pipeline layout over it with `push_bytes` of push constants, for compute.
  absl::Status CreateComputeLayouts(uint32_t buffers, uint32_t push_bytes, VkDescriptorSetLayout* set_layout,
                                    VkPipelineLayout* layout);
  // A pool of `sets` descriptor sets of `buffers` storage buffers each, and
  // one set of `layout` from it.
  absl::StatusOr<VkDescriptorPool> CreateDescriptorPool(uint32_t sets, uint32_t buffers) const;
  absl::StatusOr<VkDescriptorSet> AllocateDescriptorSet(VkDescriptorPool pool, VkDescriptorSetLayout layout) const;
  // Points bindings 0 .. buffers.size() - 1 of `set` (storage buffers) at `buffers`.
  void WriteStorageBuffers(VkDescriptorSet set, std::span<const VkDescriptorBufferInfo> buffers) const;
  // A compute pipeline from SPIR-V words; errors name `what`.
  absl::StatusOr<VkPipeline> CreateComputePipeline(std::span<const uint32_t> words, const char* entry_point,
                                                   VkPipelineLayout layout, const std::string& what);

  const VulkanApi& api() const { return api_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  VkCommandPool command_pool() const { return command_pool_; }
  const VkPhysicalDeviceProperties& props() const { return props_; }
  // Streaming multiprocessors / compute units, 0 where the driver does not say.
  uint32_t compute_units() const { return compute_units_; }
  // NV cooperative matrices (16 x 16 x 16, f16 in, f32 sums) enabled on the
  // device: matmul_coopmat.comp runs (KILN_VULKAN_COOPMAT=0 turns them off).
  bool has_coopmat() const { return has_coopmat_; }
  // Workgroup-scope cooperative matrices with tensor addressing
  // (VK_NV_cooperative_matrix2) enabled: the matmul probe runs on them.
  bool has_coopmat2() const { return has_coopmat2_; }
  // Packed 4 x 8-bit integer dot products enabled on the device: q4_K decode
  // runs on them (KILN_VULKAN_INTEGER_DOT=0 turns them off).
  bool has_integer_dot() const { return has_integer_dot_; }
  // The subgroup size where compute shaders have subgroup shuffles, else 0:
  // paged_attention_prefill.comp adds a row's partial dots across its lanes
  // with them.
  uint32_t shuffle_width() const { return shuffle_width_; }
  VkDeviceSize storage_align() const { return storage_align_; }  // offsets of bound ranges
  // Valid bits of the compute queue's timestamps (0: it has none).
  uint32_t timestamp_bits() const { return timestamp_bits_; }
  // The largest device-local heap less what this device's buffers hold of it:
  // an upper bound on free device memory (other processes' use is not seen).
  VkDeviceSize device_heap_free() const;
  // "vulkan (llvmpipe (LLVM 15.0.6, 256 bits), Mesa 22.3.6 (LLVM 15.0.6))"
  const std::string& description() const { return description_; }

 private:
  void PrintPipelineStatistics(VkPipeline pipeline, const std::string& what) const;

  VulkanApi api_;
  VkInstance instance_ = VK_NULL_HANDLE;  // the process's one instance (never destroyed)
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props_{};
  uint32_t compute_units_ = 0;
  bool has_coopmat_ = false;
  bool has_coopmat2_ = false;
  bool has_integer_dot_ = false;
  uint32_t shuffle_width_ = 0;
  // KILN_VULKAN_PIPELINE_STATS=1 where the driver has
  // VK_KHR_pipeline_executable_properties: each pipeline's statistics
  // (registers, spills, shared memory as the driver names them) to stderr.
  bool pipeline_stats_ = false;
  PFN_vkGetPipelineExecutablePropertiesKHR get_executables_ = nullptr;
  PFN_vkGetPipelineExecutableStatisticsKHR get_statistics_ = nullptr;
  VkPhysicalDeviceMemoryProperties memory_props_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkDeviceSize storage_align_ = 256;
  uint32_t timestamp_bits_ = 0;
  VkDeviceSize heap_used_ = 0;
  std::string description_;
};

}  // namespace kiln::vulkan

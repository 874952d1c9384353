// Every Vulkan entry point the runtime calls, loaded from libvulkan.so.1 at
// run time (dlopen + vkGetInstanceProcAddr / vkGetDeviceProcAddr): the
// runtime links no Vulkan library and runs where none is installed.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "absl/status/statusor.h"

namespace kiln::vulkan {

#define KILN_VK_INSTANCE_FUNCTIONS(X)       \
  X(vkDestroyInstance)                      \
  X(vkEnumeratePhysicalDevices)             \
  X(vkGetPhysicalDeviceProperties)          \
  X(vkGetPhysicalDeviceProperties2)         \
  X(vkGetPhysicalDeviceFeatures2)           \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkGetPhysicalDeviceMemoryProperties)    \
  X(vkEnumerateDeviceExtensionProperties)   \
  X(vkCreateDevice)                         \
  X(vkGetDeviceProcAddr)

#define KILN_VK_DEVICE_FUNCTIONS(X)  \
  X(vkDestroyDevice)                 \
  X(vkGetDeviceQueue)                \
  X(vkCreateBuffer)                  \
  X(vkDestroyBuffer)                 \
  X(vkGetBufferMemoryRequirements)   \
  X(vkAllocateMemory)                \
  X(vkFreeMemory)                    \
  X(vkBindBufferMemory)              \
  X(vkMapMemory)                     \
  X(vkUnmapMemory)                   \
  X(vkCreateShaderModule)            \
  X(vkDestroyShaderModule)           \
  X(vkCreateDescriptorSetLayout)     \
  X(vkDestroyDescriptorSetLayout)    \
  X(vkCreatePipelineLayout)          \
  X(vkDestroyPipelineLayout)         \
  X(vkCreateComputePipelines)        \
  X(vkDestroyPipeline)               \
  X(vkCreateDescriptorPool)          \
  X(vkDestroyDescriptorPool)         \
  X(vkAllocateDescriptorSets)        \
  X(vkUpdateDescriptorSets)          \
  X(vkCreateCommandPool)             \
  X(vkDestroyCommandPool)            \
  X(vkAllocateCommandBuffers)        \
  X(vkBeginCommandBuffer)            \
  X(vkEndCommandBuffer)              \
  X(vkCmdBindPipeline)               \
  X(vkCmdBindDescriptorSets)         \
  X(vkCmdPushConstants)              \
  X(vkCmdDispatch)                   \
  X(vkCmdPipelineBarrier)            \
  X(vkCmdFillBuffer)                 \
  X(vkCmdCopyBuffer)                 \
  X(vkCreateFence)                   \
  X(vkDestroyFence)                  \
  X(vkResetFences)                   \
  X(vkWaitForFences)                 \
  X(vkQueueSubmit)                   \
  X(vkQueueWaitIdle)                 \
  X(vkFreeCommandBuffers)            \
  X(vkCreateQueryPool)               \
  X(vkDestroyQueryPool)              \
  X(vkCmdResetQueryPool)             \
  X(vkCmdWriteTimestamp)             \
  X(vkGetQueryPoolResults)

struct VulkanApi {
  void* library = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance vkCreateInstance = nullptr;
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;
#define KILN_VK_DECLARE(name) PFN_##name name = nullptr;
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_DECLARE)
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_DECLARE)
#undef KILN_VK_DECLARE

  // dlopen("libvulkan.so.1") and the global functions; Unavailable when the
  // loader is not installed.
  absl::Status LoadLoader();
  absl::Status LoadInstance(VkInstance instance);
  absl::Status LoadDevice(VkDevice device);
};

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" for messages.
const char* VkResultName(VkResult r);

}  // namespace kiln::vulkan

#include "runtime/vulkan/vulkan_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace kiln::vulkan {

absl::Status VulkanApi::LoadLoader() {
  library = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return absl::UnavailableError("no Vulkan loader (libvulkan.so.1 not found)");
  vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(library, "vkGetInstanceProcAddr"));
  if (vkGetInstanceProcAddr == nullptr) return absl::UnavailableError("libvulkan.so.1 lacks vkGetInstanceProcAddr");
  vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(vkGetInstanceProcAddr(nullptr, "vkCreateInstance"));
  vkEnumerateInstanceVersion =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  if (vkCreateInstance == nullptr) return absl::UnavailableError("the Vulkan loader lacks vkCreateInstance");
  return absl::OkStatus();
}

absl::Status VulkanApi::LoadInstance(VkInstance instance) {
#define KILN_VK_LOAD(name)                                                                   \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name));               \
  if (name == nullptr) return absl::UnavailableError("the Vulkan instance lacks " #name);
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  return absl::OkStatus();
}

absl::Status VulkanApi::LoadDevice(VkDevice device) {
#define KILN_VK_LOAD(name)                                                  \
  name = reinterpret_cast<PFN_##name>(vkGetDeviceProcAddr(device, #name)); \
  if (name == nullptr) return absl::UnavailableError("the Vulkan device lacks " #name);
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  return absl::OkStatus();
}

const char* VkResultName(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult error";
  }
}

}  // namespace kiln::vulkan

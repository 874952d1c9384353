#include "runtime/vulkan/vulkan_device.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::vulkan {

VulkanDevice::~VulkanDevice() {
  if (device_ != VK_NULL_HANDLE) {
    api_.vkQueueWaitIdle(queue_);
    if (command_pool_) api_.vkDestroyCommandPool(device_, command_pool_, nullptr);
    api_.vkDestroyDevice(device_, nullptr);
  }
}

namespace {

// One Vulkan instance per process, never destroyed: NVIDIA's driver, loaded
// anew by every vkCreateInstance after a vkDestroyInstance, failed with
// VK_ERROR_INCOMPATIBLE_DRIVER after a few dozen executors in one process
// (vulkan_kernels_test on the H200).
struct ProcessInstance {
  VulkanApi api;
  VkInstance instance = VK_NULL_HANDLE;
  uint32_t api_version = VK_API_VERSION_1_1;
  absl::Status status;
};

// VK_KHR_cooperative_matrix's and VK_NV_cooperative_matrix2's feature
// structures, which Debian 12's Vulkan headers (1.3.239) predate.
constexpr const char* kKhrCoopmatExtension = "VK_KHR_cooperative_matrix";
constexpr const char* kCoopmat2Extension = "VK_NV_cooperative_matrix2";
constexpr auto kKhrCoopmatFeaturesType = static_cast<VkStructureType>(1000506000);
constexpr auto kCoopmat2FeaturesType = static_cast<VkStructureType>(1000593000);
struct KhrCoopmatFeatures {
  VkStructureType sType;
  void* pNext = nullptr;
  VkBool32 cooperativeMatrix = VK_FALSE;
  VkBool32 cooperativeMatrixRobustBufferAccess = VK_FALSE;
};
struct Coopmat2Features {
  VkStructureType sType;
  void* pNext = nullptr;
  VkBool32 cooperativeMatrixWorkgroupScope = VK_FALSE;
  VkBool32 cooperativeMatrixFlexibleDimensions = VK_FALSE;
  VkBool32 cooperativeMatrixReductions = VK_FALSE;
  VkBool32 cooperativeMatrixConversions = VK_FALSE;
  VkBool32 cooperativeMatrixPerElementOperations = VK_FALSE;
  VkBool32 cooperativeMatrixTensorAddressing = VK_FALSE;
  VkBool32 cooperativeMatrixBlockLoads = VK_FALSE;
};

const ProcessInstance& Instance() {
  static const ProcessInstance* const shared = [] {
    auto* p = new ProcessInstance;
    p->status = p->api.LoadLoader();
    if (!p->status.ok()) return p;
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "kiln";
    // The newest of 1.1-1.3 the loader has: the driver-properties query (for
    // Describe) is 1.2, workgroup-scope cooperative matrices (SPIR-V 1.6)
    // need 1.3; the kernels need only 1.1 (SPIR-V 1.3, subgroup arithmetic).
    uint32_t loader_version = VK_API_VERSION_1_0;
    if (p->api.vkEnumerateInstanceVersion != nullptr) p->api.vkEnumerateInstanceVersion(&loader_version);
    app.apiVersion = p->api_version = std::clamp<uint32_t>(loader_version, VK_API_VERSION_1_1, VK_API_VERSION_1_3);
    VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pApplicationInfo = &app;
    if (VkResult r = p->api.vkCreateInstance(&ici, nullptr, &p->instance); r != VK_SUCCESS) {
      p->instance = VK_NULL_HANDLE;
      p->status = absl::UnavailableError(absl::StrCat("no Vulkan driver (vkCreateInstance: ", VkResultName(r), ")"));
      return p;
    }
    p->status = p->api.LoadInstance(p->instance);
    return p;
  }();
  return *shared;
}

// Device `index` of those the loader lists.
absl::StatusOr<VkPhysicalDevice> PhysicalDevice(const ProcessInstance& shared, int index) {
  if (!shared.status.ok()) return shared.status;
  uint32_t count = 0;
  shared.api.vkEnumeratePhysicalDevices(shared.instance, &count, nullptr);
  std::vector<VkPhysicalDevice> devices(count);
  if (count > 0) shared.api.vkEnumeratePhysicalDevices(shared.instance, &count, devices.data());
  if (count == 0) return absl::UnavailableError("no Vulkan device");
  if (index < 0 || index >= static_cast<int>(count)) {
    return absl::UnavailableError(
        absl::StrFormat("no Vulkan device %d (the loader lists %d)", index, count));
  }
  return devices[index];
}

}  // namespace

absl::StatusOr<VkPhysicalDeviceProperties> VulkanDevice::Properties(int index) {
  const ProcessInstance& shared = Instance();
  absl::StatusOr<VkPhysicalDevice> physical = PhysicalDevice(shared, index);
  if (!physical.ok()) return physical.status();
  VkPhysicalDeviceProperties props{};
  shared.api.vkGetPhysicalDeviceProperties(*physical, &props);
  return props;
}

absl::Status VulkanDevice::Open(int index) {
  const ProcessInstance& shared = Instance();
  absl::StatusOr<VkPhysicalDevice> physical = PhysicalDevice(shared, index);
  if (!physical.ok()) return physical.status();
  api_ = shared.api;
  instance_ = shared.instance;
  physical_ = *physical;
  api_.vkGetPhysicalDeviceProperties(physical_, &props_);
  api_.vkGetPhysicalDeviceMemoryProperties(physical_, &memory_props_);
  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  const bool has_driver_props = props_.apiVersion >= VK_API_VERSION_1_2 && shared.api_version >= VK_API_VERSION_1_2;
  if (has_driver_props) subgroup.pNext = &driver;
  VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props2.pNext = &subgroup;
  api_.vkGetPhysicalDeviceProperties2(physical_, &props2);
  const VkSubgroupFeatureFlags needed = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
  if ((subgroup.supportedOperations & needed) != needed || !(subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT)) {
    return absl::UnavailableError(
        absl::StrCat("Vulkan device '", props_.deviceName, "' lacks subgroup arithmetic in compute shaders"));
  }
  if (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) shuffle_width_ = subgroup.subgroupSize;
  // Streaming multiprocessors, where the driver says (NVIDIA), and a CPU
  // implementation's threads (lavapipe runs a workgroup per thread): the
  // decode matmul's grid is sized to what the device holds at once.
  if (props_.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) compute_units_ = std::max(1u, std::thread::hardware_concurrency());
  uint32_t extensions = 0;
  api_.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &extensions, nullptr);
  std::vector<VkExtensionProperties> ext(extensions);
  if (extensions > 0) api_.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &extensions, ext.data());
  bool has_coopmat_extension = false, has_dot_extension = false, has_stats_extension = false;
  bool has_khr_coopmat_extension = false, has_coopmat2_extension = false;
  for (const VkExtensionProperties& e : ext) {
    const std::string_view name(e.extensionName);
    has_coopmat_extension = has_coopmat_extension || name == VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    has_khr_coopmat_extension = has_khr_coopmat_extension || name == kKhrCoopmatExtension;
    has_coopmat2_extension = has_coopmat2_extension || name == kCoopmat2Extension;
    has_dot_extension = has_dot_extension || name == VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    has_stats_extension = has_stats_extension || name == VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
    if (name != VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME) continue;
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &sm;
    api_.vkGetPhysicalDeviceProperties2(physical_, &p2);
    compute_units_ = sm.shaderSMCount;
  }
  // Packed 4 x 8-bit integer dot products for q4_K decode (DP4).
  VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot_features{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
  const char* dot_env = getenv("KILN_VULKAN_INTEGER_DOT");
  if (has_dot_extension && !(dot_env != nullptr && std::string_view(dot_env) == "0")) {
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &dot_features;
    api_.vkGetPhysicalDeviceFeatures2(physical_, &f2);
    has_integer_dot_ = dot_features.shaderIntegerDotProduct;
  }
  // Tensor cores for matmul_coopmat.comp: NV cooperative matrices of 16 x 16
  // x 16 with f16 inputs and f32 sums at subgroup scope, f16 arithmetic and
  // the Vulkan memory model (glslang's cooperative-matrix code declares it).
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceShaderFloat16Int8Features f16_features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDeviceVulkanMemoryModelFeatures model_features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
  const char* coopmat_env = getenv("KILN_VULKAN_COOPMAT");
  if (has_coopmat_extension && !(coopmat_env != nullptr && std::string_view(coopmat_env) == "0")) {
    auto shapes = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
        api_.vkGetInstanceProcAddr(instance_, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
    bool has_shape = false;
    if (shapes != nullptr) {
      uint32_t n = 0;
      shapes(physical_, &n, nullptr);
      std::vector<VkCooperativeMatrixPropertiesNV> props(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
      if (n > 0) shapes(physical_, &n, props.data());
      for (const VkCooperativeMatrixPropertiesNV& c : props) {
        has_shape = has_shape || (c.MSize == 16 && c.NSize == 16 && c.KSize == 16 && c.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                                  c.BType == VK_COMPONENT_TYPE_FLOAT16_NV && c.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                                  c.DType == VK_COMPONENT_TYPE_FLOAT32_NV && c.scope == VK_SCOPE_SUBGROUP_NV);
      }
    }
    coop_features.pNext = &f16_features;
    f16_features.pNext = &model_features;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &coop_features;
    api_.vkGetPhysicalDeviceFeatures2(physical_, &f2);
    // matmul_coopmat.comp lays its 256 threads out as 8 subgroups of 32 (its
    // silu_mul on f16 rows 512 as 16).
    has_coopmat_ = has_shape && coop_features.cooperativeMatrix && f16_features.shaderFloat16 && model_features.vulkanMemoryModel &&
                   props_.limits.maxComputeSharedMemorySize >= 48 * 1024 && subgroup.subgroupSize == 32 &&
                   props_.limits.maxComputeWorkGroupInvocations >= 512;
  }
  // Workgroup-scope cooperative matrices with tensor addressing
  // (VK_NV_cooperative_matrix2 over VK_KHR_cooperative_matrix):
  // matmul_coopmat2.comp's prefill and the FLOP probe. They need Vulkan 1.3
  // (SPIR-V 1.6), 16-bit storage, f16 arithmetic and the memory model.
  KhrCoopmatFeatures khr_features{kKhrCoopmatFeaturesType};
  Coopmat2Features coopmat2_features{kCoopmat2FeaturesType};
  VkPhysicalDevice16BitStorageFeatures storage16_features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  if (has_khr_coopmat_extension && has_coopmat2_extension && props_.apiVersion >= VK_API_VERSION_1_3 &&
      shared.api_version >= VK_API_VERSION_1_3 && !(coopmat_env != nullptr && std::string_view(coopmat_env) == "0")) {
    f16_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    model_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    khr_features.pNext = &coopmat2_features;
    coopmat2_features.pNext = &storage16_features;
    storage16_features.pNext = &f16_features;
    f16_features.pNext = &model_features;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &khr_features;
    api_.vkGetPhysicalDeviceFeatures2(physical_, &f2);
    has_coopmat2_ = khr_features.cooperativeMatrix && coopmat2_features.cooperativeMatrixWorkgroupScope &&
                    coopmat2_features.cooperativeMatrixFlexibleDimensions &&
                    coopmat2_features.cooperativeMatrixTensorAddressing && storage16_features.storageBuffer16BitAccess &&
                    f16_features.shaderFloat16 && model_features.vulkanMemoryModel;
  }
  description_ = has_driver_props ? absl::StrCat("vulkan (", props_.deviceName, ", ", driver.driverInfo, ")")
                                  : absl::StrCat("vulkan (", props_.deviceName, ")");
  if (has_coopmat_) absl::StrAppend(&description_, " with NV cooperative matrices");
  if (has_integer_dot_) absl::StrAppend(&description_, has_coopmat_ ? " and" : " with", " integer dot products");
  if (has_coopmat2_) absl::StrAppend(&description_, " and workgroup-scope cooperative matrices");
  storage_align_ = std::max<VkDeviceSize>(256, props_.limits.minStorageBufferOffsetAlignment);

  uint32_t families = 0;
  api_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, nullptr);
  std::vector<VkQueueFamilyProperties> qf(families);
  api_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, qf.data());
  std::optional<uint32_t> compute;
  for (uint32_t i = 0; i < families; ++i) {
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      compute = i;
      break;
    }
  }
  if (!compute) return absl::UnavailableError(absl::StrCat("Vulkan device '", props_.deviceName, "' has no compute queue"));
  queue_family_ = *compute;
  timestamp_bits_ = qf[*compute].timestampValidBits;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  std::vector<const char*> extensions_on;
  const void* features_on = nullptr;
  if (has_integer_dot_) {
    dot_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
    dot_features.shaderIntegerDotProduct = VK_TRUE;
    extensions_on.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    features_on = &dot_features;
  }
  if (has_coopmat_ || has_coopmat2_) {
    f16_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    f16_features.shaderFloat16 = VK_TRUE;
    model_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    model_features.vulkanMemoryModel = VK_TRUE;
    f16_features.pNext = &model_features;
    model_features.pNext = const_cast<void*>(features_on);
    features_on = &f16_features;
  }
  if (has_coopmat_) {
    coop_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    coop_features.cooperativeMatrix = VK_TRUE;
    coop_features.pNext = const_cast<void*>(features_on);
    extensions_on.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    features_on = &coop_features;
  }
  if (has_coopmat2_) {
    khr_features = {kKhrCoopmatFeaturesType};
    khr_features.cooperativeMatrix = VK_TRUE;
    coopmat2_features = {kCoopmat2FeaturesType};
    coopmat2_features.cooperativeMatrixWorkgroupScope = VK_TRUE;
    coopmat2_features.cooperativeMatrixFlexibleDimensions = VK_TRUE;
    coopmat2_features.cooperativeMatrixTensorAddressing = VK_TRUE;
    storage16_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    storage16_features.storageBuffer16BitAccess = VK_TRUE;
    khr_features.pNext = &coopmat2_features;
    coopmat2_features.pNext = &storage16_features;
    storage16_features.pNext = const_cast<void*>(features_on);
    extensions_on.push_back(kKhrCoopmatExtension);
    extensions_on.push_back(kCoopmat2Extension);
    features_on = &khr_features;
  }
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR stats_features{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  const char* stats_env = getenv("KILN_VULKAN_PIPELINE_STATS");
  if (stats_env != nullptr && std::string_view(stats_env) == "1") {
    if (has_stats_extension) {
      VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
      f2.pNext = &stats_features;
      api_.vkGetPhysicalDeviceFeatures2(physical_, &f2);
    }
    if (!stats_features.pipelineExecutableInfo) {
      std::fprintf(stderr, "KILN_VULKAN_PIPELINE_STATS=1: '%s' does not report pipeline statistics "
                   "(no VK_KHR_pipeline_executable_properties)\n", props_.deviceName);
    }
  }
  if (stats_features.pipelineExecutableInfo) {
    stats_features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    stats_features.pipelineExecutableInfo = VK_TRUE;
    stats_features.pNext = const_cast<void*>(features_on);
    extensions_on.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    features_on = &stats_features;
    pipeline_stats_ = true;
  }
  dci.pNext = features_on;
  dci.enabledExtensionCount = static_cast<uint32_t>(extensions_on.size());
  dci.ppEnabledExtensionNames = extensions_on.data();
  KILN_VK_CHECK(api_.vkCreateDevice(physical_, &dci, nullptr, &device_), "vkCreateDevice");
  if (absl::Status s = api_.LoadDevice(device_); !s.ok()) return s;
  if (pipeline_stats_) {
    get_executables_ = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
        api_.vkGetDeviceProcAddr(device_, "vkGetPipelineExecutablePropertiesKHR"));
    get_statistics_ = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
        api_.vkGetDeviceProcAddr(device_, "vkGetPipelineExecutableStatisticsKHR"));
    pipeline_stats_ = get_executables_ != nullptr && get_statistics_ != nullptr;
  }
  api_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.queueFamilyIndex = queue_family_;
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  KILN_VK_CHECK(api_.vkCreateCommandPool(device_, &pci, nullptr, &command_pool_), "vkCreateCommandPool");
  return absl::OkStatus();
}

absl::StatusOr<Buffer> VulkanDevice::CreateBuffer(VkDeviceSize size, bool host_visible, const char* what) {
  Buffer b;
  b.size = std::max<VkDeviceSize>(16, (size + 15) / 16 * 16);
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = b.size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KILN_VK_CHECK(api_.vkCreateBuffer(device_, &bci, nullptr, &b.buffer), absl::StrCat("creating the ", what, " buffer"));
  VkMemoryRequirements req;
  api_.vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  const VkMemoryPropertyFlags need =
      host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0;
  const VkMemoryPropertyFlags want = host_visible ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  std::optional<uint32_t> type;
  for (int pass = 0; pass < 2 && !type; ++pass) {
    for (uint32_t i = 0; i < memory_props_.memoryTypeCount; ++i) {
      const VkMemoryPropertyFlags f = memory_props_.memoryTypes[i].propertyFlags;
      if (!(req.memoryTypeBits & (1u << i)) || (f & need) != need) continue;
      if (pass == 0 && (f & want) != want) continue;
      type = i;
      break;
    }
  }
  if (!type) {
    api_.vkDestroyBuffer(device_, b.buffer, nullptr);
    return absl::ResourceExhaustedError(absl::StrCat("vulkan: no memory type for the ", what, " buffer"));
  }
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = *type;
  if (VkResult r = api_.vkAllocateMemory(device_, &mai, nullptr, &b.memory); r != VK_SUCCESS) {
    api_.vkDestroyBuffer(device_, b.buffer, nullptr);
    return absl::ResourceExhaustedError(absl::StrFormat("vulkan: allocating %d bytes for the %s buffer: %s", req.size,
                                                        what, VkResultName(r)));
  }
  api_.vkBindBufferMemory(device_, b.buffer, b.memory, 0);
  const uint32_t heap = memory_props_.memoryTypes[*type].heapIndex;
  if (memory_props_.memoryHeaps[heap].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
    b.heap_bytes = req.size;
    heap_used_ += req.size;
  }
  if (memory_props_.memoryTypes[*type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
    KILN_VK_CHECK(api_.vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
  }
  return b;
}

void VulkanDevice::DestroyBuffer(Buffer& b) {
  heap_used_ -= b.heap_bytes;
  if (b.buffer) api_.vkDestroyBuffer(device_, b.buffer, nullptr);
  if (b.memory) api_.vkFreeMemory(device_, b.memory, nullptr);
  b = Buffer{};
}

VkDeviceSize VulkanDevice::device_heap_free() const {
  VkDeviceSize largest = 0;
  for (uint32_t i = 0; i < memory_props_.memoryHeapCount; ++i) {
    if (memory_props_.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      largest = std::max(largest, memory_props_.memoryHeaps[i].size);
    }
  }
  return largest > heap_used_ ? largest - heap_used_ : 0;
}

absl::Status VulkanDevice::RunOnce(const std::function<void(VkCommandBuffer)>& record) {
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = command_pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  VkCommandBuffer cb;
  KILN_VK_CHECK(api_.vkAllocateCommandBuffers(device_, &cai, &cb), "vkAllocateCommandBuffers");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  api_.vkBeginCommandBuffer(cb, &begin);
  record(cb);
  api_.vkEndCommandBuffer(cb);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  KILN_VK_CHECK(api_.vkQueueSubmit(queue_, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit");
  KILN_VK_CHECK(api_.vkQueueWaitIdle(queue_), "vkQueueWaitIdle");
  return absl::OkStatus();
}

absl::Status VulkanDevice::CreateComputeLayouts(uint32_t buffers, uint32_t push_bytes,
                                                VkDescriptorSetLayout* set_layout, VkPipelineLayout* layout) {
  std::vector<VkDescriptorSetLayoutBinding> bindings(buffers);
  for (uint32_t i = 0; i < buffers; ++i) {
    bindings[i] = VkDescriptorSetLayoutBinding{i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT,
                                               nullptr};
  }
  VkDescriptorSetLayoutCreateInfo lci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  lci.bindingCount = buffers;
  lci.pBindings = bindings.data();
  KILN_VK_CHECK(api_.vkCreateDescriptorSetLayout(device_, &lci, nullptr, set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 1;
  pli.pSetLayouts = set_layout;
  pli.pushConstantRangeCount = push_bytes > 0 ? 1 : 0;  // a range may not be empty
  pli.pPushConstantRanges = &range;
  KILN_VK_CHECK(api_.vkCreatePipelineLayout(device_, &pli, nullptr, layout), "vkCreatePipelineLayout");
  return absl::OkStatus();
}

absl::StatusOr<VkPipeline> VulkanDevice::CreateComputePipeline(std::span<const uint32_t> words, const char* entry_point,
                                                               VkPipelineLayout layout, const std::string& what) {
  VkShaderModuleCreateInfo smci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  smci.codeSize = words.size() * 4;
  smci.pCode = words.data();
  VkShaderModule module;
  KILN_VK_CHECK(api_.vkCreateShaderModule(device_, &smci, nullptr, &module), absl::StrCat("shader module ", what));
  VkComputePipelineCreateInfo cpci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpci.stage = VkPipelineShaderStageCreateInfo{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpci.stage.module = module;
  cpci.stage.pName = entry_point;
  cpci.layout = layout;
  if (pipeline_stats_) cpci.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  VkPipeline pipeline;
  const VkResult r = api_.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &cpci, nullptr, &pipeline);
  api_.vkDestroyShaderModule(device_, module, nullptr);
  KILN_VK_CHECK(r, absl::StrCat("pipeline ", what));
  if (pipeline_stats_) PrintPipelineStatistics(pipeline, what);
  return pipeline;
}

absl::StatusOr<VkDescriptorPool> VulkanDevice::CreateDescriptorPool(uint32_t sets, uint32_t buffers) const {
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, buffers * sets};
  VkDescriptorPoolCreateInfo dpci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpci.maxSets = sets;
  dpci.poolSizeCount = 1;
  dpci.pPoolSizes = &size;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  KILN_VK_CHECK(api_.vkCreateDescriptorPool(device_, &dpci, nullptr, &pool), "vkCreateDescriptorPool");
  return pool;
}

absl::StatusOr<VkDescriptorSet> VulkanDevice::AllocateDescriptorSet(VkDescriptorPool pool,
                                                                    VkDescriptorSetLayout layout) const {
  VkDescriptorSetAllocateInfo dsai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  dsai.descriptorPool = pool;
  dsai.descriptorSetCount = 1;
  dsai.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  KILN_VK_CHECK(api_.vkAllocateDescriptorSets(device_, &dsai, &set), "vkAllocateDescriptorSets");
  return set;
}

void VulkanDevice::WriteStorageBuffers(VkDescriptorSet set, std::span<const VkDescriptorBufferInfo> buffers) const {
  std::vector<VkWriteDescriptorSet> writes(buffers.size(), VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET});
  for (uint32_t i = 0; i < writes.size(); ++i) {
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &buffers[i];
  }
  api_.vkUpdateDescriptorSets(device_, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
}

void VulkanDevice::PrintPipelineStatistics(VkPipeline pipeline, const std::string& what) const {
  VkPipelineInfoKHR info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  info.pipeline = pipeline;
  uint32_t executables = 0;
  if (get_executables_(device_, &info, &executables, nullptr) != VK_SUCCESS) return;
  for (uint32_t e = 0; e < executables; ++e) {
    VkPipelineExecutableInfoKHR exe{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    exe.pipeline = pipeline;
    exe.executableIndex = e;
    uint32_t count = 0;
    if (get_statistics_(device_, &exe, &count, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> stats(count, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (get_statistics_(device_, &exe, &count, stats.data()) != VK_SUCCESS) continue;
    std::string line = absl::StrCat("vulkan pipeline ", what, ":");
    for (const VkPipelineExecutableStatisticKHR& st : stats) {
      absl::StrAppend(&line, " ", st.name, "=");
      switch (st.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: absl::StrAppend(&line, st.value.b32 ? "yes" : "no"); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: absl::StrAppend(&line, st.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: absl::StrAppend(&line, st.value.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: absl::StrAppend(&line, st.value.f64); break;
        default: absl::StrAppend(&line, "?");
      }
      absl::StrAppend(&line, ";");
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace kiln::vulkan

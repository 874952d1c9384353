#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::cuda {
namespace {

// The API version whose entry points we ask cuGetProcAddress for (12.0:
// the _v2 memory and stream-capture functions, cuGraphInstantiateWithFlags).
constexpr int kApiVersion = 12000;

absl::StatusOr<DriverApi> Resolve() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return absl::UnavailableError(absl::StrCat("no CUDA driver (", err ? err : "libcuda.so.1 not found", ")"));
  }
  using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    return absl::UnavailableError("the CUDA driver is too old (no cuGetProcAddress_v2; kiln needs a CUDA 12+ driver)");
  }
  DriverApi api;
#define KILN_CUDA_RESOLVE(name)                                                                              \
  {                                                                                                          \
    void* fn = nullptr;                                                                                      \
    CUdriverProcAddressQueryResult found;                                                                    \
    if (get_proc(#name, &fn, kApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || !fn) {     \
      return absl::UnavailableError(absl::StrCat("the CUDA driver lacks ", #name));                          \
    }                                                                                                        \
    api.name = reinterpret_cast<decltype(api.name)>(fn);                                                     \
  }
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_RESOLVE)
#undef KILN_CUDA_RESOLVE
  return api;
}

}  // namespace

absl::StatusOr<const DriverApi*> LoadDriver() {
  static const absl::StatusOr<DriverApi>* loaded = [] {
    auto* r = new absl::StatusOr<DriverApi>(Resolve());
    if (r->ok()) {
      const CUresult init = (*r)->cuInit(0);
      if (init != CUDA_SUCCESS) {
        const char* name = nullptr;
        (*r)->cuGetErrorName(init, &name);
        *r = absl::UnavailableError(absl::StrCat("cuInit failed: ", name ? name : "unknown error",
                                                 init == CUDA_ERROR_NO_DEVICE ? " (no GPU)" : ""));
      }
    }
    return r;
  }();
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::Status CheckCuda(const DriverApi& api, CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  api.cuGetErrorName(result, &name);
  api.cuGetErrorString(result, &text);
  const std::string message =
      absl::StrFormat("%s: %s (%s)", what, name ? name : "unknown CUDA error", text ? text : "no description");
  if (result == CUDA_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::StatusOr<DeviceInfo> QueryDevice(int ordinal) {
  absl::StatusOr<const DriverApi*> api = LoadDriver();
  if (!api.ok()) return api.status();
  const DriverApi& a = **api;
  int count = 0;
  KILN_CU(a, a.cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(absl::StrFormat("no CUDA device %d (the driver sees %d)", ordinal, count));
  }
  DeviceInfo info;
  KILN_CU(a, a.cuDeviceGet(&info.device, ordinal));
  char name[256] = {};
  KILN_CU(a, a.cuDeviceGetName(name, sizeof(name) - 1, info.device));
  info.name = name;
  int major = 0, minor = 0;
  KILN_CU(a, a.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, info.device));
  KILN_CU(a, a.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, info.device));
  info.sm = major * 10 + minor;
  return info;
}

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int ordinal) {
  absl::StatusOr<DeviceInfo> info = QueryDevice(ordinal);
  if (!info.ok()) return info.status();
  const DriverApi& a = **LoadDriver();
  std::unique_ptr<CudaContext> c(new CudaContext());
  c->api_ = &a;
  c->device_ = info->device;
  c->name_ = info->name;
  c->sm_ = info->sm;
  KILN_CU(a, a.cuDeviceGetAttribute(&c->multiprocessors_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->device_));
  KILN_CU(a, a.cuDevicePrimaryCtxRetain(&c->context_, c->device_));
  if (absl::Status s = c->MakeCurrent(); !s.ok()) return s;
  return c;
}

CudaContext::~CudaContext() {
  if (context_ != nullptr) api_->cuDevicePrimaryCtxRelease(device_);
}

absl::Status CudaContext::MakeCurrent() const {
  KILN_CU(*api_, api_->cuCtxSetCurrent(context_));
  return absl::OkStatus();
}

}  // namespace kiln::cuda

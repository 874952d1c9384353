// The CUDA driver API, loaded at run time: libcuda.so.1 through dlopen and
// every entry point through cuGetProcAddress, so kiln never links libcuda
// and the same binary runs (and skips its CUDA parts) on machines without
// a GPU. Also a primary-context holder and error messages; probes and
// tests use this directly.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::cuda {

// Function pointers of the driver entry points kiln uses.
struct DriverApi {
#define KILN_CUDA_DRIVER_FUNCTIONS(X)                                                                       \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                     \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)      \
  X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)     \
  X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost) \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync)            \
  X(cuMemsetD8) X(cuMemsetD32) X(cuMemGetInfo) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)  \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)             \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuGetErrorName)           \
  X(cuGetErrorString) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)             \
  X(cuEventElapsedTime)
#define KILN_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_DECLARE)
#undef KILN_CUDA_DECLARE
};

// Loads libcuda.so.1 and resolves every entry point once per process, then
// cuInit(0). Unavailable (with the dlopen message) where there is no driver.
absl::StatusOr<const DriverApi*> LoadDriver();

// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or OK for CUDA_SUCCESS.
absl::Status CheckCuda(const DriverApi& api, CUresult result, const char* what);

// Returns a Status from the enclosing function when a driver call fails.
#define KILN_CU(api, call)                                                                 \
  do {                                                                                     \
    if (absl::Status kiln_cu_status = ::kiln::cuda::CheckCuda((api), (call), #call);       \
        !kiln_cu_status.ok()) {                                                            \
      return kiln_cu_status;                                                               \
    }                                                                                      \
  } while (0)

// Device `ordinal` as the driver names it, without a context (retaining and
// releasing one only to ask costs a context creation of its own): its
// handle, name and compute capability (90 for 9.0). Unavailable when the
// driver or the device is absent.
struct DeviceInfo {
  CUdevice device = 0;
  std::string name;
  int sm = 0;
};
absl::StatusOr<DeviceInfo> QueryDevice(int ordinal);

// A device and its retained primary context, made current on this thread
// by Create and by MakeCurrent.
class CudaContext {
 public:
  // Unavailable when the driver or device `ordinal` is absent.
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(int ordinal);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  absl::Status MakeCurrent() const;
  const DriverApi& api() const { return *api_; }
  CUdevice device() const { return device_; }
  const std::string& name() const { return name_; }
  int sm() const { return sm_; }  // 90 for compute capability 9.0
  int multiprocessors() const { return multiprocessors_; }

 private:
  CudaContext() = default;
  const DriverApi* api_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string name_;
  int sm_ = 0;
  int multiprocessors_ = 0;
};

}  // namespace kiln::cuda

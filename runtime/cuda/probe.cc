#include "runtime/cuda/probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/cuda/cuda_driver.h"

namespace kiln::cuda {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(const DriverApi& api) : api_(api) {}
  ~DeviceBuffer() {
    if (ptr_ != 0) api_.cuMemFree(ptr_);
  }
  absl::Status Allocate(size_t bytes) { return CheckCuda(api_, api_.cuMemAlloc(&ptr_, bytes), "cuMemAlloc"); }
  CUdeviceptr get() const { return ptr_; }

 private:
  const DriverApi& api_;
  CUdeviceptr ptr_ = 0;
};

// Times `reps` runs of `work` on the null stream with events: milliseconds each.
template <typename Work>
absl::StatusOr<std::vector<double>> TimeOnDevice(const DriverApi& api, int warmup, int reps, Work work) {
  CUevent start = nullptr, stop = nullptr;
  KILN_CU(api, api.cuEventCreate(&start, CU_EVENT_DEFAULT));
  KILN_CU(api, api.cuEventCreate(&stop, CU_EVENT_DEFAULT));
  std::vector<double> ms;
  absl::Status status = absl::OkStatus();
  for (int i = 0; i < warmup + reps && status.ok(); ++i) {
    status = CheckCuda(api, api.cuEventRecord(start, nullptr), "cuEventRecord");
    if (status.ok()) status = work();
    if (status.ok()) status = CheckCuda(api, api.cuEventRecord(stop, nullptr), "cuEventRecord");
    if (status.ok()) status = CheckCuda(api, api.cuEventSynchronize(stop), "cuEventSynchronize");
    float t = 0;
    if (status.ok()) status = CheckCuda(api, api.cuEventElapsedTime(&t, start, stop), "cuEventElapsedTime");
    if (status.ok() && i >= warmup) ms.push_back(t);
  }
  api.cuEventDestroy(start);
  api.cuEventDestroy(stop);
  if (!status.ok()) return status;
  return ms;
}

absl::Status FillRandom(const DriverApi& api, CUdeviceptr dst, size_t bytes, uint32_t seed) {
  std::vector<uint16_t> host(bytes / 2);
  std::mt19937 rng(seed);
  // bf16 in [-1, 1): sign, exponent 0x3F0..0x3F7, random mantissa.
  for (uint16_t& v : host) v = static_cast<uint16_t>(((rng() & 1) << 15) | 0x3F00 | (rng() & 0x7F));
  return CheckCuda(api, api.cuMemcpyHtoD(dst, host.data(), bytes), "cuMemcpyHtoD");
}

// cuBLAS, resolved with dlsym (its enums and signatures are stable across 12 and 13).
struct Cublas {
  using Handle = void*;
  int (*create)(Handle*) = nullptr;
  int (*destroy)(Handle) = nullptr;
  int (*gemm_ex)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                 const void*, void*, int, int, int, int) = nullptr;
};

absl::StatusOr<Cublas> LoadCublas() {
  void* lib = nullptr;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  }
  if (lib == nullptr) return absl::UnavailableError("no libcublas.so.13 or .12 on this machine");
  Cublas c;
  c.create = reinterpret_cast<decltype(c.create)>(dlsym(lib, "cublasCreate_v2"));
  c.destroy = reinterpret_cast<decltype(c.destroy)>(dlsym(lib, "cublasDestroy_v2"));
  c.gemm_ex = reinterpret_cast<decltype(c.gemm_ex)>(dlsym(lib, "cublasGemmEx"));
  if (!c.create || !c.destroy || !c.gemm_ex) return absl::UnavailableError("libcublas lacks cublasGemmEx");
  return c;
}

}  // namespace

absl::StatusOr<Ceilings> ProbeCudaCeilings(const BackendOptions& options) {
  absl::StatusOr<std::unique_ptr<CudaContext>> ctx = CudaContext::Create(options.device);
  if (!ctx.ok()) return ctx.status();
  const DriverApi& api = (*ctx)->api();
  Ceilings out;

  // Bandwidth: 2 GiB copied device to device, several times the L2.
  const size_t copy_bytes = size_t{2} << 30;
  DeviceBuffer src(api), dst(api);
  if (absl::Status s = src.Allocate(copy_bytes); !s.ok()) return s;
  if (absl::Status s = dst.Allocate(copy_bytes); !s.ok()) return s;
  if (absl::Status s = FillRandom(api, src.get(), copy_bytes, 1); !s.ok()) return s;
  absl::StatusOr<std::vector<double>> copy_ms = TimeOnDevice(api, 2, 10, [&] {
    return CheckCuda(api, api.cuMemcpyDtoDAsync(dst.get(), src.get(), copy_bytes, nullptr), "cuMemcpyDtoDAsync");
  });
  if (!copy_ms.ok()) return copy_ms.status();
  out.bytes_per_second = 2.0 * copy_bytes / (Median(*copy_ms) * 1e-3);
  out.what = "device-to-device copy of 2 GiB (median of 10)";

  // Matrix rate: bf16 8192^3 through cuBLAS with f32 accumulation.
  absl::StatusOr<Cublas> cublas = LoadCublas();
  if (!cublas.ok()) {
    out.what += absl::StrCat("; no matrix probe: ", cublas.status().message());
    return out;
  }
  const int n = 8192;
  const size_t mat_bytes = size_t{2} * n * n;
  DeviceBuffer a(api), b(api), c(api);
  for (DeviceBuffer* m : {&a, &b, &c}) {
    if (absl::Status s = m->Allocate(mat_bytes); !s.ok()) return s;
  }
  if (absl::Status s = FillRandom(api, a.get(), mat_bytes, 2); !s.ok()) return s;
  if (absl::Status s = FillRandom(api, b.get(), mat_bytes, 3); !s.ok()) return s;
  Cublas::Handle handle = nullptr;
  if (int e = cublas->create(&handle); e != 0) return absl::InternalError(absl::StrCat("cublasCreate: status ", e));
  constexpr int kOpN = 0, kBf16 = 14, kCompute32F = 68, kGemmDefault = -1;
  const float alpha = 1, beta = 0;
  absl::StatusOr<std::vector<double>> mm_ms = TimeOnDevice(api, 3, 10, [&]() -> absl::Status {
    const int e = cublas->gemm_ex(handle, kOpN, kOpN, n, n, n, &alpha, reinterpret_cast<const void*>(a.get()), kBf16,
                                  n, reinterpret_cast<const void*>(b.get()), kBf16, n, &beta,
                                  reinterpret_cast<void*>(c.get()), kBf16, n, kCompute32F, kGemmDefault);
    return e == 0 ? absl::OkStatus() : absl::InternalError(absl::StrCat("cublasGemmEx: status ", e));
  });
  cublas->destroy(handle);
  if (!mm_ms.ok()) return mm_ms.status();
  out.flops_per_second = 2.0 * n * n * static_cast<double>(n) / (Median(*mm_ms) * 1e-3);
  out.what += "; bf16 GEMM 8192^3 through cuBLAS (median of 10)";
  return out;
}

}  // namespace kiln::cuda

#include "runtime/backend/backend.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/cpu/probe.h"
#include "runtime/cuda/cuda_bundle.h"
#include "runtime/executor/cpu_executor.h"
#include "runtime/vulkan/vulkan_bundle.h"
#ifdef KILN_WITH_CUDA
#include "runtime/cuda/cuda_executor.h"
#include "runtime/cuda/probe.h"
#endif
#ifdef KILN_WITH_VULKAN
#include "runtime/vulkan/vulkan_executor.h"
#include "runtime/vulkan/vulkan_probe.h"
#endif

namespace kiln {
namespace {

// One GPU backend: how to make its executor from the program's kernels.
struct GpuBackend {
  const char* name;
  absl::StatusOr<std::unique_ptr<Executor>> (*create)(const Program&, const BackendOptions&);
  absl::StatusOr<Ceilings> (*probe)(const BackendOptions&) = nullptr;
  // The codegen target of the device the options name (Unavailable: none here).
  absl::StatusOr<std::string> (*target)(const BackendOptions&) = nullptr;
};

// The GPU backends built into this kiln, fastest first. Each entry returns
// Unavailable (with the reason) when its driver, device or kernels are absent.
const std::vector<GpuBackend>& GpuBackends() {
  static const std::vector<GpuBackend> backends = {
#ifdef KILN_WITH_CUDA
      {"cuda", &cuda::CreateCudaExecutor, &cuda::ProbeCudaCeilings, &cuda::CudaTargetOfDevice},
#endif
#ifdef KILN_WITH_VULKAN
      {"vulkan", &vulkan::CreateVulkanExecutor, &vulkan::ProbeVulkanCeilings, &vulkan::VulkanTargetOfDevice},
#endif
  };
  return backends;
}

absl::StatusOr<std::unique_ptr<Executor>> CreateCpu(const Program& program, const BackendOptions& options) {
  CpuExecutorOptions cpu;
  cpu.threads = options.threads;
  cpu.num_pages = options.num_pages;
  cpu.kv_fraction = options.cpu_kv_fraction;
  cpu.max_kv_pages = options.max_kv_pages;
  absl::StatusOr<std::unique_ptr<CpuExecutor>> ex = CpuExecutor::Create(program.plan, program.weights, cpu);
  if (!ex.ok()) return ex.status();
  return std::unique_ptr<Executor>(std::move(*ex));
}

// Kernels for `gpu` on the device the options name, compiled into `into`
// (the program being selected for) where it has none; a no-op where it has
// them or without `compile`. A kiln without that target's codegen passes the
// backend over like a missing device.
absl::Status CompileKernelsHere(const GpuBackend& gpu, const BackendOptions& options, KernelCompiler compile,
                                Program* into) {
  if (compile == nullptr || into == nullptr || gpu.target == nullptr || into->FindKernels(gpu.name) != nullptr) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> target = gpu.target(options);
  if (!target.ok()) return target.status();
  absl::StatusOr<std::vector<uint8_t>> bytes = compile(*into, *target);
  if (absl::IsUnimplemented(bytes.status())) return absl::UnavailableError(bytes.status().message());
  if (!bytes.ok()) return bytes.status();
  into->kernels.push_back(KernelBundle{*target, *std::move(bytes)});
  return absl::OkStatus();
}

// `into` is `program` itself when kernels may be compiled, else nullptr.
absl::StatusOr<SelectedBackend> Select(const Program& program, const BackendOptions& options, KernelCompiler compile,
                                       Program* into) {
  SelectedBackend selected;
  if (options.backend == "cpu") {
    absl::StatusOr<std::unique_ptr<Executor>> ex = CreateCpu(program, options);
    if (!ex.ok()) return ex.status();
    selected.executor = std::move(*ex);
    return selected;
  }
  std::vector<std::string> passed_over;
  for (const GpuBackend& gpu : GpuBackends()) {
    if (options.backend != "auto" && options.backend != gpu.name) continue;
    absl::StatusOr<std::unique_ptr<Executor>> ex = [&]() -> absl::StatusOr<std::unique_ptr<Executor>> {
      if (absl::Status s = CompileKernelsHere(gpu, options, compile, into); !s.ok()) return s;
      return gpu.create(program, options);
    }();
    if (ex.ok()) {
      selected.executor = std::move(*ex);
      selected.reason = absl::StrJoin(passed_over, "; ");
      return selected;
    }
    // Only "not here" falls through; a real failure (a bad kernel bundle, out of memory) is reported.
    if (options.backend != "auto" || !absl::IsUnavailable(ex.status())) return ex.status();
    passed_over.push_back(absl::StrCat(gpu.name, ": ", ex.status().message()));
  }
  if (options.backend != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown or unbuilt backend '", options.backend, "' (this kiln has: auto, cpu",
                     GpuBackends().empty() ? "" : ", ", [] {
                       std::vector<std::string> names;
                       for (const GpuBackend& g : GpuBackends()) names.push_back(g.name);
                       return absl::StrJoin(names, ", ");
                     }(), ")"));
  }
  absl::StatusOr<std::unique_ptr<Executor>> ex = CreateCpu(program, options);
  if (!ex.ok()) return ex.status();
  selected.executor = std::move(*ex);
  selected.reason = passed_over.empty() ? "no GPU backend in this build" : absl::StrJoin(passed_over, "; ");
  return selected;
}

}  // namespace

absl::StatusOr<SelectedBackend> CreateExecutor(const Program& program, const BackendOptions& options) {
  return Select(program, options, nullptr, nullptr);
}

absl::StatusOr<SelectedBackend> CreateExecutor(Program& program, const BackendOptions& options,
                                               KernelCompiler compile) {
  return Select(program, options, compile, &program);
}

absl::StatusOr<Ceilings> ProbeCeilings(const Executor& executor, const BackendOptions& options) {
  const std::string name = executor.BackendName();
  if (name == "cpu") {
    cpu::ThreadPool pool(options.threads);
    absl::StatusOr<cpu::CpuCeilings> c = cpu::ProbeCpuCeilings(pool);
    if (!c.ok()) return c.status();
    // Prefill's ceiling is the peak of the instruction its matmuls are made of.
    const auto* cpu_executor = dynamic_cast<const CpuExecutor*>(&executor);
    const bool int8 = cpu_executor != nullptr && cpu_executor->UsesIntegerKernels() && c->int8_ops_per_second > 0;
    return Ceilings{
        c->bytes_per_second, int8 ? c->int8_ops_per_second : c->f32_flops_per_second,
        absl::StrCat("parallel read of 512 MiB; peak of ",
                     int8 ? absl::StrCat("int8 multiply-adds (", std::string(cpu::Q8KernelName(c->int8_kernel)), ")")
                          : std::string("f32 FMAs (256-bit)"),
                     ", ", pool.num_threads(), pool.num_threads() == 1 ? " thread" : " threads")};
  }
  for (const GpuBackend& gpu : GpuBackends()) {
    if (name == gpu.name && gpu.probe != nullptr) return gpu.probe(options);
  }
  return absl::UnimplementedError(absl::StrCat("no probe for the ", name, " backend"));
}

std::string DescribeKernelBundle(const std::string& target, std::span<const uint8_t> bytes) {
  if (target.rfind("cuda:", 0) == 0) {
    absl::StatusOr<cuda::CudaBundle> bundle = cuda::ParseBundle(bytes);
    if (!bundle.ok()) return absl::StrCat("  (unreadable: ", bundle.status().message(), ")\n");
    return cuda::DescribeBundle(*bundle);
  }
  if (target == "vulkan") return vulkan::DescribeBundle(bytes);
  return absl::StrCat("  (this kiln cannot read kernels for ", target, ")\n");
}

}  // namespace kiln

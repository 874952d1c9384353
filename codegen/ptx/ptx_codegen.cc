#include "codegen/ptx/ptx_codegen.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "codegen/ptx/nvrtc_compiler.h"
#include "runtime/cuda/cuda_bundle.h"
#include "runtime/cuda/kernel_calls.h"

namespace kiln::codegen::ptx {
namespace {

// The first integer before `unit` in `line` ("12 bytes spill stores" -> 12).
int32_t NumberBefore(absl::string_view line, absl::string_view unit) {
  const size_t at = line.find(unit);
  if (at == absl::string_view::npos) return -1;
  size_t start = at;
  while (start > 0 && line[start - 1] == ' ') --start;
  size_t end = start;
  while (start > 0 && line[start - 1] >= '0' && line[start - 1] <= '9') --start;
  int32_t v = -1;
  return absl::SimpleAtoi(line.substr(start, end - start), &v) ? v : -1;
}

// Per lowered name, the resources in ptxas's verbose lines:
//   ptxas info    : Function properties for NAME
//       N bytes stack frame, N bytes spill stores, N bytes spill loads
//   ptxas info    : Used N registers, ... N bytes smem, ...
void ParseResources(const std::string& log, std::vector<cuda::BundleKernel>& kernels) {
  std::map<std::string, cuda::BundleKernel*> by_name;
  for (cuda::BundleKernel& k : kernels) by_name[k.lowered_name] = &k;
  cuda::BundleKernel* current = nullptr;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    for (absl::string_view marker : {"Function properties for ", "Compiling entry function '"}) {
      const size_t at = line.find(marker);
      if (at == absl::string_view::npos) continue;
      absl::string_view name = line.substr(at + marker.size());
      name = name.substr(0, name.find_first_of("' "));
      auto it = by_name.find(std::string(name));
      current = it == by_name.end() ? nullptr : it->second;
    }
    if (current == nullptr) continue;
    if (line.find("stack frame") != absl::string_view::npos) {
      current->stack_bytes = NumberBefore(line, "bytes stack frame");
      current->spill_store_bytes = NumberBefore(line, "bytes spill stores");
      current->spill_load_bytes = NumberBefore(line, "bytes spill loads");
    }
    if (line.find("Used ") != absl::string_view::npos && line.find("registers") != absl::string_view::npos) {
      current->registers = NumberBefore(line, "registers");
      const int32_t smem = NumberBefore(line, "bytes smem");
      current->shared_bytes = smem < 0 ? 0 : smem;
    }
  }
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> GenerateCudaKernels(const Plan& plan, const std::string& target) {
  absl::StatusOr<uint32_t> sm = cuda::SmOfTarget(target);
  if (!sm.ok()) return sm.status();
  absl::StatusOr<std::vector<std::string>> names = cuda::PlanInstantiations(plan);
  if (!names.ok()) return names.status();
  absl::StatusOr<CompiledModule> module = CompileInstantiations(*names, *sm);
  if (!module.ok()) return module.status();
  cuda::CudaBundle bundle;
  bundle.sm = *sm;
  bundle.ptx = std::move(module->ptx);
  bundle.cubin = std::move(module->cubin);
  bundle.info_log = std::move(module->info_log);
  for (size_t i = 0; i < names->size(); ++i) {
    cuda::BundleKernel k;
    k.name_expression = (*names)[i];
    k.lowered_name = module->lowered_names[i];
    bundle.kernels.push_back(std::move(k));
  }
  ParseResources(bundle.info_log, bundle.kernels);
  return cuda::SerializeBundle(bundle);
}

}  // namespace kiln::codegen::ptx

#include "codegen/codegen.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#ifdef KILN_WITH_PTX
#include "codegen/ptx/ptx_codegen.h"
#endif
#ifdef KILN_WITH_SPIRV
#include "codegen/spirv/glslang_next.h"
#include "codegen/spirv/spirv_codegen.h"
#endif

namespace kiln::codegen {

absl::StatusOr<std::vector<uint8_t>> GenerateKernels(const Plan& plan, const std::string& target) {
#ifdef KILN_WITH_PTX
  if (absl::StartsWith(target, "cuda:")) return ptx::GenerateCudaKernels(plan, target);
#endif
#ifdef KILN_WITH_SPIRV
  if (target == "vulkan") return spirv::GenerateVulkanKernels(plan);
#endif
  return absl::UnimplementedError(absl::StrCat("this kiln was built without codegen for target '", target, "'"));
}

std::string GeneratorVariant(const std::string& target) {
#ifdef KILN_WITH_SPIRV
  if (target == "vulkan") return spirv::GlslangNextAvailable().ok() ? "glslang-next" : "glslang";
#endif
  return "";
}

}  // namespace kiln::codegen

// Codegen's one entry point for the compile driver: the kernels of one GPU
// target for a plan, as the bytes of the artifact section that target's
// runtime backend reads. Template and compile errors name the template and
// its constants.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/plan.h"

namespace kiln::codegen {

// `target` is "cuda:sm_80", "cuda:sm_89", "cuda:sm_90" or "vulkan".
absl::StatusOr<std::vector<uint8_t>> GenerateKernels(const Plan& plan, const std::string& target);

// What besides the plan decides `target`'s kernels on this machine, for a
// cache of them: for vulkan, whether the newer glslang (and so the
// workgroup-scope matmuls) is present; "" otherwise.
std::string GeneratorVariant(const std::string& target);

}  // namespace kiln::codegen

// Vulkan codegen: every kernel instance a plan needs (runtime/vulkan/
// vulkan_kernels.h), instantiated from the embedded GLSL templates, compiled
// with glslang, validated, optimised with spirv-opt's performance passes and
// validated again, as one kernels bundle (runtime/vulkan/vulkan_bundle.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/plan.h"
#include "runtime/vulkan/vulkan_kernels.h"

namespace kiln::codegen::spirv {

// The GLSL source of one instance: constants, shared code, the template.
absl::StatusOr<std::string> InstanceSource(const vulkan::KernelInstance& instance);

// Whether an instance's template needs the newer glslang of glslang_next.h
// (workgroup-scope cooperative matrices): compiled and validated there, not
// optimised (Debian 12's spirv-opt does not know its instructions).
bool NeedsGlslangNext(const vulkan::KernelInstance& instance);

// Compiled, validated and optimised SPIR-V of one instance; errors name the
// template and its constants.
absl::StatusOr<std::vector<uint32_t>> CompileInstance(const vulkan::KernelInstance& instance);

// The bundle of every distinct instance the plan's launches need; those that
// need the newer glslang are left out, with a note on stderr, where it is not
// installed (the Vulkan backend then runs their older variants).
absl::StatusOr<std::vector<uint8_t>> GenerateVulkanKernels(const Plan& plan);

}  // namespace kiln::codegen::spirv

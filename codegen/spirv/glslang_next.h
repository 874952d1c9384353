// A newer glslang and SPIRV-Tools than Debian 12 packages, for the templates
// that need them: GL_NV_cooperative_matrix2 (workgroup-scope cooperative
// matrices, SPIR-V 1.6), which Debian 12's glslang (11.13) and SPIRV-Tools
// (2023.1) do not know. Loaded at run time from slang's libslang-glslang
// (the slangpy wheel on PyPI carries it; scripts/setup.sh fetches it to
// ~/.cache/kiln/slang): KILN_SLANG_GLSLANG names the file, else that cache.
// Without it the templates that need it are left out of an artifact, and the
// Vulkan backend runs their older variants.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::codegen::spirv {

// Whether the library loaded (the first call tries), and if not, why.
absl::Status GlslangNextAvailable();

// GLSL compute shader -> SPIR-V 1.6 for Vulkan 1.3, entry point main.
absl::StatusOr<std::vector<uint32_t>> CompileGlslNext(const std::string& source, const std::string& name);

// The library's SPIRV-Tools validator (no messages: only whether it passes).
absl::Status ValidateNext(const std::vector<uint32_t>& words);

}  // namespace kiln::codegen::spirv

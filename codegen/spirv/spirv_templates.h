// The GLSL kernel templates (kernels-templates/vulkan), embedded at build time.
#pragma once

#include <string_view>
#include <vector>

namespace kiln::codegen::spirv {

struct EmbeddedTemplate {
  std::string_view file;  // "matmul.comp", "common.glsl"
  std::string_view text;
};

const std::vector<EmbeddedTemplate>& EmbeddedTemplates();

}  // namespace kiln::codegen::spirv

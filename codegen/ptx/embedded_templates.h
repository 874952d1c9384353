// The CUDA kernel templates (kernels-templates/cuda), embedded into the
// binary at build time: codegen never reads the source tree at run time.
#pragma once

#include <string_view>
#include <vector>

namespace kiln::codegen::ptx {

struct TemplateSource {
  std::string_view name;  // as #included: "matmul.cuh"
  std::string_view text;
};

const std::vector<TemplateSource>& EmbeddedTemplates();

}  // namespace kiln::codegen::ptx

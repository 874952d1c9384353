// KILN_KERNEL_TEMPLATES=DIR: codegen reads a kernel template from
// DIR/<language>/<file> (language "cuda" or "vulkan", the folders of
// kernels-templates/) where that file exists, instead of the copy embedded at
// build time, so that a kernel can be changed and compiled into an artifact
// without rebuilding kiln (a GPU experiment needs only the new artifact).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln::codegen {

// The file's text, or nullopt where the variable is unset or the file is not
// there. Says on stderr, once per file, which templates came from DIR.
std::optional<std::string> TemplateFromDir(std::string_view language, std::string_view file);

}  // namespace kiln::codegen

// The bytes of an artifact's "vulkan" kernels section: SPIR-V modules, each
// named by its template and constants (vulkan_kernels.h's instance key).
//
// Layout (little-endian): "KILNVKB\0" | u32 version (1) | u32 module count |
// per module: four strings (u32 length + bytes: template, constants, entry
// point, workgroup size as text) then u32 SPIR-V byte count + the words.
// Parsing checks every length against what is left, the SPIR-V magic and a
// whole number of words, so a damaged section is an error, never a read past
// its end.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::vulkan {

struct SpirvModule {
  std::string template_name;
  std::string constants;  // "K=64 NUM_W=3 ..."
  std::string entry_point = "main";
  int64_t workgroup_size = 0;
  std::vector<uint32_t> words;

  std::string Key() const { return template_name + " " + constants; }
};

std::vector<uint8_t> SerializeBundle(const std::vector<SpirvModule>& modules);
absl::StatusOr<std::vector<SpirvModule>> ParseBundle(std::span<const uint8_t> bytes);

// One line per module: template, constants, SPIR-V size (for `kiln inspect`).
std::string DescribeBundle(std::span<const uint8_t> bytes);

}  // namespace kiln::vulkan

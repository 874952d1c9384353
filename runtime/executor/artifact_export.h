// Writes a compiled model as a .kiln artifact: metadata, the final IR, the
// plan, the tokenizer (a vocabulary-only GGUF) and every weight of the plan
// in the storage the plan gives it (repacked from the source file where the
// compiler changed it).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace kiln {

struct ArtifactContents {
  std::string source;         // the .gguf file or Hugging Face folder compiled
  std::string plan_json;      // kiln-plan-v1
  std::string ir_text;        // final IR
  std::string metadata_json;  // what produced it: kiln version, target, options
  std::string target;         // "cpu", "vulkan", "cuda:sm_90" (comma-separated when several)
  // One kernels section per GPU target (codegen's bundles).
  std::vector<std::pair<std::string, std::vector<uint8_t>>> kernels;
  // No weights section: the runtime binds them from the source file.
  bool program_only = false;
};

// `progress(done, total)` reports weights as they are written.
absl::Status WriteArtifact(const std::string& path, const ArtifactContents& contents,
                           const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace kiln

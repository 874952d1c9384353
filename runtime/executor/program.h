// A model ready for an executor: its plan, where its weights come from and
// its tokenizer, loaded from a compiled artifact or from a GGUF file with a
// plan compiled in memory (the program-only form: weights bind from the
// original file).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/plan.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {

class Artifact;
class GgufFile;

// The kernels of one GPU target as the compiler's codegen wrote them (the
// bytes of an artifact's kernels section named `target`); only the backend of
// that target reads them.
struct KernelBundle {
  std::string target;  // "cuda:sm_90", "vulkan"
  std::vector<uint8_t> bytes;
};

struct Program {
  Plan plan;
  WeightSource weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string description;  // what was loaded, for messages
  std::vector<KernelBundle> kernels;
  // The plan as compiled, for a model compiled in memory (the key of the
  // kernels compiled for it); empty for an artifact.
  std::string plan_json;

  // The bundle whose target is `target` or starts with it ("cuda" matches
  // "cuda:sm_90"); nullptr when the program has none.
  const KernelBundle* FindKernels(std::string_view target) const;

  // What backs `weights` (and the tokenizer's source) stays mapped here.
  std::shared_ptr<const Artifact> artifact;
  std::shared_ptr<const GgufFile> gguf;
};

// Reads plan, tokenizer, kernels and weights of a .kiln artifact, checking
// them. A program-only artifact (no weights section) binds its weights from
// `weights_file`, the GGUF it was compiled from (or one of the same shape);
// giving `weights_file` for an artifact that holds weights is an error.
absl::StatusOr<Program> LoadArtifactProgram(const std::string& path, const std::string& weights_file = "");

// A GGUF file whose plan was compiled in memory.
absl::StatusOr<Program> LoadGgufProgram(const std::string& path, const std::string& plan_json);

// True when the file starts with the artifact magic.
bool LooksLikeArtifact(const std::string& path);

}  // namespace kiln

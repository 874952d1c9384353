// A model ready for an executor: its plan, where its weights come from and
// its tokenizer, loaded from a compiled artifact or from a GGUF file with a
// plan compiled in memory (the program-only form: weights bind from the
// original file).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/executor/cpu_executor.h"
#include "runtime/executor/plan.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {

class Artifact;
class GgufFile;

struct Program {
  Plan plan;
  WeightSource weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string description;  // what was loaded, for messages

  // What backs `weights` (and the tokenizer's source) stays mapped here.
  std::shared_ptr<const Artifact> artifact;
  std::shared_ptr<const GgufFile> gguf;
};

// Reads plan, tokenizer and weights of a .kiln artifact, checking them.
absl::StatusOr<Program> LoadArtifactProgram(const std::string& path);

// A GGUF file whose plan was compiled in memory.
absl::StatusOr<Program> LoadGgufProgram(const std::string& path, const std::string& plan_json);

// True when the file starts with the artifact magic.
bool LooksLikeArtifact(const std::string& path);

}  // namespace kiln

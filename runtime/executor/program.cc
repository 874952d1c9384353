#include "runtime/executor/program.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "runtime/artifact/artifact.h"
#include "runtime/formats/gguf.h"

namespace kiln {

bool LooksLikeArtifact(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in.gcount() == 8 && std::memcmp(magic, kArtifactMagic, 8) == 0;
}

absl::StatusOr<Program> LoadArtifactProgram(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Artifact>> art = Artifact::Open(path);
  if (!art.ok()) return art.status();
  Program program;
  program.artifact = std::shared_ptr<const Artifact>(std::move(*art));
  const Artifact& a = *program.artifact;
  const ArtifactSection* plan = a.Find(SectionKind::kPlan);
  if (plan == nullptr) return absl::InvalidArgumentError(absl::StrCat(path, ": the artifact has no plan section"));
  absl::StatusOr<Plan> parsed = ParsePlan(plan->text());
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  program.plan = *std::move(parsed);

  const ArtifactSection* tok = a.Find(SectionKind::kTokenizer);
  if (tok == nullptr) return absl::InvalidArgumentError(absl::StrCat(path, ": the artifact has no tokenizer section"));
  // The tokenizer section is a vocabulary-only GGUF.
  absl::StatusOr<std::unique_ptr<GgufFile>> vocab = GgufFile::Parse(tok->bytes, path + " (tokenizer section)");
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**vocab);
  if (!tokenizer.ok()) return tokenizer.status();
  program.tokenizer = *std::move(tokenizer);

  std::shared_ptr<const Artifact> keep = program.artifact;
  program.weights = [keep, path](const std::string& name) -> absl::StatusOr<WeightBytes> {
    const ArtifactWeight* w = keep->FindWeight(name);
    if (w == nullptr) return absl::NotFoundError(absl::StrCat(path, ": weight '", name, "' is not in the artifact"));
    absl::StatusOr<cpu::WeightStorage> storage = cpu::ParseWeightStorage(w->storage);
    if (!storage.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": weight '", name, "': ", storage.status().message()));
    return WeightBytes{*storage, w->data};
  };
  program.description = absl::StrCat(path, " (artifact)");
  return program;
}

absl::StatusOr<Program> LoadGgufProgram(const std::string& path, const std::string& plan_json) {
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(path);
  if (!gguf.ok()) return gguf.status();
  Program program;
  program.gguf = std::shared_ptr<const GgufFile>(std::move(*gguf));
  absl::StatusOr<Plan> plan = ParsePlan(plan_json);
  if (!plan.ok()) return plan.status();
  program.plan = *std::move(plan);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(*program.gguf);
  if (!tokenizer.ok()) return tokenizer.status();
  program.tokenizer = *std::move(tokenizer);
  std::shared_ptr<const GgufFile> keep = program.gguf;
  program.weights = [keep](const std::string& name) -> absl::StatusOr<WeightBytes> {
    const GgufTensor* t = keep->FindTensor(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat(keep->name(), ": tensor '", name, "' not found"));
    return WeightBytes{cpu::WeightStorage::Ggml(t->type), t->bytes()};
  };
  program.description = path;
  return program;
}

}  // namespace kiln

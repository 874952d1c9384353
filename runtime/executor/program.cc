#include "runtime/executor/program.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "runtime/artifact/artifact.h"
#include "runtime/formats/gguf.h"

namespace kiln {

const KernelBundle* Program::FindKernels(std::string_view target) const {
  for (const KernelBundle& k : kernels) {
    if (k.target == target || (k.target.size() > target.size() && k.target.compare(0, target.size(), target) == 0 &&
                               k.target[target.size()] == ':')) {
      return &k;
    }
  }
  return nullptr;
}

bool LooksLikeArtifact(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in.gcount() == 8 && std::memcmp(magic, kArtifactMagic, 8) == 0;
}

namespace {

WeightSource GgufWeights(std::shared_ptr<const GgufFile> gguf) {
  return [gguf](const std::string& name) -> absl::StatusOr<WeightBytes> {
    const GgufTensor* t = gguf->FindTensor(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat(gguf->name(), ": tensor '", name, "' not found"));
    return WeightBytes{cpu::WeightStorage::Ggml(t->type), t->bytes(), gguf->file_mapped()};
  };
}

}  // namespace

absl::StatusOr<Program> LoadArtifactProgram(const std::string& path, const std::string& weights_file) {
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

  const bool program_only = a.Find(SectionKind::kWeights) == nullptr;
  if (program_only) {
    if (weights_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " is a program-only artifact (no weights): give the model file it was compiled from with --weights"));
    }
    if (LooksLikeArtifact(weights_file)) {
      // Another artifact's weights: the program recompiled (a newer kiln, another
      // target) binds to weights already shipped, with no GGUF at hand.
      absl::StatusOr<std::unique_ptr<Artifact>> source_art = Artifact::Open(weights_file);
      if (!source_art.ok()) return source_art.status();
      if ((*source_art)->Find(SectionKind::kWeights) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("--weights ", weights_file, " is program-only too: it holds no weights"));
      }
      absl::StatusOr<Program> source = LoadArtifactProgram(weights_file, "");
      if (!source.ok()) return source.status();
      program.weights = source->weights;
    } else {
      absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(weights_file);
      if (!gguf.ok()) return gguf.status();
      program.gguf = std::shared_ptr<const GgufFile>(std::move(*gguf));
      program.weights = GgufWeights(program.gguf);
    }
    program.description = absl::StrCat(path, " (program) + ", weights_file);
  } else if (!weights_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds its own weights: --weights is only for program-only artifacts"));
  }
  for (const ArtifactSection& section : a.sections()) {
    if (section.kind != SectionKind::kKernels) continue;
    program.kernels.push_back(KernelBundle{section.name, {section.bytes.begin(), section.bytes.end()}});
  }
  if (program_only) return program;
  std::shared_ptr<const Artifact> keep = program.artifact;
  program.weights = [keep, path](const std::string& name) -> absl::StatusOr<WeightBytes> {
    const ArtifactWeight* w = keep->FindWeight(name);
    if (w == nullptr) return absl::NotFoundError(absl::StrCat(path, ": weight '", name, "' is not in the artifact"));
    absl::StatusOr<cpu::WeightStorage> storage = cpu::ParseWeightStorage(w->storage);
    if (!storage.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": weight '", name, "': ", storage.status().message()));
    return WeightBytes{*storage, w->data, keep->file_mapped()};
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
  program.plan_json = plan_json;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(*program.gguf);
  if (!tokenizer.ok()) return tokenizer.status();
  program.tokenizer = *std::move(tokenizer);
  program.weights = GgufWeights(program.gguf);
  program.description = path;
  return program;
}

}  // namespace kiln

#include "runtime/executor/artifact_export.h"

#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/artifact/artifact_writer.h"
#include "runtime/executor/plan.h"
#include "runtime/executor/repack.h"
#include "runtime/formats/gguf.h"
#include "runtime/formats/gguf_writer.h"
#include "runtime/formats/safetensors.h"

namespace kiln {
namespace {

// A vocabulary-only GGUF holding the source's tokenizer.* keys.
absl::StatusOr<std::vector<uint8_t>> TokenizerBlob(const GgufFile& gguf) {
  GgufWriter w;
  for (const auto& [key, value] : gguf.metadata()) {
    if (key.rfind("tokenizer.", 0) == 0 || key == "general.architecture") w.Set(key, value);
  }
  return w.WriteToBuffer();
}

absl::StatusOr<cpu::WeightStorage> SafetensorsStorage(const SafetensorsTensor& t) {
  switch (t.dtype) {
    case SafetensorsDtype::kF32: return cpu::WeightStorage::Ggml(GgmlType::kF32);
    case SafetensorsDtype::kF16: return cpu::WeightStorage::Ggml(GgmlType::kF16);
    case SafetensorsDtype::kBF16: return cpu::WeightStorage::Ggml(GgmlType::kBF16);
    default:
      return absl::UnimplementedError(absl::StrCat("tensor '", t.name, "' has dtype ",
                                                   std::string(SafetensorsDtypeName(t.dtype))));
  }
}

}  // namespace

absl::Status WriteArtifact(const std::string& path, const ArtifactContents& c,
                           const std::function<void(size_t, size_t)>& progress) {
  absl::StatusOr<Plan> plan = ParsePlan(c.plan_json);
  if (!plan.ok()) return plan.status();

  // Where the source's weights are, with what keeps them mapped.
  std::shared_ptr<GgufFile> gguf;
  std::shared_ptr<SafetensorsCheckpoint> hf;
  if (std::filesystem::is_directory(c.source)) {
    absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::OpenFolder(c.source);
    if (!ckpt.ok()) return ckpt.status();
    hf = std::move(*ckpt);
  } else {
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(c.source);
    if (!file.ok()) return file.status();
    gguf = std::move(*file);
  }

  ArtifactWriter w;
  if (absl::Status s = w.AddSection(SectionKind::kMetadata, "", c.metadata_json); !s.ok()) return s;
  if (absl::Status s = w.AddSection(SectionKind::kIrText, "", c.ir_text); !s.ok()) return s;
  if (absl::Status s = w.AddSection(SectionKind::kPlan, "", c.plan_json); !s.ok()) return s;
  for (const auto& [target, bytes] : c.kernels) {
    if (absl::Status s = w.AddSection(SectionKind::kKernels, target, bytes); !s.ok()) return s;
  }
  if (gguf) {
    absl::StatusOr<std::vector<uint8_t>> vocab = TokenizerBlob(*gguf);
    if (!vocab.ok()) return vocab.status();
    if (absl::Status s = w.AddSection(SectionKind::kTokenizer, "", *std::move(vocab)); !s.ok()) return s;
  }

  if (c.program_only) return w.Write(path);
  const size_t total = plan->weights.size();
  auto done = std::make_shared<size_t>(0);
  for (const PlanWeight& pw : plan->weights) {
    cpu::WeightStorage from;
    std::span<const uint8_t> bytes;
    if (gguf) {
      const GgufTensor* t = gguf->FindTensor(pw.name);
      if (t == nullptr) return absl::NotFoundError(absl::StrCat(c.source, ": tensor '", pw.name, "' not found"));
      from = cpu::WeightStorage::Ggml(t->type);
      bytes = t->bytes();
    } else {
      const SafetensorsTensor* t = hf->Find(pw.name);
      if (t == nullptr) return absl::NotFoundError(absl::StrCat(c.source, ": tensor '", pw.name, "' not found"));
      absl::StatusOr<cpu::WeightStorage> s = SafetensorsStorage(*t);
      if (!s.ok()) return s.status();
      from = *s;
      bytes = t->data;
    }
    absl::StatusOr<cpu::WeightStorage> to = cpu::ParseWeightStorage(pw.storage);
    if (!to.ok()) return to.status();
    const int64_t rows = pw.shape.size() == 2 ? pw.shape[0] : 1;
    const int64_t cols = pw.shape.back();
    const bool same = from.Name() == to->Name();
    const std::string name = pw.name;
    absl::Status added = w.AddWeight(pw.name, to->Name(), pw.shape,
                                     [=, keep_gguf = gguf, keep_hf = hf](std::span<uint8_t> dst) -> absl::Status {
                                       absl::Status status = absl::OkStatus();
                                       if (same) {
                                         if (dst.size() != bytes.size()) {
                                           status = absl::InternalError(absl::StrCat("weight '", name, "': size"));
                                         } else {
                                           std::memcpy(dst.data(), bytes.data(), bytes.size());
                                         }
                                       } else {
                                         absl::StatusOr<std::vector<uint8_t>> r =
                                             RepackWeight(from, *to, rows, cols, bytes);
                                         if (!r.ok()) return r.status();
                                         if (r->size() != dst.size()) {
                                           return absl::InternalError(absl::StrCat("weight '", name, "': repacked size"));
                                         }
                                         std::memcpy(dst.data(), r->data(), r->size());
                                       }
                                       if (progress) progress(++*done, total);
                                       return status;
                                     });
    if (!added.ok()) return added;
  }
  return w.Write(path);
}

}  // namespace kiln

#include "runtime/executor/artifact_export.h"

#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/artifact/artifact_writer.h"
#include "runtime/cpu/row_groups.h"
#include "runtime/executor/plan.h"
#include "runtime/executor/repack.h"
#include "runtime/formats/gguf.h"
#include "runtime/formats/gguf_writer.h"
#include "runtime/formats/quant.h"
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
  // For the CPU alone, the matmuls' q4_K and q6_K weights are written in the
  // CPU's groups of eight rows, which it then reads where they lie (no
  // packing at load, nor a second copy in memory; a CPU without the group
  // kernels unpacks them). Not a weight any other launch reads (an
  // embedding table gathers single rows).
  std::set<std::string> matmul_only;
  if (c.target == "cpu") {
    std::set<std::string> other;
    for (const PlanLaunch& l : plan->launches) {
      const bool matmul = l.op == "matmul" || l.op == "fused_matmul";
      for (const PlanBinding& b : l.bindings) {
        if (b.kind == PlanBinding::Kind::kWeight) (matmul ? matmul_only : other).insert(b.name);
      }
    }
    for (const std::string& name : other) matmul_only.erase(name);
  }
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
    const bool in_groups = matmul_only.contains(pw.name) && pw.shape.size() == 2 && !to->grouped &&
                           rows >= cpu::kRowGroupRows && RowGroupsWeightBytes(to->ggml, rows, cols).has_value();
    const std::string name = pw.name;
    const std::string storage = in_groups ? absl::StrCat(to->Name(), std::string(kRowGroupsSuffix)) : to->Name();
    absl::Status added = w.AddWeight(
        pw.name, storage, pw.shape, [=, keep_gguf = gguf, keep_hf = hf](std::span<uint8_t> dst) -> absl::Status {
          // The rows as the plan stores them: the file's, or repacked.
          std::span<const uint8_t> stored = bytes;
          std::vector<uint8_t> repacked;
          if (!same) {
            absl::StatusOr<std::vector<uint8_t>> r = RepackWeight(from, *to, rows, cols, bytes);
            if (!r.ok()) return r.status();
            repacked = *std::move(r);
            stored = repacked;
          }
          const uint64_t row_bytes = *to->RowBytes(cols);
          if (stored.size() != row_bytes * rows) return absl::InternalError(absl::StrCat("weight '", name, "': size"));
          if (in_groups) {
            // dst's size is RowGroupsWeightBytes (the writer's StorageBytes).
            const int64_t groups = rows / cpu::kRowGroupRows, head = groups * cpu::kRowGroupRows;
            cpu::PackRowGroups(to->ggml, stored.data(), cols, 0, groups, dst.data());
            const uint64_t tail = (rows - head) * row_bytes;
            std::memcpy(dst.data() + dst.size() - tail, stored.data() + head * row_bytes, tail);
          } else {
            if (dst.size() != stored.size()) return absl::InternalError(absl::StrCat("weight '", name, "': size"));
            std::memcpy(dst.data(), stored.data(), stored.size());
          }
          if (progress) progress(++*done, total);
          return absl::OkStatus();
        });
    if (!added.ok()) return added;
  }
  return w.Write(path);
}

}  // namespace kiln

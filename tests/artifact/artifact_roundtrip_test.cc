// Artifacts written by ArtifactWriter read back by Artifact: every section
// kind, every family of weight storage, streaming fills, the program-only
// form, and the writer's refusals.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/artifact/artifact.h"
#include "runtime/artifact/artifact_writer.h"
#include "tests/artifact/sample_artifact.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WriteSample(const std::string& test, bool with_weights = true) {
  const std::filesystem::path path = testing::ScratchDir(test) / "model.kart";
  ArtifactWriter w;
  EXPECT_TRUE(testing::AddSampleContent(w, with_weights).ok());
  const absl::Status s = w.Write(path.string());
  EXPECT_TRUE(s.ok()) << s;
  return path.string();
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  const std::string s = testing::ReadFileOrDie(path);
  return {s.begin(), s.end()};
}

TEST(ArtifactRoundTrip, EverySectionKind) {
  const std::string path = WriteSample("ArtifactRoundTrip.EverySectionKind");
  absl::StatusOr<std::unique_ptr<Artifact>> a = Artifact::Open(path);
  ASSERT_TRUE(a.ok()) << a.status();
  const Artifact& art = **a;
  EXPECT_EQ(art.version(), 1u);
  EXPECT_EQ(art.file_size(), std::filesystem::file_size(path));

  std::vector<SectionKind> kinds;
  for (const ArtifactSection& s : art.sections()) {
    kinds.push_back(s.kind);
    EXPECT_EQ(s.offset % 64, 0u) << SectionLabel(s.kind, s.name);
    EXPECT_EQ(s.offset % s.alignment, 0u) << SectionLabel(s.kind, s.name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.bytes.data()) % 64, 0u) << SectionLabel(s.kind, s.name);
  }
  EXPECT_THAT(kinds, ElementsAre(SectionKind::kMetadata, SectionKind::kIrText, SectionKind::kPlan,
                                 SectionKind::kTokenizer, SectionKind::kKernels, SectionKind::kKernels,
                                 SectionKind::kWeightsIndex, SectionKind::kWeights));

  ASSERT_NE(art.Find(SectionKind::kMetadata), nullptr);
  EXPECT_EQ(art.Find(SectionKind::kMetadata)->text(), testing::kSampleMetadata);
  EXPECT_EQ(art.Find(SectionKind::kIrText)->text(), testing::kSampleIr);
  EXPECT_EQ(art.Find(SectionKind::kPlan)->text(), testing::kSamplePlan);
  EXPECT_EQ(art.Find(SectionKind::kTokenizer)->text(), testing::kSampleTokenizer);
  ASSERT_NE(art.Find(SectionKind::kKernels, "cuda:sm_90"), nullptr);
  EXPECT_EQ(art.Find(SectionKind::kKernels, "cuda:sm_90")->text(), testing::kSamplePtx);
  const ArtifactSection* spirv = art.Find(SectionKind::kKernels, "vulkan:spirv1.3");
  ASSERT_NE(spirv, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(spirv->bytes.begin(), spirv->bytes.end()), testing::kSampleSpirv);
  EXPECT_EQ(art.Find(SectionKind::kKernels), nullptr);  // no kernels section is unnamed
  EXPECT_EQ(art.Find(SectionKind::kKernels, "cuda:sm_80"), nullptr);
  EXPECT_EQ(art.Find(SectionKind::kWeights)->offset % 4096, 0u);  // page-aligned for pinning
}

TEST(ArtifactRoundTrip, WeightsKeepTheirBytesShapeAndStorage) {
  const std::string path = WriteSample("ArtifactRoundTrip.Weights");
  absl::StatusOr<std::unique_ptr<Artifact>> a = Artifact::Open(path);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::vector<testing::SampleWeight> expected = testing::SampleWeights();
  ASSERT_EQ((*a)->weights().size(), expected.size());
  const ArtifactSection* section = (*a)->Find(SectionKind::kWeights);
  ASSERT_NE(section, nullptr);
  for (size_t i = 0; i < expected.size(); ++i) {
    const testing::SampleWeight& want = expected[i];
    const ArtifactWeight& got = (*a)->weights()[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ((*a)->FindWeight(want.name), &got);
    EXPECT_EQ(got.storage, want.storage);
    EXPECT_EQ(got.shape, want.shape);
    EXPECT_EQ(got.nbytes, want.bytes.size());
    EXPECT_EQ(got.offset % kWeightAlignment, 0u);
    EXPECT_EQ(got.data.data(), section->bytes.data() + got.offset);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data.data()) % 64, 0u) << got.name;
    EXPECT_EQ(std::vector<uint8_t>(got.data.begin(), got.data.end()), want.bytes) << got.name;
  }
  EXPECT_EQ((*a)->FindWeight("output.weight"), nullptr);
  // Opened from the file, its pages can be dropped and read back (the CPU
  // executor does, for weights it has repacked); parsed from memory, not.
  EXPECT_TRUE((*a)->file_mapped());
  const std::string text = testing::ReadFileOrDie(path);
  const std::vector<uint8_t> copy(text.begin(), text.end());
  absl::StatusOr<std::unique_ptr<Artifact>> parsed = Artifact::Parse(copy, "copy");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE((*parsed)->file_mapped());

  // The quantised tensors decode from the mapped file to their source values.
  const ArtifactWeight* q8 = (*a)->FindWeight("token_embd.weight");
  std::vector<float> decoded(16 * 64);
  ASSERT_TRUE(Dequantize(GgmlType::kQ8_0, q8->data, decoded).ok());
  for (size_t i = 0; i < decoded.size(); ++i) EXPECT_NEAR(decoded[i], expected[1].values[i], 1.0 / 127) << i;
  const ArtifactWeight* norm = (*a)->FindWeight("blk.0.attn_norm.weight");
  std::vector<float> floats(64);
  std::memcpy(floats.data(), norm->data.data(), norm->nbytes);
  EXPECT_EQ(floats, expected[0].values);
}

TEST(ArtifactRoundTrip, WeightsIndexIsReadableJson) {
  const std::string path = WriteSample("ArtifactRoundTrip.Index");
  absl::StatusOr<std::unique_ptr<Artifact>> a = Artifact::Open(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(std::string((*a)->Find(SectionKind::kWeightsIndex)->text()),
              HasSubstr(R"({"version":1,"tensors":[{"name":"blk.0.attn_norm.weight","storage":"f32","shape":[64],)"
                        R"("offset":0,"nbytes":256},{"name":"token_embd.weight","storage":"q8_0","shape":[16,64],)"
                        R"("offset":256,"nbytes":1088})"));
}

TEST(ArtifactRoundTrip, ProgramOnlyArtifactHasNoWeightSections) {
  const std::string path = WriteSample("ArtifactRoundTrip.ProgramOnly", /*with_weights=*/false);
  absl::StatusOr<std::unique_ptr<Artifact>> a = Artifact::Open(path);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->sections().size(), 6u);
  EXPECT_EQ((*a)->Find(SectionKind::kWeights), nullptr);
  EXPECT_EQ((*a)->Find(SectionKind::kWeightsIndex), nullptr);
  EXPECT_TRUE((*a)->weights().empty());
  EXPECT_TRUE((*a)->VerifyWeights().ok());
}

TEST(ArtifactRoundTrip, StreamedFillsAndProgress) {
  const std::filesystem::path path = testing::ScratchDir("ArtifactRoundTrip.Streamed") / "big.kart";
  ArtifactWriter w;
  constexpr uint64_t kSize = 3 << 20;
  ASSERT_TRUE(w.AddSection(SectionKind::kKernels, "cuda:sm_90", kSize, [](std::span<uint8_t> dst) {
                 for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<uint8_t>(i * 7);
                 return absl::OkStatus();
               }).ok());
  ASSERT_TRUE(w.AddSection(SectionKind::kMetadata, "empty", std::string()).ok());
  ASSERT_TRUE(w.AddSection(SectionKind::kPlan, "", std::string("{}"), 8192).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(w.AddWeight(absl::StrCat("w", i), "f16", {3, 5 + i}, [i](std::span<uint8_t> dst) {
                   std::memset(dst.data(), 0x40 + i, dst.size());
                   return absl::OkStatus();
                 }).ok());
  }
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ASSERT_TRUE(w.Write(path.string(), [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); }).ok());
  const uint64_t file_size = std::filesystem::file_size(path);
  ASSERT_EQ(calls.size(), 3u + 1 + 3);  // three sections, the index, three tensors
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].second, file_size);
    if (i > 0) EXPECT_GE(calls[i].first, calls[i - 1].first);
  }
  EXPECT_EQ(calls.back().first, file_size);

  absl::StatusOr<std::unique_ptr<Artifact>> a = Artifact::Open(path.string());
  ASSERT_TRUE(a.ok()) << a.status();
  const ArtifactSection* big = (*a)->Find(SectionKind::kKernels, "cuda:sm_90");
  ASSERT_EQ(big->bytes.size(), kSize);
  EXPECT_EQ(big->bytes[kSize - 1], static_cast<uint8_t>((kSize - 1) * 7));
  EXPECT_EQ((*a)->Find(SectionKind::kMetadata, "empty")->bytes.size(), 0u);
  EXPECT_EQ((*a)->Find(SectionKind::kPlan)->offset % 8192, 0u);
  EXPECT_EQ((*a)->Find(SectionKind::kPlan)->alignment, 8192u);
  const ArtifactWeight* w2 = (*a)->FindWeight("w2");
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->nbytes, 3u * 7 * 2);
  EXPECT_EQ(w2->data[0], 0x42);
  EXPECT_EQ(w2->offset % 64, 0u);
}

TEST(ArtifactRoundTrip, WritingIsDeterministicAndReplacesTheFile) {
  const std::string first = WriteSample("ArtifactRoundTrip.Deterministic");
  const std::vector<uint8_t> bytes = ReadBytes(first);
  ArtifactWriter w;
  ASSERT_TRUE(testing::AddSampleContent(w).ok());
  ASSERT_TRUE(w.Write(first).ok());  // over the existing file
  EXPECT_EQ(ReadBytes(first), bytes);
  EXPECT_FALSE(std::filesystem::exists(first + ".part"));
}

TEST(ArtifactRoundTrip, FailedFillLeavesNothingBehind) {
  const std::filesystem::path dir = testing::ScratchDir("ArtifactRoundTrip.FailedFill");
  const std::string path = (dir / "model.kart").string();
  ArtifactWriter w;
  ASSERT_TRUE(w.AddSection(SectionKind::kMetadata, "", std::string("{}")).ok());
  ASSERT_TRUE(w.AddWeight("blk.0.attn_q.weight", "q8_0", {2, 32}, [](std::span<uint8_t>) {
                 return absl::DataLossError("repack source is gone");
               }).ok());
  const absl::Status s = w.Write(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("model.kart: weight 'blk.0.attn_q.weight': repack source is gone"));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(ArtifactRoundTrip, UnwritablePathIsAnError) {
  ArtifactWriter w;
  ASSERT_TRUE(w.AddSection(SectionKind::kMetadata, "", std::string("{}")).ok());
  const absl::Status s = w.Write("/nonexistent-dir/model.kart");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/model.kart.part: cannot create: No such file or directory"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
}

TEST(ArtifactRoundTrip, VerifyWeightsCanBeDeferred) {
  const std::string path = WriteSample("ArtifactRoundTrip.Deferred");
  std::vector<uint8_t> bytes = ReadBytes(path);
  absl::StatusOr<std::unique_ptr<Artifact>> clean = Artifact::Parse(bytes, "model.kart");
  ASSERT_TRUE(clean.ok()) << clean.status();
  const ArtifactSection* weights = (*clean)->Find(SectionKind::kWeights);
  const uint64_t at = weights->offset + 300;
  clean->reset();
  bytes[at] ^= 0x10;

  absl::StatusOr<std::unique_ptr<Artifact>> strict = Artifact::Parse(bytes, "model.kart");
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr("model.kart: section weights: checksum mismatch (expected 0x"));

  absl::StatusOr<std::unique_ptr<Artifact>> lazy = Artifact::Parse(bytes, "model.kart", {.verify_weights = false});
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  EXPECT_EQ((*lazy)->weights().size(), 5u);
  const absl::Status verified = (*lazy)->VerifyWeights();
  EXPECT_EQ(verified.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(verified.message(), HasSubstr("model.kart: section weights: checksum mismatch"));
}

TEST(ArtifactWriterErrors, Sections) {
  ArtifactWriter w;
  ASSERT_TRUE(w.AddSection(SectionKind::kKernels, "cuda:sm_90", std::string("ptx")).ok());
  absl::Status s = w.AddSection(SectionKind::kKernels, "cuda:sm_90", std::string("again"));
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("duplicate section kernels 'cuda:sm_90'"));
  EXPECT_TRUE(w.AddSection(SectionKind::kPlan, "cuda:sm_90", std::string("{}")).ok());  // another kind

  EXPECT_THAT(w.AddSection(SectionKind::kWeights, "", std::string()).message(),
              HasSubstr("section weights: weights and their index are added with AddWeight"));
  EXPECT_THAT(w.AddSection(SectionKind::kWeightsIndex, "", std::string()).message(), HasSubstr("AddWeight"));
  EXPECT_THAT(w.AddSection(static_cast<SectionKind>(99), "", std::string()).message(),
              HasSubstr("unknown section kind 99"));
  EXPECT_THAT(w.AddSection(SectionKind::kKernels, "cuda sm_90", std::string()).message(),
              HasSubstr("section name 'cuda sm_90' holds byte 0x20"));
  EXPECT_THAT(w.AddSection(SectionKind::kKernels, std::string(64, 'x'), std::string()).message(),
              HasSubstr("section name of 64 bytes (at most 63 allowed)"));
  EXPECT_THAT(w.AddSection(SectionKind::kKernels, "a", std::string(), 96).message(),
              HasSubstr("section kernels 'a': alignment 96 is not a power of two from 64 to 1048576"));
  EXPECT_THAT(w.AddSection(SectionKind::kKernels, "b", std::string(), 32).message(), HasSubstr("alignment 32"));
}

TEST(ArtifactWriterErrors, Weights) {
  ArtifactWriter w;
  ASSERT_TRUE(w.AddWeight("a", "f32", {2}, std::vector<uint8_t>(8)).ok());
  EXPECT_THAT(w.AddWeight("a", "f32", {2}, std::vector<uint8_t>(8)).message(), HasSubstr("duplicate weight 'a'"));
  EXPECT_THAT(w.AddWeight("b", "f32", {2}, std::vector<uint8_t>(7)).message(),
              HasSubstr("weight 'b': 7 bytes given, f32 needs 8"));
  EXPECT_THAT(w.AddWeight("c", "q9_z", {2}, std::vector<uint8_t>(8)).message(),
              HasSubstr("weight 'c': unknown storage type 'q9_z'"));
  EXPECT_THAT(w.AddWeight("d", "q4_k", {2, 100}, std::vector<uint8_t>(8)).message(),
              HasSubstr("weight 'd': row length 100 is not a multiple of the q4_k block of 256 elements"));
  EXPECT_THAT(w.AddWeight("", "f32", {2}, std::vector<uint8_t>(8)).message(), HasSubstr("weight name of 0 bytes"));
  EXPECT_THAT(w.AddWeight("bad\nname", "f32", {2}, std::vector<uint8_t>(8)).message(),
              HasSubstr("weight name 'bad\\nname' holds byte 0x0a"));
}

}  // namespace
}  // namespace kiln

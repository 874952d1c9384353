// The reader never trusts an artifact: each kind of damage gets its own
// error naming the file, the section or tensor and the problem, and no
// truncation or single flipped byte gets through or crashes the reader.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/artifact/artifact.h"
#include "runtime/artifact/artifact_writer.h"
#include "tests/artifact/raw_artifact.h"
#include "tests/artifact/sample_artifact.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::RawSection;
using ::testing::StartsWith;

constexpr uint32_t kIndex = static_cast<uint32_t>(SectionKind::kWeightsIndex);
constexpr uint32_t kWeights = static_cast<uint32_t>(SectionKind::kWeights);
constexpr uint32_t kKernels = static_cast<uint32_t>(SectionKind::kKernels);
constexpr uint32_t kPlan = static_cast<uint32_t>(SectionKind::kPlan);

// The sample artifact (every section kind, five weights) as bytes.
const std::vector<uint8_t>& Sample() {
  static const std::vector<uint8_t> bytes = [] {
    const std::filesystem::path path = testing::ScratchDir("ArtifactCorruption") / "model.kart";
    ArtifactWriter w;
    if (!testing::AddSampleContent(w).ok() || !w.Write(path.string()).ok()) std::abort();
    const std::string s = testing::ReadFileOrDie(path);
    return std::vector<uint8_t>(s.begin(), s.end());
  }();
  return bytes;
}

absl::Status ParseStatus(const std::vector<uint8_t>& bytes) {
  absl::StatusOr<std::unique_ptr<Artifact>> a = Artifact::Parse(bytes, "model.kart");
  return a.status();
}

// The error message for `bytes`, which must not parse.
std::string Problem(const std::vector<uint8_t>& bytes) {
  const absl::Status s = ParseStatus(bytes);
  EXPECT_FALSE(s.ok());
  return std::string(s.message());
}

std::span<uint8_t, kSectionEntrySize> EntryBytes(std::vector<uint8_t>& bytes, size_t i) {
  return std::span<uint8_t, kSectionEntrySize>(bytes.data() + kArtifactHeaderSize + i * kSectionEntrySize,
                                               kSectionEntrySize);
}

SectionEntry Entry(std::vector<uint8_t>& bytes, size_t i) { return DecodeSectionEntry(EntryBytes(bytes, i)); }

void SetEntry(std::vector<uint8_t>& bytes, size_t i, const SectionEntry& e) {
  EncodeSectionEntry(e, EntryBytes(bytes, i));
  testing::Reseal(bytes);
}

ArtifactHeader Header(const std::vector<uint8_t>& bytes) {
  return DecodeHeader(std::span<const uint8_t, kArtifactHeaderSize>(bytes.data(), kArtifactHeaderSize));
}

void SetHeader(std::vector<uint8_t>& bytes, const ArtifactHeader& h) {
  EncodeHeader(h, std::span<uint8_t, kArtifactHeaderSize>(bytes.data(), kArtifactHeaderSize));
  testing::Reseal(bytes);
}

TEST(ArtifactCorruption, SampleParses) {
  std::vector<uint8_t> bytes = Sample();
  EXPECT_TRUE(ParseStatus(bytes).ok()) << ParseStatus(bytes);
  testing::Reseal(bytes);  // a no-op on a good file
  EXPECT_EQ(bytes, Sample());
}

TEST(ArtifactCorruption, MissingFile) {
  absl::StatusOr<std::unique_ptr<Artifact>> a = Artifact::Open("/nonexistent/model.kart");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(a.status().message(), HasSubstr("/nonexistent/model.kart: cannot open"));
}

TEST(ArtifactCorruption, TruncatedHeader) {
  std::vector<uint8_t> bytes(Sample().begin(), Sample().begin() + 40);
  EXPECT_EQ(Problem(bytes), "model.kart: truncated: 40 bytes, shorter than the 64-byte header");
  EXPECT_EQ(ParseStatus(bytes).code(), absl::StatusCode::kDataLoss);
}

TEST(ArtifactCorruption, BadMagic) {
  std::vector<uint8_t> bytes = Sample();
  bytes[3] = 'X';
  EXPECT_EQ(Problem(bytes), "model.kart: not a kiln artifact (bad magic)");
  bytes = Sample();
  bytes[7] = '1';  // the terminating NUL is part of the magic
  EXPECT_EQ(Problem(bytes), "model.kart: not a kiln artifact (bad magic)");
}

TEST(ArtifactCorruption, UnsupportedVersion) {
  std::vector<uint8_t> bytes = Sample();
  ArtifactHeader h = Header(bytes);
  h.version = 2;
  SetHeader(bytes, h);
  EXPECT_EQ(Problem(bytes), "model.kart: format version 2 is not supported (this build reads version 1)");
}

TEST(ArtifactCorruption, UnknownFlags) {
  std::vector<uint8_t> bytes = Sample();
  ArtifactHeader h = Header(bytes);
  h.flags = 0x4;
  SetHeader(bytes, h);
  EXPECT_EQ(Problem(bytes), "model.kart: unknown flags 0x4 (format version 1 defines none)");
}

TEST(ArtifactCorruption, TruncatedOrAppendedFile) {
  std::vector<uint8_t> bytes = Sample();
  const size_t size = bytes.size();
  bytes.resize(size - 100);
  EXPECT_EQ(Problem(bytes), absl::StrFormat("model.kart: file is %d bytes but its header says %d (truncated or "
                                            "appended to)",
                                            size - 100, size));
  EXPECT_EQ(ParseStatus(bytes).code(), absl::StatusCode::kDataLoss);
  bytes = Sample();
  bytes.push_back(0);
  EXPECT_THAT(Problem(bytes), HasSubstr(absl::StrFormat("file is %d bytes but its header says %d", size + 1, size)));
}

TEST(ArtifactCorruption, TableRunsPastTheEnd) {
  std::vector<uint8_t> bytes = Sample();
  ArtifactHeader h = Header(bytes);
  h.section_count = 1000;
  SetHeader(bytes, h);
  EXPECT_EQ(Problem(bytes), absl::StrFormat("model.kart: section table (1000 entries at offset 64) runs past the end "
                                            "of the file (%d bytes)",
                                            bytes.size()));
  h.section_count = 8;
  h.table_offset = ~uint64_t{0} - 10;  // offset + size would wrap around
  SetHeader(bytes, h);
  EXPECT_THAT(Problem(bytes), HasSubstr("runs past the end of the file"));
}

TEST(ArtifactCorruption, TableOverlapsHeader) {
  std::vector<uint8_t> bytes = Sample();
  ArtifactHeader h = Header(bytes);
  h.table_offset = 32;
  SetHeader(bytes, h);
  EXPECT_EQ(Problem(bytes), "model.kart: section table at offset 32 overlaps the header");
}

TEST(ArtifactCorruption, HeaderChecksum) {
  std::vector<uint8_t> bytes = Sample();
  const ArtifactHeader h = Header(bytes);
  bytes[kArtifactHeaderSize + 3 * kSectionEntrySize + 40] ^= 0x20;  // a table entry's name
  EXPECT_THAT(Problem(bytes), AllOf(StartsWith("model.kart: header checksum mismatch (expected "),
                                    HasSubstr(absl::StrFormat("expected 0x%016x, actual 0x", h.checksum))));
  EXPECT_EQ(ParseStatus(bytes).code(), absl::StatusCode::kDataLoss);
  bytes = Sample();
  bytes[44] = 1;  // reserved header bytes are covered too
  EXPECT_THAT(Problem(bytes), HasSubstr("header checksum mismatch"));
}

TEST(ArtifactCorruption, UnknownSectionKind) {
  const std::vector<uint8_t> bytes = testing::BuildRawArtifact({{kPlan, "", "{}"}, {42, "", "?"}});
  EXPECT_EQ(Problem(bytes), "model.kart: section #1: unknown kind 42");
}

TEST(ArtifactCorruption, BadSectionNames) {
  EXPECT_EQ(Problem(testing::BuildRawArtifact({{kKernels, "cuda sm_90", "ptx"}})),
            "model.kart: section #0: section name 'cuda sm_90' holds byte 0x20 (printable ASCII without spaces "
            "allowed)");
  std::vector<uint8_t> bytes = Sample();
  EntryBytes(bytes, 4)[32 + 20] = 'x';  // after the NUL that ends "cuda:sm_90"
  testing::Reseal(bytes);
  EXPECT_EQ(Problem(bytes), "model.kart: section #4: name is not NUL-terminated and NUL-padded");
  bytes = Sample();
  std::fill_n(EntryBytes(bytes, 4).begin() + 32, kSectionNameCapacity, 'x');
  testing::Reseal(bytes);
  EXPECT_EQ(Problem(bytes), "model.kart: section #4: name is not NUL-terminated and NUL-padded");
}

TEST(ArtifactCorruption, BadAlignment) {
  EXPECT_EQ(Problem(testing::BuildRawArtifact({{kPlan, "", "{}", 96}})),
            "model.kart: section plan: alignment 96 is not a power of two of at least 64");
  EXPECT_THAT(Problem(testing::BuildRawArtifact({{kPlan, "", "{}", 32}})), HasSubstr("alignment 32"));
}

TEST(ArtifactCorruption, MisalignedSection) {
  std::vector<uint8_t> bytes = Sample();
  SectionEntry e = Entry(bytes, 1);
  e.offset += 8;
  SetEntry(bytes, 1, e);
  EXPECT_EQ(Problem(bytes), absl::StrFormat("model.kart: section ir_text: misaligned: offset %d is not a multiple of "
                                            "its alignment 64",
                                            e.offset));
}

TEST(ArtifactCorruption, SectionOutOfBounds) {
  std::vector<uint8_t> bytes = Sample();
  SectionEntry e = Entry(bytes, 2);
  e.size = bytes.size();
  SetEntry(bytes, 2, e);
  EXPECT_EQ(Problem(bytes), absl::StrFormat("model.kart: section plan: bytes [%d, +%d) run past the end of the file "
                                            "(%d bytes)",
                                            e.offset, e.size, bytes.size()));
  e.size = ~uint64_t{0} - e.offset + 1;  // offset + size wraps to 0
  SetEntry(bytes, 2, e);
  EXPECT_THAT(Problem(bytes), HasSubstr("section plan: bytes ["));
}

TEST(ArtifactCorruption, OverlappingSections) {
  std::vector<uint8_t> bytes = Sample();
  const SectionEntry metadata = Entry(bytes, 0);
  ASSERT_GT(metadata.size, 64u);
  SectionEntry ir = Entry(bytes, 1);
  ir.offset = metadata.offset + 64;
  SetEntry(bytes, 1, ir);
  EXPECT_EQ(Problem(bytes),
            absl::StrFormat("model.kart: section ir_text [%d, %d) overlaps section metadata [%d, %d)", ir.offset,
                            ir.offset + ir.size, metadata.offset, metadata.offset + metadata.size));

  bytes = Sample();
  SectionEntry plan = Entry(bytes, 2);
  plan.offset = 128;  // inside the table
  SetEntry(bytes, 2, plan);
  EXPECT_THAT(Problem(bytes), HasSubstr(absl::StrFormat("section plan [128, %d) overlaps the section table [64, %d)",
                                                        128 + plan.size, 64 + 8 * kSectionEntrySize)));
}

TEST(ArtifactCorruption, NonZeroPadding) {
  std::vector<uint8_t> bytes = Sample();
  const SectionEntry metadata = Entry(bytes, 0);
  ASSERT_LT(metadata.offset + metadata.size, Entry(bytes, 1).offset);
  bytes[metadata.offset + metadata.size] = 0x5a;
  EXPECT_EQ(Problem(bytes), absl::StrFormat("model.kart: non-zero byte 0x5a at offset %d, in padding outside any "
                                            "section",
                                            metadata.offset + metadata.size));
}

// One flipped byte in any section is a checksum error that names it.
TEST(ArtifactCorruption, FlippedByteInEachSection) {
  std::vector<uint8_t> bytes = Sample();
  const uint32_t count = Header(bytes).section_count;
  ASSERT_EQ(count, 8u);
  for (uint32_t i = 0; i < count; ++i) {
    const SectionEntry e = Entry(bytes, i);
    const std::string label = SectionLabel(static_cast<SectionKind>(e.kind), e.name);
    for (uint64_t at : {e.offset, e.offset + e.size / 2, e.offset + e.size - 1}) {
      std::vector<uint8_t> damaged = Sample();
      damaged[at] ^= 0x01;
      const absl::Status s = ParseStatus(damaged);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << label;
      EXPECT_THAT(s.message(), StartsWith(absl::StrFormat("model.kart: %s: checksum mismatch (expected 0x%016x, "
                                                          "actual 0x",
                                                          label, e.checksum)));
    }
  }
}

TEST(ArtifactCorruption, DuplicateSection) {
  EXPECT_EQ(Problem(testing::BuildRawArtifact(
                {{kKernels, "cuda:sm_90", "a"}, {kPlan, "", "{}"}, {kKernels, "cuda:sm_90", "b"}})),
            "model.kart: duplicate section kernels 'cuda:sm_90' (table entries #0 and #2)");
}

TEST(ArtifactCorruption, WeightSectionsComeOnceAndTogether) {
  const std::string index = R"({"version":1,"tensors":[]})";
  EXPECT_EQ(Problem(testing::BuildRawArtifact({{kIndex, "", index}, {kWeights, "a", ""}, {kWeights, "b", ""}})),
            "model.kart: two weights sections ('a' and 'b'); one is allowed");
  EXPECT_EQ(Problem(testing::BuildRawArtifact({{kWeights, "", "abcd"}})),
            "model.kart: a weights section needs a weights_index section");
  EXPECT_EQ(Problem(testing::BuildRawArtifact({{kIndex, "", index}})),
            "model.kart: a weights_index section needs a weights section");
  EXPECT_TRUE(ParseStatus(testing::BuildRawArtifact({{kIndex, "", index}, {kWeights, "", ""}})).ok());
}

// An artifact whose weights section holds 256 bytes, indexed by `tensors`
// (the JSON array's contents).
std::string IndexProblem(const std::string& tensors) {
  const std::string index = absl::StrCat(R"({"version":1,"tensors":[)", tensors, "]}");
  return Problem(testing::BuildRawArtifact({{kIndex, "", index}, {kWeights, "", std::string(256, '\x11')}}));
}

TEST(ArtifactCorruption, BadWeightsIndex) {
  const std::string prefix = "model.kart: section weights_index: ";
  EXPECT_EQ(IndexProblem(R"({"name":"w","storage":"f32","shape":[2,3],"offset":0,"nbytes":24})"
                         R"(,{"name":"v","storage":"f16","shape":[3],"offset":64,"nbytes":6})"
                         R"(,{"name":"blk.0.q","storage":"int4:g32","shape":[2,32],"offset":128,"nbytes":40})"
                         R"(,{"name":"e","storage":"q8_0","shape":[1],"offset":256,"nbytes":0})"),
            prefix + "tensor 'e': row length 1 is not a multiple of the q8_0 block of 32 elements");
  EXPECT_EQ(IndexProblem(R"({"name":"w","storage":"q9_z","shape":[2,3],"offset":0,"nbytes":24})"),
            prefix +
                "tensor 'w': unknown storage type 'q9_z' (a ggml type such as f32, f16, q8_0, q4_k, or "
                "int4:gN / int2:gN with N a positive multiple of 8)");
  EXPECT_EQ(IndexProblem(R"({"name":"w","storage":"f32","shape":[2,3],"offset":0,"nbytes":20})"),
            prefix + "tensor 'w': nbytes 20 does not match shape [2, 3] stored as f32 (24 bytes)");
  EXPECT_EQ(IndexProblem(R"({"name":"w","storage":"f32","shape":[2,32],"offset":64,"nbytes":256})"),
            prefix + "tensor 'w': bytes [64, +256) run past the end of the weights section (256 bytes)");
  EXPECT_EQ(IndexProblem(R"({"name":"w","storage":"f32","shape":[1],"offset":9223372036854775807,"nbytes":4})"),
            prefix + "tensor 'w': offset 9223372036854775807 is not a multiple of 64");
  EXPECT_EQ(IndexProblem(R"({"name":"w","storage":"f32","shape":[2,3],"offset":8,"nbytes":24})"),
            prefix + "tensor 'w': offset 8 is not a multiple of 64");
  EXPECT_EQ(IndexProblem(R"({"name":"a","storage":"f32","shape":[32],"offset":0,"nbytes":128})"
                         R"(,{"name":"b","storage":"f32","shape":[32],"offset":64,"nbytes":128})"),
            prefix + "tensor 'b': bytes [64, +128) overlap tensor 'a' [0, +128)");
  EXPECT_EQ(IndexProblem(R"({"name":"a","storage":"f32","shape":[2],"offset":0,"nbytes":8})"
                         R"(,{"name":"a","storage":"f32","shape":[2],"offset":64,"nbytes":8})"),
            prefix + "tensor 'a': listed twice");
  EXPECT_EQ(IndexProblem(R"({"name":"a","storage":"f32","shape":[2],"offset":0,"nbytes":8,"dtype":"F32"})"),
            prefix + "tensor 'a': unknown key 'dtype'");
  EXPECT_EQ(IndexProblem(R"({"storage":"f32","shape":[2],"offset":0,"nbytes":8})"),
            prefix + "tensor #0: 'name' must be a string");
  EXPECT_EQ(IndexProblem(R"({"name":"a b","storage":"f32","shape":[2],"offset":0,"nbytes":8})"),
            prefix + "tensor #0: weight name 'a b' holds byte 0x20 (printable ASCII without spaces allowed)");
  EXPECT_EQ(IndexProblem(R"({"name":"a","storage":"f32","shape":[2],"offset":-64,"nbytes":8})"),
            prefix + "tensor 'a': 'offset' and 'nbytes' must be non-negative integers");
  EXPECT_EQ(IndexProblem(R"({"name":"a","storage":"f32","shape":[2,0],"offset":0,"nbytes":0})"),
            prefix + "tensor 'a': shape [2, 0] has a dimension below 1");
  EXPECT_EQ(IndexProblem(R"({"name":"a","storage":"f32","shape":[2.5],"offset":0,"nbytes":8})"),
            prefix + "tensor 'a': 'shape' must hold integers");
  EXPECT_EQ(IndexProblem(R"("a")"), prefix + "tensor #0: not an object");

  auto whole = [](const std::string& index) {
    return Problem(testing::BuildRawArtifact({{kIndex, "", index}, {kWeights, "", ""}}));
  };
  EXPECT_THAT(whole("{\"version\":1,"), StartsWith(prefix + "not valid JSON: line 1, column"));
  EXPECT_EQ(whole(R"([])"), prefix + "expected an object with exactly 'version' and 'tensors' (an array)");
  EXPECT_EQ(whole(R"({"version":1,"tensors":[],"extra":0})"),
            prefix + "expected an object with exactly 'version' and 'tensors' (an array)");
  EXPECT_EQ(whole(R"({"version":2,"tensors":[]})"),
            prefix + "index version 2 is not supported (this build reads version 1)");
}

// Every prefix of the file is rejected, both as cut (the file size in the
// header catches it) and resealed so the size and checksums agree again
// (then the sections and the index must catch it).
TEST(ArtifactCorruption, TruncationNeverParses) {
  const std::vector<uint8_t>& sample = Sample();
  for (size_t len = 0; len < sample.size(); ++len) {
    std::vector<uint8_t> cut(sample.begin(), sample.begin() + len);
    ASSERT_FALSE(ParseStatus(cut).ok()) << "prefix of " << len << " bytes parsed";
    testing::Reseal(cut);
    const absl::Status resealed = ParseStatus(cut);
    ASSERT_FALSE(resealed.ok()) << "resealed prefix of " << len << " bytes parsed";
    ASSERT_THAT(resealed.message(), StartsWith("model.kart: "));
  }
}

// Every byte of the file is under a checksum or must be zero, so no single
// flipped byte anywhere goes unnoticed.
TEST(ArtifactCorruption, EveryFlippedByteIsCaught) {
  std::vector<uint8_t> bytes = Sample();
  for (size_t at = 0; at < bytes.size(); ++at) {
    bytes[at] ^= 0x80;
    const absl::Status s = ParseStatus(bytes);
    bytes[at] ^= 0x80;
    ASSERT_FALSE(s.ok()) << "flipping byte " << at << " went unnoticed";
    ASSERT_TRUE(s.code() == absl::StatusCode::kDataLoss || s.code() == absl::StatusCode::kInvalidArgument) << s;
  }
}

}  // namespace
}  // namespace kiln

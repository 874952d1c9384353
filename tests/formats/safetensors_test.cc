#include "runtime/formats/safetensors.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// 8-byte length, header, data: the raw layout, for malformed files.
std::string RawFile(std::string_view header, std::string_view data) {
  std::string file(8, '\0');
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  file.append(header);
  file.append(data);
  return file;
}

std::span<const uint8_t> Span(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

std::string ParseError(const std::string& bytes) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Parse(Span(bytes), "model.safetensors");
  EXPECT_FALSE(file.ok()) << "accepted a malformed file";
  return file.ok() ? "" : std::string(file.status().message());
}

// A header holding one tensor entry, with `data_size` bytes of data.
std::string OneTensor(std::string_view entry, size_t data_size) {
  return RawFile(absl::StrCat("{\"w\":", std::string(entry), "}"), std::string(data_size, '\x01'));
}

std::vector<float> FloatsOf(const SafetensorsTensor& tensor) {
  std::vector<float> values(tensor.data.size() / sizeof(float));
  std::memcpy(values.data(), tensor.data.data(), tensor.data.size());
  return values;
}

TEST(SafetensorsDtype, NamesAndSizes) {
  EXPECT_EQ(SafetensorsDtypeName(SafetensorsDtype::kBF16), "BF16");
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kF64), 8);
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kBool), 1);
  EXPECT_EQ(ParseSafetensorsDtype("F8_E5M2"), SafetensorsDtype::kF8E5M2);
  EXPECT_EQ(ParseSafetensorsDtype("f32"), std::nullopt);  // the format is case-sensitive
  EXPECT_EQ(ParseSafetensorsDtype("U32"), std::nullopt);
}

TEST(SafetensorsFile, ParsesTensorsDataAndMetadata) {
  const std::vector<float> weights = {0.5f, -1.0f, 2.0f, 3.25f, 4.0f, -5.5f};
  const std::vector<uint16_t> bf16 = {0x3F80, 0x4000, 0xC040, 0x0000};
  const std::vector<int64_t> step = {123456789012345};
  const std::string bytes = testing::SafetensorsBytes(
      {{"layer.weight", "F32", {2, 3}, Bytes(weights)},
       {"layer.bias", "BF16", {4}, Bytes(bf16)},
       {"step", "I64", {}, Bytes(step)},
       {"empty", "U8", {0, 5}, ""},
       {"mask", "BOOL", {3}, std::string("\x01\x00\x01", 3)}},
      {{"format", "pt"}, {"note", "h\u00e9"}});
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Parse(Span(bytes), "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(f.name(), "mem");
  EXPECT_EQ(f.data_offset() % 8, 0u);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.tensors()[0].name, "layer.weight");  // header order
  EXPECT_EQ(f.tensors()[4].name, "mask");

  const SafetensorsTensor* w = f.Find("layer.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->num_elements, 6);
  EXPECT_EQ(w->data_begin, 0u);
  EXPECT_EQ(w->data_end, 24u);
  EXPECT_EQ(FloatsOf(*w), weights);
  EXPECT_EQ(w->data.data(), Span(bytes).data() + f.data_offset());

  const SafetensorsTensor* b = f.Find("layer.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, SafetensorsDtype::kBF16);
  EXPECT_EQ(b->data_begin, 24u);
  ASSERT_EQ(b->data.size(), 8u);
  EXPECT_EQ(std::memcmp(b->data.data(), bf16.data(), 8), 0);

  const SafetensorsTensor* s = f.Find("step");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->num_elements, 1);
  int64_t step_value;
  std::memcpy(&step_value, s->data.data(), 8);
  EXPECT_EQ(step_value, 123456789012345);

  const SafetensorsTensor* e = f.Find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->num_elements, 0);
  EXPECT_TRUE(e->data.empty());

  EXPECT_EQ(f.Find("mask")->data.size(), 3u);
  EXPECT_EQ(f.Find("nope"), nullptr);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0], (std::pair<std::string, std::string>("format", "pt")));
  EXPECT_EQ(f.metadata()[1].second, "h\u00e9");
}

TEST(SafetensorsFile, AcceptsEmptyHeaderAndKnownEightBitFloats) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> empty = SafetensorsFile::Parse(Span(RawFile("{}", "")), "e");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE((*empty)->tensors().empty());

  const std::string bytes = testing::SafetensorsBytes({{"a", "F8_E4M3", {2}, "\x38\x40"}, {"b", "F8_E5M2", {1}, "\x3C"}});
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f8 = SafetensorsFile::Parse(Span(bytes), "f8");
  ASSERT_TRUE(f8.ok()) << f8.status();
  EXPECT_EQ((*f8)->Find("a")->dtype, SafetensorsDtype::kF8E4M3);
  EXPECT_EQ((*f8)->Find("b")->data[0], 0x3C);
}

TEST(SafetensorsFile, ZeroSizedTensorsMaySitAnywhereOnTheBoundary) {
  // Tensors listed out of offset order, with empty ones at the edges.
  const std::string header =
      R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
      R"("z":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("y":{"dtype":"I8","shape":[2,0],"data_offsets":[0,0]}})";
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Parse(Span(RawFile(header, std::string(8, '\0'))), "m");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 4u);
}

TEST(SafetensorsFile, OpensAFileFromDisk) {
  const std::filesystem::path dir = testing::ScratchDir("safetensors_open");
  const std::vector<float> values = {1, 2, 3, 4};
  testing::WriteBinaryFile(dir / "model.safetensors", testing::SafetensorsBytes({{"x", "F32", {2, 2}, Bytes(values)}}));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open((dir / "model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(FloatsOf(*(*file)->Find("x")), values);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> missing = SafetensorsFile::Open((dir / "none.safetensors").string());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("none.safetensors: cannot open"));

  testing::WriteBinaryFile(dir / "bad.safetensors", OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", 4));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> bad = SafetensorsFile::Open((dir / "bad.safetensors").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr((dir / "bad.safetensors").string() + ": tensor 'w': "));
}

TEST(SafetensorsMalformed, FileTooSmall) {
  EXPECT_EQ(ParseError(std::string("\x10\0\0", 3)), "model.safetensors: file is 3 bytes, too small for the 8-byte header length");
}

TEST(SafetensorsMalformed, HeaderLengthAbsurd) {
  EXPECT_EQ(ParseError(std::string(8, '\xFF') + "{}"),
            "model.safetensors: header length 18446744073709551615 is absurdly large (limit 100000000 "
            "bytes); not a safetensors file?");
}

TEST(SafetensorsMalformed, HeaderLengthPastEnd) {
  std::string bytes = RawFile("{}", "abcdefghij");
  bytes[0] = 100;
  EXPECT_EQ(ParseError(bytes), "model.safetensors: header length 100 runs past the end of the file (20 bytes)");
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  EXPECT_EQ(ParseError(RawFile("{\"w\": {\"dtype\": F32}}", "")),
            "model.safetensors: header is not valid JSON: line 1, column 17: unexpected character 'F', "
            "expected a value");
  EXPECT_THAT(ParseError(RawFile(std::string("{}\0\0", 4), "")),
              HasSubstr("header is not valid JSON: line 1, column 3: unexpected byte 0x00 after the JSON value"));
}

TEST(SafetensorsMalformed, HeaderNotObject) {
  EXPECT_EQ(ParseError(RawFile("[1, 2]", "")), "model.safetensors: header is an array, not a JSON object");
}

TEST(SafetensorsMalformed, EntryNotObject) {
  EXPECT_EQ(ParseError(OneTensor("7", 0)), "model.safetensors: tensor 'w': header entry is a number, not an object");
}

TEST(SafetensorsMalformed, MissingFields) {
  EXPECT_EQ(ParseError(OneTensor(R"({"shape":[1],"data_offsets":[0,4]})", 4)),
            "model.safetensors: tensor 'w': missing 'dtype'");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","data_offsets":[0,4]})", 4)),
            "model.safetensors: tensor 'w': missing 'shape'");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[1]})", 4)),
            "model.safetensors: tensor 'w': missing 'data_offsets'");
}

TEST(SafetensorsMalformed, UnknownDtype) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"U32","shape":[1],"data_offsets":[0,4]})", 4)),
            "model.safetensors: tensor 'w': unknown dtype 'U32' (known: F64, F32, F16, BF16, I64, I32, I16, "
            "I8, U8, BOOL, F8_E4M3, F8_E5M2)");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})", 4)),
            "model.safetensors: tensor 'w': dtype is a number, not a string");
}

TEST(SafetensorsMalformed, ShapeNotArray) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":{},"data_offsets":[0,4]})", 4)),
            "model.safetensors: tensor 'w': shape is an object, not an array");
}

TEST(SafetensorsMalformed, ShapeNegative) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]})", 4)),
            "model.safetensors: tensor 'w': shape [2,-1] has a negative entry -1");
}

TEST(SafetensorsMalformed, ShapeNotInteger) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,4]})", 4)),
            "model.safetensors: tensor 'w': shape [2.5] has a non-integer entry 2.5");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})", 8)),
            "model.safetensors: tensor 'w': shape [\"2\"] has a non-integer entry \"2\"");
  EXPECT_THAT(ParseError(OneTensor(R"({"dtype":"F32","shape":[1e300],"data_offsets":[0,8]})", 8)),
              HasSubstr("has a non-integer entry 1e+300"));
}

TEST(SafetensorsMalformed, ElementCountOverflow) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]})", 1)),
            "model.safetensors: tensor 'w': shape [4294967296,4294967296] has more elements than fit in 64 bits");
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F64","shape":[1152921504606846976],"data_offsets":[0,8]})", 8)),
            "model.safetensors: tensor 'w': shape [1152921504606846976] of F64 has a byte size that "
            "overflows 64 bits");
}

TEST(SafetensorsMalformed, DataOffsetsNotAPair) {
  const char* bad_offsets[] = {R"(4)", R"([0])", R"([0,4,8])", R"([-1,4])", R"(["0","4"])", R"([0,4.5])"};
  for (const char* offsets : bad_offsets) {
    EXPECT_EQ(ParseError(OneTensor(absl::StrCat(R"({"dtype":"F32","shape":[1],"data_offsets":)", offsets, "}"), 4)),
              absl::StrCat("model.safetensors: tensor 'w': data_offsets must be [begin, end] with two "
                           "non-negative integers, got ",
                           offsets));
  }
}

TEST(SafetensorsMalformed, DataOffsetsBeginAfterEnd) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[1],"data_offsets":[10,4]})", 16)),
            "model.safetensors: tensor 'w': data_offsets [10, 4] has begin > end");
}

TEST(SafetensorsMalformed, SizeDoesNotMatchShape) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,12]})", 12)),
            "model.safetensors: tensor 'w': data_offsets [0, 12] hold 12 bytes but F32 shape [2, 2] needs 16");
}

TEST(SafetensorsMalformed, OutOfBounds) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", 8)),
            "model.safetensors: tensor 'w': data_offsets [0, 16] run past the end of the data section (8 bytes)");
  EXPECT_THAT(ParseError(OneTensor(
                  R"({"dtype":"U8","shape":[0],"data_offsets":[9223372036854775807,9223372036854775807]})", 0)),
              HasSubstr("run past the end of the data section (0 bytes)"));
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_EQ(ParseError(RawFile(header, std::string(12, '\0'))),
            "model.safetensors: tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8] (safetensors "
            "forbids overlapping tensors)");
  const std::string aliased =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  EXPECT_THAT(ParseError(RawFile(aliased, std::string(8, '\0'))), HasSubstr("forbids overlapping tensors"));
}

TEST(SafetensorsMalformed, HoleBetweenTensors) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})";
  EXPECT_EQ(ParseError(RawFile(header, std::string(16, '\0'))),
            "model.safetensors: tensor 'b': data section bytes [8, 12) before it belong to no tensor "
            "(safetensors forbids holes)");
}

TEST(SafetensorsMalformed, BytesAfterTheLastTensor) {
  EXPECT_EQ(ParseError(OneTensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 16)),
            "model.safetensors: data section bytes [8, 16) after the last tensor belong to no tensor "
            "(safetensors forbids holes)");
}

TEST(SafetensorsMalformed, DuplicateTensorName) {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_EQ(ParseError(RawFile(header, std::string(8, '\0'))),
            "model.safetensors: header is not valid JSON: line 1, column 55: duplicate object key \"w\"");
}

TEST(SafetensorsMalformed, BadMetadata) {
  EXPECT_EQ(ParseError(RawFile(R"({"__metadata__":["pt"]})", "")),
            "model.safetensors: __metadata__ is an array, not an object of strings");
  EXPECT_EQ(ParseError(RawFile(R"({"__metadata__":{"format":"pt","n":3}})", "")),
            "model.safetensors: __metadata__ value for 'n' is a number, not a string");
}

// Writes a two-shard checkpoint with its index into a fresh folder.
std::filesystem::path WriteShardedCheckpoint(const std::string& name, const std::string& weight_map_json) {
  const std::filesystem::path dir = testing::ScratchDir(name);
  testing::WriteBinaryFile(dir / "model-00001-of-00002.safetensors",
            testing::SafetensorsBytes({{"embed", "F32", {2}, Bytes(std::vector<float>{1, 2})},
                              {"norm", "F32", {1}, Bytes(std::vector<float>{3})}}));
  testing::WriteBinaryFile(dir / "model-00002-of-00002.safetensors",
            testing::SafetensorsBytes({{"head", "F32", {3}, Bytes(std::vector<float>{4, 5, 6})}}));
  testing::WriteBinaryFile(dir / "model.safetensors.index.json",
            absl::StrCat(R"({"metadata": {"total_size": 24}, "weight_map": )", weight_map_json, "}"));
  return dir;
}

constexpr char kGoodWeightMap[] =
    R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00002-of-00002.safetensors",
        "norm": "model-00001-of-00002.safetensors"})";

std::string OpenFolderError(const std::filesystem::path& dir) {
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> checkpoint = SafetensorsCheckpoint::OpenFolder(dir.string());
  EXPECT_FALSE(checkpoint.ok());
  return checkpoint.ok() ? "" : std::string(checkpoint.status().message());
}

TEST(SafetensorsCheckpoint, OpensShardsThroughTheIndex) {
  const std::filesystem::path dir = WriteShardedCheckpoint("st_sharded", kGoodWeightMap);
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> checkpoint = SafetensorsCheckpoint::OpenFolder(dir.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->path(), (dir / "model.safetensors.index.json").string());
  EXPECT_EQ((*checkpoint)->shards().size(), 2u);
  EXPECT_EQ((*checkpoint)->tensors().size(), 3u);
  ASSERT_NE((*checkpoint)->Find("head"), nullptr);
  EXPECT_EQ(FloatsOf(*(*checkpoint)->Find("head")), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(FloatsOf(*(*checkpoint)->Find("norm")), (std::vector<float>{3}));
  EXPECT_EQ((*checkpoint)->Find("missing"), nullptr);
}

TEST(SafetensorsCheckpoint, OpensASingleFileFolder) {
  const std::filesystem::path dir = testing::ScratchDir("st_single");
  testing::WriteBinaryFile(dir / "model.safetensors", testing::SafetensorsBytes({{"x", "F16", {1}, std::string("\x00\x3C", 2)}}));
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> checkpoint = SafetensorsCheckpoint::OpenFolder(dir.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->shards().size(), 1u);
  EXPECT_EQ((*checkpoint)->Find("x")->dtype, SafetensorsDtype::kF16);
}

TEST(SafetensorsCheckpoint, EmptyFolder) {
  const std::filesystem::path dir = testing::ScratchDir("st_empty");
  EXPECT_EQ(OpenFolderError(dir), dir.string() + ": no model.safetensors or model.safetensors.index.json in this folder");
}

TEST(SafetensorsCheckpoint, MissingShard) {
  const std::filesystem::path dir = WriteShardedCheckpoint("st_missing_shard", kGoodWeightMap);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> checkpoint = SafetensorsCheckpoint::OpenFolder(dir.string());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_TRUE(absl::IsNotFound(checkpoint.status()));
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("model.safetensors.index.json: shard 'model-00002-of-00002.safetensors' (holding "
                        "tensor 'head' and 0 more) is missing: "));
}

TEST(SafetensorsCheckpoint, TensorAbsentFromItsShard) {
  const std::filesystem::path dir = WriteShardedCheckpoint(
      "st_absent", R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00001-of-00002.safetensors",
                       "norm": "model-00001-of-00002.safetensors"})");
  EXPECT_THAT(OpenFolderError(dir), HasSubstr("weight_map puts tensor 'head' in shard "
                                              "'model-00001-of-00002.safetensors', which does not contain it"));
}

TEST(SafetensorsCheckpoint, ShardHoldsAnUnlistedTensor) {
  const std::filesystem::path dir = WriteShardedCheckpoint(
      "st_unlisted", R"({"embed": "model-00001-of-00002.safetensors", "head": "model-00002-of-00002.safetensors"})");
  EXPECT_THAT(OpenFolderError(dir), HasSubstr("shard 'model-00001-of-00002.safetensors' holds tensor 'norm', "
                                              "which weight_map does not list"));
}

TEST(SafetensorsCheckpoint, MalformedIndex) {
  EXPECT_THAT(OpenFolderError(WriteShardedCheckpoint("st_idx_json", "{")),
              HasSubstr("model.safetensors.index.json: not valid JSON: line 1, column"));
  EXPECT_THAT(OpenFolderError(WriteShardedCheckpoint("st_idx_type", "[]")),
              HasSubstr("model.safetensors.index.json: weight_map is an array, not an object"));
  EXPECT_THAT(OpenFolderError(WriteShardedCheckpoint("st_idx_entry", R"({"embed": 1})")),
              HasSubstr("weight_map entry for tensor 'embed' is a number, not a string"));
  EXPECT_THAT(OpenFolderError(WriteShardedCheckpoint("st_idx_escape", R"({"embed": "../model.safetensors"})")),
              HasSubstr("tensor 'embed' maps to shard '../model.safetensors', which is not a file inside "
                        "the model folder"));
  EXPECT_THAT(OpenFolderError(WriteShardedCheckpoint("st_idx_abs", R"({"embed": "/etc/passwd"})")),
              HasSubstr("which is not a file inside the model folder"));

  const std::filesystem::path dir = testing::ScratchDir("st_idx_nomap");
  testing::WriteBinaryFile(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_THAT(OpenFolderError(dir), HasSubstr("model.safetensors.index.json: missing 'weight_map'"));
}

TEST(SafetensorsCheckpoint, MalformedShardNamesItself) {
  const std::filesystem::path dir = WriteShardedCheckpoint("st_bad_shard", kGoodWeightMap);
  testing::WriteBinaryFile(dir / "model-00002-of-00002.safetensors", OneTensor(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", 8));
  EXPECT_THAT(OpenFolderError(dir),
              HasSubstr("model-00002-of-00002.safetensors: tensor 'w': data_offsets [0, 8] hold 8 bytes but F32 "
                        "shape [3] needs 12"));
}

}  // namespace
}  // namespace kiln

#include "runtime/formats/gguf.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/formats/gguf_writer.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// --- real files (llama.cpp wrote them) ------------------------------------

TEST(GgufReal, Stories260KHeaderAndTensors) {
  KILN_REQUIRE_TESTDATA(path, "models/stories260K.gguf");
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.tensors().size(), 48u);
  EXPECT_EQ(*g.GetString("general.architecture"), "llama");
  EXPECT_EQ(*g.GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*g.GetInt("llama.feed_forward_length"), 172);
  EXPECT_EQ(*g.GetInt("llama.block_count"), 5);
  EXPECT_EQ(*g.GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*g.GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(*g.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(g.GetStringArray("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(g.GetStringArray("tokenizer.ggml.tokens")->at(1), "<s>");
  EXPECT_EQ(g.GetFloatArray("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_FALSE(g.Find("llama.rope.freq_base"));

  const GgufTensor* emb = g.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kF32);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->nbytes, 64u * 512 * 4);
  EXPECT_EQ(emb->rows(), 512);
  const GgufTensor* out = g.FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  // llama2.c ties the two: the file carries byte-identical copies.
  EXPECT_EQ(std::memcmp(emb->data, out->data, emb->nbytes), 0);
  const GgufTensor* down = g.FindTensor("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dims, (std::vector<int64_t>{172, 64}));
  uint64_t params = 0;
  for (const GgufTensor& t : g.tensors()) params += t.nelements;
  EXPECT_EQ(params, 292800u);
}

TEST(GgufReal, MixedQuantTypes) {
  KILN_REQUIRE_TESTDATA(path, "models/stories260K-q4_0-mix.gguf");
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path.string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->FindTensor("token_embd.weight")->type, GgmlType::kQ5_0);
  EXPECT_EQ((*f)->FindTensor("output.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ((*f)->FindTensor("blk.0.attn_q.weight")->type, GgmlType::kQ4_0);
  EXPECT_EQ((*f)->FindTensor("blk.0.ffn_down.weight")->type, GgmlType::kF16);
  EXPECT_EQ((*f)->FindTensor("blk.0.attn_q.weight")->nbytes, 64u / 32 * 18 * 64);
}

TEST(GgufReal, EveryVocabFileParses) {
  const char* files[] = {"vocab/ggml-vocab-bert-bge.gguf",  "vocab/ggml-vocab-deepseek-coder.gguf",
                         "vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-falcon.gguf",
                         "vocab/ggml-vocab-gpt-2.gguf",     "vocab/ggml-vocab-llama-spm.gguf",
                         "vocab/ggml-vocab-starcoder.gguf", "models/llama-2-tiny-random.gguf"};
  int checked = 0;
  for (const char* rel : files) {
    const std::filesystem::path p = testing::TestDataFile(rel);
    if (p.empty()) continue;
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(p.string());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_GT((*f)->GetStringArray("tokenizer.ggml.tokens")->size(), 1000u) << rel;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no vocabulary files under " << testing::TestDataDir();
}

// --- writer round trip ------------------------------------------------------

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 7);
  return v;
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensor) {
  GgufWriter w;
  w.Set("u8", GgufValue::U8(200));
  w.Set("i8", GgufValue::I8(-100));
  w.Set("u16", GgufValue::U16(60000));
  w.Set("i16", GgufValue::I16(-30000));
  w.Set("u32", GgufValue::U32(4000000000u));
  w.Set("i32", GgufValue::I32(-2000000000));
  w.Set("u64", GgufValue::U64(18000000000000000000ull));
  w.Set("i64", GgufValue::I64(-9000000000000000000ll));
  w.Set("f32", GgufValue::F32(1.5f));
  w.Set("f64", GgufValue::F64(-2.25e300));
  w.Set("bool", GgufValue::Bool(true));
  w.Set("str", GgufValue::String(std::string("h\0llo", 5)));
  w.Set("strs", GgufValue::StringArray({"a", "", "ccc"}));
  w.Set("nested", GgufValue::Array(GgufValueType::kArray,
                                   {GgufValue::I32Array({1, 2}), GgufValue::I32Array({})}));
  ASSERT_TRUE(w.AddTensor("a", GgmlType::kF32, {3, 2}, Bytes(24, 1)).ok());
  ASSERT_TRUE(w.AddTensor("b", GgmlType::kQ4_K, {512}, Bytes(288, 2)).ok());
  ASSERT_TRUE(w.AddTensor("c", GgmlType::kQ8_0, {32, 1, 1, 3}, Bytes(102, 3)).ok());
  absl::StatusOr<std::vector<uint8_t>> buf = w.WriteToBuffer();
  ASSERT_TRUE(buf.ok()) << buf.status();

  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(*buf, "mem.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.Find("u8")->u, 200u);
  EXPECT_EQ(g.Find("i8")->i, -100);
  EXPECT_EQ(g.Find("u16")->u, 60000u);
  EXPECT_EQ(g.Find("i16")->i, -30000);
  EXPECT_EQ(*g.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*g.GetInt("i32"), -2000000000);
  EXPECT_EQ(g.Find("u64")->u, 18000000000000000000ull);
  EXPECT_FALSE(g.GetInt("u64").ok());  // does not fit int64: an error, not a wrap
  EXPECT_EQ(*g.GetInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(*g.GetFloat("f32"), 1.5);
  EXPECT_EQ(*g.GetFloat("f64"), -2.25e300);
  EXPECT_TRUE(*g.GetBool("bool"));
  EXPECT_EQ(*g.GetString("str"), std::string("h\0llo", 5));
  EXPECT_EQ(*g.GetStringArray("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  ASSERT_EQ(g.Find("nested")->array.size(), 2u);
  EXPECT_EQ(g.Find("nested")->array[0].array[1].i, 2);
  EXPECT_EQ(g.metadata().front().first, "u8");  // file order is kept

  ASSERT_EQ(g.tensors().size(), 3u);
  EXPECT_EQ(g.FindTensor("b")->nbytes, 288u);
  EXPECT_EQ(g.FindTensor("c")->dims, (std::vector<int64_t>{32, 1, 1, 3}));
  EXPECT_EQ(g.FindTensor("c")->rows(), 3);
  for (const char* n : {"a", "b", "c"}) {
    const GgufTensor* t = g.FindTensor(n);
    EXPECT_EQ(t->offset % 32, 0u) << n;
    const std::vector<uint8_t> expect = Bytes(t->nbytes, static_cast<uint8_t>(n[0] - 'a' + 1));
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->nbytes), expect) << n;
  }
}

TEST(GgufWriter, RejectsBadTensors) {
  GgufWriter w;
  EXPECT_TRUE(w.AddTensor("x", GgmlType::kF32, {4}, Bytes(16, 0)).ok());
  EXPECT_THAT(std::string(w.AddTensor("x", GgmlType::kF32, {4}, Bytes(16, 0)).message()),
              HasSubstr("duplicate tensor 'x'"));
  EXPECT_THAT(std::string(w.AddTensor("q", GgmlType::kQ4_0, {48}, Bytes(18, 0)).message()),
              HasSubstr("not a multiple of the q4_0 block size 32"));
  GgufWriter w2;
  ASSERT_TRUE(w2.AddTensor("y", GgmlType::kF32, {4}, Bytes(15, 0)).ok());
  EXPECT_THAT(std::string(w2.WriteToBuffer().status().message()), HasSubstr("15 bytes given, 16 expected"));
}

TEST(GgufWriter, WritesFileAtomically) {
  const std::filesystem::path dir = testing::ScratchDir("gguf_writer_file");
  GgufWriter w(3, 64);
  w.Set("general.architecture", GgufValue::String("llama"));
  ASSERT_TRUE(w.AddTensor("t", GgmlType::kF16, {8, 2}, Bytes(32, 9)).ok());
  const std::string path = (dir / "m.gguf").string();
  size_t calls = 0;
  ASSERT_TRUE(w.WriteFile(path, [&](size_t done, size_t total) { calls = done; EXPECT_EQ(total, 1u); }).ok());
  EXPECT_EQ(calls, 1u);
  EXPECT_FALSE(std::filesystem::exists(path + ".part"));
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  EXPECT_EQ((*f)->FindTensor("t")->data[0], 9);
  // Opened from the file, its pages can be dropped and read back (the CPU
  // executor does, for weights it has repacked); parsed from memory, not.
  EXPECT_TRUE((*f)->file_mapped());
  const std::string text = testing::ReadFileOrDie(path);
  const std::vector<uint8_t> copy(text.begin(), text.end());
  absl::StatusOr<std::unique_ptr<GgufFile>> parsed = GgufFile::Parse(copy, "copy");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE((*parsed)->file_mapped());
}

// --- malformed files: each defect has its own message -----------------------

// Assembles GGUF bytes field by field, so a test can write what a correct
// writer never would.
class RawGguf {
 public:
  RawGguf& U32(uint32_t v) { return Pod(v); }
  RawGguf& U64(uint64_t v) { return Pod(v); }
  RawGguf& I64(int64_t v) { return Pod(v); }
  RawGguf& U8(uint8_t v) { return Pod(v); }
  RawGguf& Str(const std::string& s) {
    U64(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return U32(0x46554747).U32(version).U64(n_tensors).U64(n_kv);
  }
  RawGguf& KvU32(const std::string& key, uint32_t v) { return Str(key).U32(4).U32(v); }
  RawGguf& Tensor(const std::string& name, std::vector<int64_t> dims, uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) I64(d);
    return U32(type).U64(offset);
  }
  RawGguf& PadData(size_t data_bytes) {
    while (b_.size() % 32) b_.push_back(0);
    b_.resize(b_.size() + data_bytes, 0);
    return *this;
  }
  std::vector<uint8_t>& bytes() { return b_; }

 private:
  template <typename T>
  RawGguf& Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
    return *this;
  }
  std::vector<uint8_t> b_;
};

std::string ParseError(std::vector<uint8_t> bytes) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(bytes, "bad.gguf");
  return f.ok() ? std::string("(parsed fine)") : std::string(f.status().message());
}

TEST(GgufMalformed, BadMagic) {
  RawGguf r;
  r.U32(0x46554746).U32(3).U64(0).U64(0);
  EXPECT_EQ(ParseError(r.bytes()), "bad.gguf: file: bad magic \"FGUF\": not a GGUF file");
}

TEST(GgufMalformed, TooSmall) {
  EXPECT_THAT(ParseError({'G', 'G'}), HasSubstr("truncated: too small to be a GGUF file (2 bytes)"));
}

TEST(GgufMalformed, UnsupportedVersion) {
  RawGguf r;
  r.Header(1, 0, 0);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("unsupported GGUF version 1 (kiln reads versions 2 and 3)"));
  RawGguf r4;
  r4.Header(4, 0, 0);
  EXPECT_THAT(ParseError(r4.bytes()), HasSubstr("unsupported GGUF version 4"));
}

TEST(GgufMalformed, BigEndian) {
  RawGguf r;
  r.U32(0x46554747).U32(0x03000000).U64(0).U64(0);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("big-endian GGUF files are not supported"));
}

TEST(GgufMalformed, TruncatedHeader) {
  RawGguf r;
  r.U32(0x46554747).U32(3).U32(0);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor count: truncated: need 8 bytes at offset 8"));
}

TEST(GgufMalformed, CountsTooLargeForFile) {
  RawGguf r;
  r.Header(3, 0, 1000000);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("metadata count 1000000 cannot fit"));
  RawGguf t;
  t.Header(3, 1ull << 60, 0);
  EXPECT_THAT(ParseError(t.bytes()), HasSubstr("tensor count 1152921504606846976 cannot fit"));
}

TEST(GgufMalformed, StringLengthPastEnd) {
  RawGguf r;
  r.Header(3, 0, 1).U64(1000).U32(0).U32(0).U32(0);
  EXPECT_THAT(ParseError(r.bytes()),
              HasSubstr("metadata key #0: string length 1000 at offset 24 runs past the end of the file"));
}

TEST(GgufMalformed, StringValuePastEnd) {
  RawGguf r;
  r.Header(3, 0, 1).Str("general.name").U32(8).U64(99);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("key 'general.name': string length 99"));
}

TEST(GgufMalformed, ArrayLengthPastEnd) {
  RawGguf r;
  r.Header(3, 0, 1).Str("tokenizer.ggml.scores").U32(9).U32(6).U64(1ull << 40).U32(0);
  EXPECT_THAT(ParseError(r.bytes()),
              HasSubstr("key 'tokenizer.ggml.scores': array of 1099511627776 float32 runs past the end"));
}

TEST(GgufMalformed, MoreArrayElementsThanAnyModelHas) {
  // Arrays of bytes whose elements all lie in the file but together pass the
  // 2^24 values the reader holds: an error before the second is allocated,
  // not gigabytes of GgufValue. (Real vocabularies parse: EveryVocabFileParses.)
  RawGguf r;
  const uint64_t n = uint64_t{1} << 24;
  r.Header(3, 0, 2).Str("a").U32(9).U32(0).U64(1).U8(7);
  r.Str("b").U32(9).U32(0).U64(n);
  r.bytes().resize(r.bytes().size() + n, 7);
  EXPECT_THAT(ParseError(r.bytes()),
              HasSubstr("key 'b': array of 16777216 uint8 takes the metadata past 16777216 values in all"));
}

TEST(GgufMalformed, UnknownValueType) {
  RawGguf r;
  r.Header(3, 0, 1).Str("k").U32(13).U32(0);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("key 'k': unknown metadata value type 13"));
  RawGguf a;
  a.Header(3, 0, 1).Str("k").U32(9).U32(77).U64(0);
  EXPECT_THAT(ParseError(a.bytes()), HasSubstr("key 'k': unknown array element type 77"));
}

TEST(GgufMalformed, BadBool) {
  RawGguf r;
  r.Header(3, 0, 1).Str("flag").U32(7).U8(2);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("key 'flag': bool value 2 is neither 0 nor 1"));
}

TEST(GgufMalformed, DuplicateKey) {
  RawGguf r;
  r.Header(3, 0, 2).KvU32("a.b", 1).KvU32("a.b", 2);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("key 'a.b': duplicate metadata key"));
}

TEST(GgufMalformed, DeeplyNestedArrays) {
  RawGguf r;
  r.Header(3, 0, 1).Str("deep").U32(9);
  for (int k = 0; k < 20; ++k) r.U32(9).U64(1);
  r.U32(4).U64(0);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("arrays nested deeper than 8 levels"));
}

TEST(GgufMalformed, BadAlignment) {
  RawGguf r;
  r.Header(3, 0, 1).KvU32("general.alignment", 48);
  EXPECT_THAT(ParseError(r.bytes()),
              HasSubstr("key 'general.alignment': must be a power of two between 1 and 2^20, found 48"));
}

TEST(GgufMalformed, UnknownTensorType) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("w", {32}, 4, 0).PadData(64);  // 4 and 5 were removed from ggml
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': unknown tensor type 4"));
}

TEST(GgufMalformed, TooManyDims) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("w", {1, 1, 1, 1, 1}, 0, 0).PadData(32);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': 5 dimensions (ggml allows at most 4)"));
}

TEST(GgufMalformed, NegativeDim) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("w", {4, -2}, 0, 0).PadData(32);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': dimension 1 is negative (-2)"));
}

TEST(GgufMalformed, ElementCountOverflow) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("w", {1ll << 40, 1ll << 40}, 0, 0).PadData(32);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': element count overflows 64 bits at dimension 1"));
}

TEST(GgufMalformed, ByteSizeOverflow) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("w", {1ll << 62}, 0, 0).PadData(32);  // 2^62 f32 = 2^64 bytes
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': byte size of 4611686018427387904 f32 elements overflows"));
}

TEST(GgufMalformed, PartialBlock) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("w", {40, 2}, 8, 0).PadData(128);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': row length 40 is not a multiple of the q8_0 block size 32"));
}

TEST(GgufMalformed, MisalignedOffset) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("w", {4}, 0, 8).PadData(64);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': data offset 8 is not a multiple of the alignment 32"));
}

TEST(GgufMalformed, TensorDataOutOfBounds) {
  RawGguf r;
  r.Header(3, 1, 0).Tensor("blk.0.w", {64}, 0, 0).PadData(100);  // needs 256
  EXPECT_THAT(ParseError(r.bytes()),
              HasSubstr("tensor 'blk.0.w': data [0, 256) extends past the end of the tensor data section (100 bytes"));
}

TEST(GgufMalformed, TruncatedTensorInfo) {
  RawGguf r;
  r.Header(3, 1, 0).Str("w").U32(2).I64(4);
  // 24 more bytes are needed for the second dim, type and offset; give 20 zeros
  // so the count check passes but the info itself is cut.
  for (int k = 0; k < 5; ++k) r.U32(0);
  r.bytes().resize(r.bytes().size() - 16);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': truncated"));
}

TEST(GgufMalformed, DuplicateTensorName) {
  RawGguf r;
  r.Header(3, 2, 0).Tensor("w", {4}, 0, 0).Tensor("w", {4}, 0, 32).PadData(64);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'w': duplicate tensor name"));
}

TEST(GgufMalformed, OverlappingTensors) {
  RawGguf r;
  r.Header(3, 2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {16}, 0, 32).PadData(128);
  EXPECT_THAT(ParseError(r.bytes()), HasSubstr("tensor 'b': data overlaps tensor 'a'"));
}

TEST(GgufMalformed, WrongTypedGetterNamesKeyAndTypes) {
  GgufWriter w;
  w.Set("llama.block_count", GgufValue::String("five"));
  w.Set("tokenizer.ggml.tokens", GgufValue::F32Array({1.0f}));
  std::vector<uint8_t> buf = *w.WriteToBuffer();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(buf, "m.gguf");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(std::string((*f)->GetInt("llama.block_count").status().message()),
            "m.gguf: metadata key 'llama.block_count': expected an integer, found string");
  EXPECT_EQ(std::string((*f)->GetStringArray("tokenizer.ggml.tokens").status().message()),
            "m.gguf: metadata key 'tokenizer.ggml.tokens': expected an array of string, found array of float32");
  EXPECT_EQ(std::string((*f)->GetInt("absent").status().message()), "m.gguf: metadata key 'absent' not found");
  EXPECT_EQ(*(*f)->GetIntOr("absent", 7), 7);
}

TEST(GgufMalformed, EveryTruncationOfARealFileFailsCleanly) {
  KILN_REQUIRE_TESTDATA(path, "models/stories260K-q4_0-mix.gguf");
  const std::string whole = testing::ReadFileOrDie(path);
  std::vector<uint8_t> bytes(whole.begin(), whole.end());
  ASSERT_TRUE(GgufFile::Parse(bytes, "full").ok());
  // Every prefix must be rejected (the last tensor's data ends at EOF); step
  // through the header byte by byte and the data section coarsely.
  absl::StatusOr<std::unique_ptr<GgufFile>> full = GgufFile::Parse(bytes, "full");
  const size_t header = (*full)->data_offset();
  int rejected = 0;
  for (size_t n = 0; n < bytes.size(); n += (n < header ? 1 : 997)) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Parse(cut, "cut");
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    ++rejected;
  }
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace kiln

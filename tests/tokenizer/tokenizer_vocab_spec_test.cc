// Reading the tokenizer from GGUF metadata: defaults and the errors for bad
// metadata, on small in-memory files.
#include "runtime/tokenizer/vocab.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/formats/gguf_writer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A tiny SentencePiece vocabulary: <unk> <s> </s>, the byte tokens, and a few pieces.
GgufWriter SpmWriter() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    tokens.push_back(hex);
    types.push_back(6);
  }
  for (const char* piece : {"\xE2\x96\x81", "h", "i", "hi", "\xE2\x96\x81hi"}) {
    tokens.push_back(piece);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  scores[tokens.size() - 2] = -1.0f;  // "hi"
  scores[tokens.size() - 1] = -2.0f;  // "▁hi"
  GgufWriter w;
  w.Set("tokenizer.ggml.model", GgufValue::String("llama"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w.Set("tokenizer.ggml.scores", GgufValue::F32Array(scores));
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  return w;
}

GgufWriter BpeWriter() {
  GgufWriter w;
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.pre", GgufValue::String("gpt-2"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "ab", "\xC4\xA0", "<|endoftext|>"}));
  w.Set("tokenizer.ggml.merges", GgufValue::StringArray({"a b"}));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(4));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(4));
  return w;
}

struct Parsed {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> gguf;
};

std::unique_ptr<Parsed> Parse(const GgufWriter& w) {
  auto p = std::make_unique<Parsed>();
  absl::StatusOr<std::vector<uint8_t>> bytes = w.WriteToBuffer();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  p->bytes = *std::move(bytes);
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Parse(p->bytes, "test.gguf");
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  p->gguf = *std::move(gguf);
  return p;
}

absl::Status ReadError(const GgufWriter& w) {
  std::unique_ptr<Parsed> p = Parse(w);
  return ReadVocabSpec(*p->gguf).status();
}

TEST(VocabSpec, SentencePieceDefaults) {
  std::unique_ptr<Parsed> p = Parse(SpmWriter());
  absl::StatusOr<VocabSpec> spec = ReadVocabSpec(*p->gguf);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model, VocabModel::kSentencePiece);
  EXPECT_EQ(spec->pre_tokenizer, "default");
  EXPECT_EQ(spec->bos_id, 1);
  EXPECT_EQ(spec->eos_id, 2);
  EXPECT_EQ(spec->unk_id, 0);
  EXPECT_EQ(spec->sep_id, kNoToken);
  EXPECT_TRUE(spec->add_bos);
  EXPECT_FALSE(spec->add_eos);
  EXPECT_TRUE(spec->add_space_prefix);

  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromSpec(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t space_hi = (*tok)->vocab_size() - 1;
  EXPECT_THAT((*tok)->Encode("hi", {.add_special = true}), ElementsAre(1, space_hi));
  // "j" has no piece: byte fallback.
  EXPECT_THAT((*tok)->Encode("j"), ElementsAre(259, 3 + 'j'));
}

TEST(VocabSpec, MetadataOverridesDefaults) {
  GgufWriter w = SpmWriter();
  w.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
  w.Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(true));
  w.Set("tokenizer.ggml.seperator_token_id", GgufValue::U32(0xFFFFFFFFu));  // unset
  w.Set("tokenizer.ggml.padding_token_id", GgufValue::U32(0));
  w.Set("tokenizer.chat_template", GgufValue::String("{{ '<|im_start|>' }}"));
  std::unique_ptr<Parsed> p = Parse(w);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(*p->gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->sep_id(), kNoToken);
  EXPECT_EQ((*tok)->pad_id(), 0);
  EXPECT_EQ((*tok)->chat_template(), "{{ '<|im_start|>' }}");
  const int32_t hi = (*tok)->vocab_size() - 2;
  EXPECT_THAT((*tok)->Encode("hi", {.add_special = true}), ElementsAre(hi, 2));
}

TEST(VocabSpec, MissingTokenList) {
  GgufWriter w;
  w.Set("tokenizer.ggml.model", GgufValue::String("llama"));
  const absl::Status s = ReadError(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.ggml.tokens"));
}

TEST(VocabSpec, TokenListOfWrongType) {
  GgufWriter w = SpmWriter();
  w.Set("tokenizer.ggml.tokens", GgufValue::I32Array({1, 2, 3}));
  const absl::Status s = ReadError(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.ggml.tokens"));
}

TEST(VocabSpec, ScoresShorterThanTokens) {
  GgufWriter w = SpmWriter();
  w.Set("tokenizer.ggml.scores", GgufValue::F32Array({0.0f, 1.0f}));
  const absl::Status s = ReadError(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'tokenizer.ggml.scores' has 2 entries for 264 tokens"));
}

TEST(VocabSpec, TokenTypesShorterThanTokens) {
  GgufWriter w = SpmWriter();
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array({1}));
  EXPECT_THAT(ReadError(w).message(), HasSubstr("'tokenizer.ggml.token_type' has 1 entries"));
}

TEST(VocabSpec, MissingModel) {
  GgufWriter bare;
  bare.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
  const absl::Status s = ReadError(bare);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.ggml.model"));
}

TEST(VocabSpec, UnknownModelListsSupported) {
  GgufWriter w = SpmWriter();
  w.Set("tokenizer.ggml.model", GgufValue::String("t5"));
  const absl::Status s = ReadError(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'tokenizer.ggml.model' value 't5' (supported: llama, gpt2, bert)"));
}

TEST(VocabSpec, BpeNeedsMerges) {
  GgufWriter w;
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
  EXPECT_THAT(ReadError(w).message(), HasSubstr("tokenizer.ggml.merges"));
}

TEST(VocabSpec, UnknownPreTokenizerIsAnError) {
  GgufWriter w = BpeWriter();
  w.Set("tokenizer.ggml.pre", GgufValue::String("no-such-model"));
  const absl::Status s = ReadError(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown 'tokenizer.ggml.pre' value 'no-such-model'"));
  EXPECT_THAT(s.message(), HasSubstr("llama-bpe"));
  EXPECT_THAT(s.message(), HasSubstr("qwen2"));
}

TEST(VocabSpec, MissingPreTokenizerFallsBackToDefault) {
  GgufWriter w;
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "ab"}));
  w.Set("tokenizer.ggml.merges", GgufValue::StringArray({"a b"}));
  std::unique_ptr<Parsed> p = Parse(w);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(*p->gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->spec().pre_tokenizer, "default");
  EXPECT_EQ((*tok)->bos_id(), kNoToken);  // llama.cpp's default 11 is outside this vocabulary
  EXPECT_THAT((*tok)->Encode("abab"), ElementsAre(2, 2));
}

TEST(VocabSpec, AddBosWithoutBosToken) {
  GgufWriter w = BpeWriter();
  w.Set("tokenizer.ggml.pre", GgufValue::String("chatglm-bpe"));  // a family without BOS
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(0xFFFFFFFFu));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
  const absl::Status s = ReadError(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'tokenizer.ggml.add_bos_token'"));
  EXPECT_THAT(s.message(), HasSubstr("'tokenizer.ggml.bos_token_id'"));
}

TEST(VocabSpec, Llama3FamilyAddsBosByDefault) {
  GgufWriter w = BpeWriter();
  w.Set("tokenizer.ggml.pre", GgufValue::String("llama-bpe"));
  std::unique_ptr<Parsed> p = Parse(w);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(*p->gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_TRUE((*tok)->add_bos());
  EXPECT_THAT((*tok)->Encode("ab a", {.add_special = true}), ElementsAre(4, 2, 3, 0));
}

TEST(VocabSpec, FromSpecChecksLengths) {
  VocabSpec spec;
  spec.tokens = {"a", "b"};
  spec.scores = {0.0f};
  spec.types = {TokenType::kNormal, TokenType::kNormal};
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromSpec(spec);
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("2 tokens but 1 scores"));
}

TEST(VocabSpec, FromSpecChecksSpecialIds) {
  VocabSpec spec;
  spec.tokens = {"a", "b"};
  spec.scores = {0.0f, 0.0f};
  spec.types = {TokenType::kNormal, TokenType::kNormal};
  spec.add_bos = true;
  spec.bos_id = 7;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromSpec(spec);
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("add_bos"));
}

}  // namespace
}  // namespace kiln

// Special tokens, BOS/EOS rules, decoding and streaming, on the real
// vocabularies of the test data.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/formats/gguf.h"
#include "runtime/tokenizer/streaming_decoder.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::Not;
using ::testing::Contains;

// Opens a vocabulary once per test; skips when the data is absent.
#define LOAD_TOKENIZER(var, rel)                                              \
  KILN_REQUIRE_TESTDATA(var##_path, rel);                                     \
  absl::StatusOr<std::unique_ptr<GgufFile>> var##_gguf = GgufFile::Open(var##_path.string()); \
  ASSERT_TRUE(var##_gguf.ok()) << var##_gguf.status();                        \
  absl::StatusOr<std::unique_ptr<Tokenizer>> var##_or = Tokenizer::FromGguf(**var##_gguf); \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status();                            \
  const Tokenizer& var = **var##_or

TEST(TokenizerApi, SentencePieceBasics) {
  LOAD_TOKENIZER(tok, "models/stories260K.gguf");
  EXPECT_EQ(tok.kind(), "llama (SentencePiece)");
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.sep_id(), kNoToken);  // 0xFFFFFFFF in the file means unset
  EXPECT_EQ(tok.pad_id(), kNoToken);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_FALSE(tok.add_eos());
  EXPECT_TRUE(tok.IsEndOfGeneration(2));
  EXPECT_FALSE(tok.IsEndOfGeneration(1));  // <s> starts a new story; generation goes on
  EXPECT_EQ(tok.token_text(3 + 0x41), "<0x41>");
  EXPECT_EQ(tok.TokenBytes(3 + 0x41), "A");
  EXPECT_EQ(tok.TokenBytes(1), "");
  EXPECT_EQ(tok.TokenBytes(1, /*keep_special=*/true), "<s>");
  EXPECT_EQ(tok.TokenBytes(-1), "");
  EXPECT_EQ(tok.TokenBytes(512), "");

  EXPECT_THAT(tok.Encode("Once upon a time"), ElementsAre(403, 407, 261, 378));
  EXPECT_THAT(tok.Encode("Once upon a time", {.add_special = true}), ElementsAre(1, 403, 407, 261, 378));
  EXPECT_TRUE(tok.Encode("").empty());
  EXPECT_THAT(tok.Encode("", {.add_special = true}), ElementsAre(1));
  // The first piece carries the prefix space; streaming shows it, Decode strips it.
  EXPECT_EQ(tok.TokenBytes(403), " Once");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{1, 403, 407, 261, 378}), "Once upon a time");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{1, 403, 407}, /*keep_special=*/true), "<s>Once upon");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{403, 99999, -5, 407}), "Once upon");  // invalid ids skipped
}

// Two files of one model share the vocabulary id for id; another model's,
// or one token renamed, do not.
TEST(TokenizerApi, SameVocabularyIdForId) {
  LOAD_TOKENIZER(f32, "models/stories260K.gguf");
  LOAD_TOKENIZER(q4, "models/stories260K-q4_0-mix.gguf");
  LOAD_TOKENIZER(other, "models/llama-2-tiny-random.gguf");
  EXPECT_TRUE(f32.SameVocabulary(q4));
  EXPECT_TRUE(q4.SameVocabulary(f32));
  EXPECT_FALSE(f32.SameVocabulary(other));
  VocabSpec spec = f32.spec();
  spec.tokens[300] += "x";
  absl::StatusOr<std::unique_ptr<Tokenizer>> renamed = Tokenizer::FromSpec(spec);
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_FALSE(f32.SameVocabulary(**renamed));
}

TEST(TokenizerApi, SentencePieceParsesControlTokensOnlyWhenAsked) {
  LOAD_TOKENIZER(tok, "models/stories260K.gguf");
  const std::string text = "Hi<s>there</s>";
  const std::vector<int32_t> parsed = tok.Encode(text, {.parse_special = true});
  // After a special token SentencePiece prefixes a space again, as llama.cpp does.
  std::vector<int32_t> expected = tok.Encode("Hi");
  expected.push_back(1);
  for (int32_t id : tok.Encode("there")) expected.push_back(id);
  expected.push_back(2);
  EXPECT_EQ(parsed, expected);
  EXPECT_EQ(tok.Decode(parsed, /*keep_special=*/true), text);
  EXPECT_EQ(tok.Decode(parsed), "Hithere");

  const std::vector<int32_t> literal = tok.Encode(text);
  EXPECT_THAT(literal, Not(Contains(1)));
  EXPECT_THAT(literal, Not(Contains(2)));
  EXPECT_EQ(tok.Decode(literal), text);
}

TEST(TokenizerApi, ByteLevelSpecialTokens) {
  LOAD_TOKENIZER(tok, "vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(tok.kind(), "gpt2 (byte-level BPE, pre-tokenizer gpt-2)");
  EXPECT_FALSE(tok.add_bos());
  EXPECT_TRUE(tok.IsEndOfGeneration(50256));
  EXPECT_THAT(tok.Encode("Hello<|endoftext|>", {.parse_special = true}), ElementsAre(15496, 50256));
  const std::vector<int32_t> literal = tok.Encode("Hello<|endoftext|>");
  EXPECT_GT(literal.size(), 2u);
  EXPECT_THAT(literal, Not(Contains(50256)));
  // No BOS for GPT-2 even with add_special.
  EXPECT_EQ(tok.Encode("Hello", {.add_special = true}), tok.Encode("Hello"));
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{15496, 50256}), "Hello");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{15496, 50256}, /*keep_special=*/true), "Hello<|endoftext|>");
}

TEST(TokenizerApi, UserDefinedTokensAreMatchedEvenWithoutParseSpecial) {
  LOAD_TOKENIZER(tok, "vocab/ggml-vocab-deepseek-coder.gguf");
  EXPECT_EQ(tok.token_type(32016), TokenType::kUserDefined);
  EXPECT_EQ(tok.token_text(32016), "<｜fim▁begin｜>");
  EXPECT_THAT(tok.Encode("<｜fim▁begin｜>x"), ElementsAre(32016, 87));
  // add_bos_token = true in this file.
  EXPECT_TRUE(tok.add_bos());
  EXPECT_THAT(tok.Encode("x", {.add_special = true}), ElementsAre(32013, 87));
  // User-defined tokens render as their text.
  EXPECT_EQ(tok.Decode(tok.Encode("<｜fim▁begin｜>x")), "<｜fim▁begin｜>x");
}

TEST(TokenizerApi, BertAddsClsAndSep) {
  LOAD_TOKENIZER(tok, "vocab/ggml-vocab-bert-bge.gguf");
  EXPECT_EQ(tok.kind(), "bert (WordPiece)");
  EXPECT_EQ(tok.bos_id(), 101);  // [CLS], from cls_token_id
  EXPECT_EQ(tok.sep_id(), 102);
  EXPECT_EQ(tok.unk_id(), 100);
  EXPECT_THAT(tok.Encode("Hello World", {.add_special = true}), ElementsAre(101, 7592, 2088, 102));
  EXPECT_THAT(tok.Encode("Hello World"), ElementsAre(7592, 2088));
  // Word-initial pieces carry the phantom space; BERT is lossy anyway.
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{101, 7592, 2088, 102}), " hello world");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{101, 7592, 2088, 102}, true), "[CLS] hello world[SEP]");
  // A word with a character no piece covers becomes one [UNK].
  EXPECT_THAT(tok.Encode("hello \xF0\x9F\xA6\x99 world"), ElementsAre(7592, 100, 2088));
}

TEST(StreamingDecoder, HoldsBackACharacterSplitOverByteTokens) {
  LOAD_TOKENIZER(tok, "models/stories260K.gguf");
  // "café 🐶 and": the dog is four byte-fallback tokens (F0 9F 90 B6).
  const std::vector<int32_t> ids = tok.Encode("caf\xC3\xA9 \xF0\x9F\x90\xB6 and");
  ASSERT_THAT(ids, Contains(3 + 0xF0));
  StreamingDecoder stream(tok);
  std::vector<std::string> chunks;
  std::string all;
  for (int32_t id : ids) {
    chunks.push_back(stream.Push(id));
    all += chunks.back();
  }
  all += stream.Finish();
  EXPECT_EQ(all, " caf\xC3\xA9 \xF0\x9F\x90\xB6 and");  // no space stripped: a continuation
  // Nothing is emitted while the emoji is incomplete; it arrives whole.
  size_t first_dog_byte = 0;
  while (ids[first_dog_byte] != 3 + 0xF0) ++first_dog_byte;
  EXPECT_EQ(chunks[first_dog_byte], "");
  EXPECT_EQ(chunks[first_dog_byte + 1], "");
  EXPECT_EQ(chunks[first_dog_byte + 2], "");
  EXPECT_EQ(chunks[first_dog_byte + 3], "\xF0\x9F\x90\xB6");
}

TEST(StreamingDecoder, ReplacesInvalidBytesAndUnfinishedTails) {
  LOAD_TOKENIZER(tok, "models/stories260K.gguf");
  auto byte = [](int b) { return 3 + b; };
  StreamingDecoder stream(tok);
  EXPECT_EQ(stream.Push(byte(0xF0)), "");
  EXPECT_EQ(stream.Push(byte(0x9F)), "");
  // The stream ends before the character is complete.
  EXPECT_EQ(stream.Finish(), "\xEF\xBF\xBD");
  // A byte that can never start a character is replaced at once.
  EXPECT_EQ(stream.Push(byte(0xFF)), "\xEF\xBF\xBD");
  // A lead byte followed by a non-continuation: both settle immediately.
  EXPECT_EQ(stream.Push(byte(0xE2)), "");
  EXPECT_EQ(stream.Push(byte('A')), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(stream.Finish(), "");
  // Control tokens are silent unless asked for.
  EXPECT_EQ(stream.Push(1), "");
  StreamingDecoder keep(tok, /*keep_special=*/true);
  EXPECT_EQ(keep.Push(1), "<s>");
}

TEST(StreamingDecoder, ByteLevelBpeCharacterAcrossTokens) {
  LOAD_TOKENIZER(tok, "vocab/ggml-vocab-gpt-2.gguf");
  // GPT-2 spells many emoji as several byte-level tokens.
  const std::string text = " this is \xF0\x9F\xA6\x99.cpp";
  const std::vector<int32_t> ids = tok.Encode(text);
  StreamingDecoder stream(tok);
  std::string all;
  for (int32_t id : ids) {
    const std::string chunk = stream.Push(id);
    // Every chunk is valid UTF-8 on its own.
    EXPECT_EQ(chunk.find("\xEF\xBF\xBD"), std::string::npos) << "token " << id;
    all += chunk;
  }
  EXPECT_EQ(all + stream.Finish(), text);
}

}  // namespace
}  // namespace kiln

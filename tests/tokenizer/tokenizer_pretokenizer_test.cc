// The pre-tokenizer table and the PCRE2 splitter that reproduces llama.cpp's
// regex splitting.
#include "runtime/tokenizer/pretokenizer.h"

#include <string>
#include <vector>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tokenizer/unicode_tables.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Split(const std::vector<std::string_view>& regexes, std::string_view text) {
  absl::StatusOr<std::unique_ptr<RegexSplitter>> splitter = RegexSplitter::Create(regexes);
  EXPECT_TRUE(splitter.ok()) << splitter.status();
  if (!splitter.ok()) return {};
  std::vector<std::string> pieces;
  for (std::string_view piece : (*splitter)->Split(text)) pieces.emplace_back(piece);
  return pieces;
}

std::vector<std::string> SplitAs(std::string_view pre, std::string_view text) {
  const PreTokenizerSpec* spec = FindPreTokenizer(pre);
  EXPECT_NE(spec, nullptr) << pre;
  return spec ? Split(spec->regexes, text) : std::vector<std::string>{};
}

TEST(PreTokenizerTable, EveryEntryCompiles) {
  int entries = 0;
  for (std::string_view name : PreTokenizerNames()) {
    const PreTokenizerSpec* spec = FindPreTokenizer(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_TRUE(RegexSplitter::Create(spec->regexes).ok()) << name;
    ++entries;
  }
  EXPECT_GT(entries, 40);
}

TEST(PreTokenizerTable, Lookups) {
  EXPECT_EQ(FindPreTokenizer("nonsense"), nullptr);
  EXPECT_EQ(FindPreTokenizer("llama-bpe"), FindPreTokenizer("llama3"));
  EXPECT_TRUE(FindPreTokenizer("llama-bpe")->ignore_merges);
  EXPECT_TRUE(FindPreTokenizer("llama-bpe")->add_bos);
  EXPECT_FALSE(FindPreTokenizer("dbrx")->ignore_merges);  // same regex, no llama3 flags
  EXPECT_FALSE(FindPreTokenizer("chatglm-bpe")->has_bos);
  EXPECT_EQ(FindPreTokenizer("smollm"), FindPreTokenizer("starcoder"));
  EXPECT_EQ(FindPreTokenizer("qwen2"), FindPreTokenizer("stablelm2"));
}

TEST(TranslateLlamaRegex, MapsTheDialect) {
  EXPECT_EQ(*TranslateLlamaRegex(R"(\s+(?!\S))"), R"([\s\x{85}]+(?![^\s\x{85}]))");
  EXPECT_EQ(*TranslateLlamaRegex(R"( ?[^\s\p{L}\p{N}]+)"), R"( ?[^\s\x{85}\p{L}\p{N}]+)");
  EXPECT_EQ(*TranslateLlamaRegex(R"([\p{Lu}\p{Lt}]*\p{Ll}+)"), R"([\p{L}\p{L}]*\p{L}+)");
  EXPECT_EQ(*TranslateLlamaRegex(R"(\d{1,3}[\d_])"), R"([0-9]{1,3}[0-9_])");
  EXPECT_EQ(*TranslateLlamaRegex(R"(\$\+\r\n)"), R"(\$\+\r\n)");
  EXPECT_THAT(TranslateLlamaRegex(R"([\S])").status().message(), HasSubstr("\\S inside a character class"));
}

TEST(RegexSplitter, Gpt2Whitespace) {
  // \s+(?!\S) leaves the last space of a run to the word after it.
  EXPECT_THAT(SplitAs("gpt-2", "Hello  world"), ElementsAre("Hello", " ", " world"));
  EXPECT_THAT(SplitAs("gpt-2", "a\n\nb"), ElementsAre("a", "\n", "\n", "b"));
  EXPECT_THAT(SplitAs("gpt-2", "x  "), ElementsAre("x", "  "));
  EXPECT_THAT(SplitAs("gpt-2", "I'm 42!"), ElementsAre("I", "'m", " 42", "!"));
}

TEST(RegexSplitter, Llama3) {
  EXPECT_THAT(SplitAs("llama3", "Hello\n\n  world"), ElementsAre("Hello", "\n\n", " ", " world"));
  EXPECT_THAT(SplitAs("llama3", "1234567"), ElementsAre("123", "456", "7"));
  EXPECT_THAT(SplitAs("llama3", "I'VE seen"), ElementsAre("I", "'VE", " seen"));
  EXPECT_THAT(SplitAs("llama3", "(x)\r\n"), ElementsAre("(x", ")\r\n"));
}

TEST(RegexSplitter, NextLineIsWhitespace) {
  // llama.cpp counts U+0085 as whitespace; PCRE2's \s alone does not.
  EXPECT_THAT(SplitAs("gpt-2", "a\xC2\x85\xC2\x85" "b"), ElementsAre("a", "\xC2\x85", "\xC2\x85", "b"));
}

TEST(RegexSplitter, LaterRegexesSeeOnlyTheirPiece) {
  // On the whole text a+(?!b) would stop before the last 'a'; within the
  // piece "aa" the lookahead sees the piece's end.
  EXPECT_THAT(Split({"b", "a+(?!b)"}, "aab"), ElementsAre("aa", "b"));
  EXPECT_THAT(Split({"a+(?!b)"}, "aab"), ElementsAre("a", "ab"));
}

TEST(RegexSplitter, DollarOnlyAtTheEnd) {
  EXPECT_THAT(Split({"a$"}, "a\n"), ElementsAre("a\n"));
  EXPECT_THAT(Split({"a$"}, "ba"), ElementsAre("b", "a"));
}

TEST(RegexSplitter, EmptyMatchesSplit) {
  // superbpe's digit grouping is a pure lookahead.
  EXPECT_THAT(Split({R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"}, "x1234567"), ElementsAre("x", "1", "234", "567"));
}

TEST(RegexSplitter, Deepseek) {
  EXPECT_THAT(SplitAs("deepseek-llm", "Hello, y'all 123"), ElementsAre("Hello", ",", " y", "'", "all", " ", "123"));
  EXPECT_THAT(SplitAs("deepseek-coder", "Hi 42\n"), ElementsAre("Hi", " ", "4", "2", "\n"));
}

TEST(RegexSplitter, EmptyText) { EXPECT_TRUE(SplitAs("default", "").empty()); }

TEST(UnicodeTables, SameUnicodeVersionAsPcre2) {
  char version[32] = {};
  ASSERT_GT(pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version), 0);
  EXPECT_EQ(std::string(version), unicode_tables::kUnicodeVersion)
      << "PCRE2 and the WordPiece tables classify characters by different Unicode versions; "
         "regenerate unicode_tables.cc with a matching Python";
}

}  // namespace
}  // namespace kiln

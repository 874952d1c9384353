#include "runtime/tokenizer/unicode.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tokenizer/wordpiece_model.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;

TEST(Unicode, LenientDecodeReplacesEachBadByte) {
  EXPECT_THAT(DecodeUtf8Lenient("a\xC3\xA9\xFF\xE2\x82"), ElementsAre('a', 0xE9, 0xFFFD, 0xFFFD, 0xFFFD));
  EXPECT_THAT(DecodeUtf8Lenient("\xF0\x9F\xA6\x99"), ElementsAre(0x1F999));
}

TEST(Unicode, SanitizeKeepsValidTextAndReplacesTheRest) {
  EXPECT_EQ(SanitizeUtf8("h\xC3\xA9llo \xF0\x9F\xA6\x99"), "h\xC3\xA9llo \xF0\x9F\xA6\x99");
  EXPECT_EQ(SanitizeUtf8("a\x80" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD");  // an encoded surrogate
}

TEST(Unicode, CompleteUtf8Prefix) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\xA6"), 1u);      // waits for the 4th byte
  EXPECT_EQ(CompleteUtf8Prefix("a\xF0\x9F\xA6\x99"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xE2"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xE0\x80"), 3u);          // can never be valid: do not wait
  EXPECT_EQ(CompleteUtf8Prefix("a\x80"), 2u);              // stray continuation byte
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

TEST(Unicode, ReplaceInvalidUtf8) {
  EXPECT_EQ(ReplaceInvalidUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(ReplaceInvalidUtf8("\xFF" "a"), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(ReplaceInvalidUtf8("\xF0\x9F\xA6" "a"), "\xEF\xBF\xBD" "a");  // one U+FFFD per broken sequence
  EXPECT_EQ(ReplaceInvalidUtf8("\xE0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Unicode, CharacterData) {
  EXPECT_EQ(ClassOf('a'), CharClass::kLetter);
  EXPECT_EQ(ClassOf('7'), CharClass::kNumber);
  EXPECT_EQ(ClassOf(','), CharClass::kPunctuation);
  EXPECT_EQ(ClassOf('$'), CharClass::kSymbol);
  EXPECT_EQ(ClassOf(0x0301), CharClass::kMark);
  EXPECT_EQ(ClassOf(0x200D), CharClass::kControl);  // ZERO WIDTH JOINER is Cf
  EXPECT_EQ(ClassOf(0x0378), CharClass::kUnassigned);
  EXPECT_TRUE(IsWhitespace(0x85));
  EXPECT_TRUE(IsWhitespace(0x3000));
  EXPECT_FALSE(IsWhitespace(0x200B));
  EXPECT_EQ(ToLower('A'), static_cast<uint32_t>('a'));
  EXPECT_EQ(ToLower(0x0130), static_cast<uint32_t>('i'));  // İ
  EXPECT_EQ(ToLower(0x0411), 0x0431u);                     // Cyrillic Б
  EXPECT_EQ(NfdBase(0xE9), static_cast<uint32_t>('e'));
  EXPECT_EQ(NfdBase(0x1EED), static_cast<uint32_t>('u'));  // ử
  EXPECT_EQ(NfdBase('x'), static_cast<uint32_t>('x'));
  EXPECT_TRUE(IsCjkIdeograph(0x6211));
}

TEST(Unicode, ByteLevelAlphabet) {
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(ByteToUnicode('a'), "a");
  for (int b = 0; b < 256; ++b) {
    const std::vector<uint32_t> cpts = DecodeUtf8Lenient(ByteToUnicode(static_cast<uint8_t>(b)));
    ASSERT_EQ(cpts.size(), 1u);
    EXPECT_EQ(UnicodeToByte(cpts[0]), b);
  }
  EXPECT_EQ(UnicodeToByte(0x4E00), -1);
}

TEST(BertPreTokenize, NormalisesAndSplits) {
  EXPECT_THAT(BertPreTokenize("Hello, W\xC3\xB6rld!  \xE6\x88\x91\xE6\x83\xB3 x\xE2\x80\x8Dy"),
              ElementsAre("hello", ",", "world", "!", "\xE6\x88\x91", "\xE6\x83\xB3", "xy"));
  EXPECT_THAT(BertPreTokenize("a$b~c\xE2\x82\xAC"), ElementsAre("a", "$", "b", "~", "c\xE2\x82\xAC"));
  EXPECT_TRUE(BertPreTokenize(" \t\n").empty());
}

}  // namespace
}  // namespace kiln

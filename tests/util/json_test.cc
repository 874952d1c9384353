#include "runtime/util/json.h"

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

JsonValue ParseOrDie(std::string_view text) {
  absl::StatusOr<JsonValue> parsed = ParseJson(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.status();
  return parsed.ok() ? *std::move(parsed) : JsonValue();
}

std::string ParseError(std::string_view text) {
  absl::StatusOr<JsonValue> parsed = ParseJson(text);
  EXPECT_FALSE(parsed.ok()) << "accepted: " << text;
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(JsonParse, Scalars) {
  EXPECT_TRUE(ParseOrDie("null").is_null());
  EXPECT_TRUE(ParseOrDie("true").bool_value());
  EXPECT_FALSE(ParseOrDie(" false ").bool_value());
  EXPECT_EQ(ParseOrDie("\"hi\"").string_value(), "hi");
  EXPECT_EQ(ParseOrDie("\t\r\n 42 \n").int_value(), 42);
}

TEST(JsonParse, ContainersKeepOrderAndSupportLookup) {
  const JsonValue v = ParseOrDie(R"({"z": [1, 2, {"x": null}], "a": {}, "m": []})");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v.members()[0].first, "z");
  EXPECT_EQ(v.members()[1].first, "a");
  EXPECT_EQ(v.members()[2].first, "m");
  const JsonValue* z = v.Find("z");
  ASSERT_NE(z, nullptr);
  ASSERT_TRUE(z->is_array());
  ASSERT_EQ(z->size(), 3u);
  EXPECT_EQ(z->array()[1].int_value(), 2);
  ASSERT_NE(z->array()[2].Find("x"), nullptr);
  EXPECT_TRUE(z->array()[2].Find("x")->is_null());
  EXPECT_TRUE(v.Find("a")->is_object());
  EXPECT_EQ(v.Find("a")->size(), 0u);
  EXPECT_EQ(v.Find("missing"), nullptr);
}

TEST(JsonParse, SkipsByteOrderMark) {
  EXPECT_EQ(ParseOrDie("\xEF\xBB\xBF[1]").size(), 1u);
}

TEST(JsonParse, SimpleEscapes) {
  EXPECT_EQ(ParseOrDie(R"("\"\\\/\b\f\n\r\t")").string_value(), "\"\\/\b\f\n\r\t");
}

TEST(JsonParse, UnicodeEscapesBecomeUtf8) {
  EXPECT_EQ(ParseOrDie(R"("\u0041")").string_value(), "A");
  EXPECT_EQ(ParseOrDie(R"("\u00e9")").string_value(), "\xC3\xA9");
  EXPECT_EQ(ParseOrDie(R"("\u20AC")").string_value(), "\xE2\x82\xAC");
  EXPECT_EQ(ParseOrDie(R"("\uD83D\uDE00")").string_value(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(ParseOrDie(R"("\uDBFF\uDFFF")").string_value(), "\xF4\x8F\xBF\xBF");
  const std::string nul = ParseOrDie(R"("a\u0000b")").string_value();
  EXPECT_EQ(nul, std::string("a\0b", 3));
}

TEST(JsonParse, RawUtf8IsKept) {
  EXPECT_EQ(ParseOrDie("\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"").string_value(),
            "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(JsonParse, Integers) {
  EXPECT_EQ(ParseOrDie("0").int_value(), 0);
  EXPECT_EQ(ParseOrDie("-17").int_value(), -17);
  // Beyond 2^53 the int64 view is exact while the double rounds.
  const JsonValue big = ParseOrDie("9007199254740993");
  EXPECT_EQ(big.int_value(), 9007199254740993LL);
  EXPECT_EQ(big.number(), 9007199254740992.0);
  EXPECT_EQ(ParseOrDie("9223372036854775807").int_value(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ParseOrDie("-9223372036854775808").int_value(), std::numeric_limits<int64_t>::min());
  const JsonValue too_big = ParseOrDie("9223372036854775808");
  EXPECT_FALSE(too_big.is_integer());
  EXPECT_EQ(too_big.number(), 9223372036854775808.0);
}

TEST(JsonParse, Floats) {
  EXPECT_EQ(ParseOrDie("1.5").number(), 1.5);
  EXPECT_FALSE(ParseOrDie("1.5").is_integer());
  EXPECT_EQ(ParseOrDie("-0.25e1").number(), -2.5);
  EXPECT_EQ(ParseOrDie("1E-2").number(), 0.01);
  EXPECT_EQ(ParseOrDie("1e2").int_value(), 100);  // integral value of a float literal
  EXPECT_EQ(ParseOrDie("2.0").int_value(), 2);
  EXPECT_EQ(ParseOrDie("1e-5").number(), 1e-5);
  EXPECT_EQ(ParseOrDie("5e-324").number(), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(ParseOrDie("1.7976931348623157e308").number(), std::numeric_limits<double>::max());
}

TEST(JsonParse, UnderflowBecomesZero) {
  EXPECT_EQ(ParseOrDie("1e-400").number(), 0.0);
  EXPECT_EQ(ParseOrDie("0.000001e-999").number(), 0.0);
  const JsonValue negative = ParseOrDie("-1e-400");
  EXPECT_EQ(negative.number(), 0.0);
  EXPECT_TRUE(std::signbit(negative.number()));
}

TEST(JsonParse, OverflowIsAnError) {
  EXPECT_THAT(ParseError("1e400"), HasSubstr("number 1e400 is out of the range of a double"));
  EXPECT_THAT(ParseError("[-2e308]"), HasSubstr("out of the range"));
  EXPECT_THAT(ParseError("123456789e99999999999999999999"), HasSubstr("out of the range"));
}

struct InvalidCase {
  const char* text;
  const char* message;
};

TEST(JsonParse, RejectsInvalidDocuments) {
  const InvalidCase cases[] = {
      {"", "line 1, column 1: unexpected end of input, expected a value"},
      {"   ", "unexpected end of input"},
      {"[1,]", "trailing comma before ']'"},
      {R"({"a":1,})", "trailing comma before '}'"},
      {"[1 2]", "unexpected character '2', expected ',' or ']'"},
      {"{a:1}", "unexpected character 'a', expected a string object key"},
      {"{'a':1}", "expected a string object key"},
      {R"({"a" 1})", "expected ':' after an object key"},
      {R"({"a":1 "b":2})", "expected ',' or '}' after an object member"},
      {"01", "leading zeros"},
      {"-01", "leading zeros"},
      {"-", "expected a digit after '-'"},
      {"-a", "expected a digit after '-'"},
      {"1.", "expected a digit after '.'"},
      {"1.e5", "expected a digit after '.'"},
      {".5", "unexpected character '.', expected a value"},
      {"1e", "expected a digit in the exponent"},
      {"1e+", "expected a digit in the exponent"},
      {"+1", "unexpected character '+', expected a value"},
      {"0x10", "unexpected character 'x' after the JSON value"},
      {"NaN", "unexpected character 'N'"},
      {"Infinity", "unexpected character 'I'"},
      {"-Infinity", "expected a digit after '-'"},
      {"tru", "invalid literal, expected 'true'"},
      {"nul", "invalid literal, expected 'null'"},
      {"True", "unexpected character 'T'"},
      {"[", "unexpected end of input, expected a value"},
      {"[1", "unexpected end of input, expected ',' or ']'"},
      {"{", "unexpected end of input, expected a string object key"},
      {R"("abc)", "unterminated string"},
      {"\"a\tb\"", "control character 0x09 in a string must be escaped"},
      {"\"a\nb\"", "control character 0x0A"},
      {R"("\x")", "invalid escape: backslash followed by character 'x'"},
      {R"("\U0041")", "invalid escape"},
      {R"("\u12")", "\\u escape needs four hex digits"},
      {R"("\u12G4")", "\\u escape needs four hex digits"},
      {R"("\uD800")", "high surrogate \\uD800 is not followed by a low surrogate"},
      {R"("\uD800\u0041")", "high surrogate \\uD800 is not followed by a low surrogate"},
      {R"("\uD800\uD800")", "not followed by a low surrogate"},
      {R"("\uDC00")", "lone low surrogate \\uDC00"},
      {R"("\uDE00\uD83D")", "lone low surrogate \\uDE00"},
      {"\"\xC3\"", "invalid UTF-8 byte 0xC3"},
      {"\"\x80\"", "invalid UTF-8 byte 0x80"},
      {"\"\xC0\xAF\"", "invalid UTF-8 byte 0xC0"},          // overlong '/'
      {"\"\xE0\x80\xAF\"", "invalid UTF-8 byte 0xE0"},      // overlong
      {"\"\xED\xA0\x80\"", "invalid UTF-8 byte 0xED"},      // encoded surrogate
      {"\"\xF4\x90\x80\x80\"", "invalid UTF-8 byte 0xF4"},  // past U+10FFFF
      {"\"\xF8\x88\x80\x80\x80\"", "invalid UTF-8 byte 0xF8"},
      {"\"\xE2\x82\"", "invalid UTF-8 byte 0xE2"},          // truncated
      {"\xC3\xA9", "unexpected byte 0xC3, expected a value"},
      {"[1]x", "unexpected character 'x' after the JSON value"},
      {"1 2", "unexpected character '2' after the JSON value"},
      {"{} {}", "after the JSON value"},
      {"/* c */ 1", "unexpected character '/'"},
      {"\v1", "unexpected byte 0x0B"},
      {"\xEF\xBB\xBF", "unexpected end of input"},
  };
  for (const InvalidCase& c : cases) {
    EXPECT_THAT(ParseError(c.text), HasSubstr(c.message)) << "input: " << c.text;
  }
  // An embedded NUL needs an explicit length.
  EXPECT_THAT(ParseError(std::string_view("[1]\0", 4)),
              HasSubstr("unexpected byte 0x00 after the JSON value"));
}

TEST(JsonParse, RejectsDuplicateKeysNamingThem) {
  EXPECT_EQ(ParseError(R"({"a": 1, "b": 2, "a": 3})"),
            R"(line 1, column 18: duplicate object key "a")");
  EXPECT_THAT(ParseError(R"({"x": {"k\n": 1, "k\n": 2}})"), HasSubstr(R"(duplicate object key "k\n")"));
}

TEST(JsonParse, ErrorPositionsCountLinesAndCharacters) {
  EXPECT_EQ(ParseError("{\n  \"a\": tru\n}"), "line 2, column 8: invalid literal, expected 'true'");
  // Columns count characters: the two-byte \xC3\xA9 is one column.
  EXPECT_EQ(ParseError("[\"\xC3\xA9\", x]"), "line 1, column 7: unexpected character 'x', expected a value");
  EXPECT_THAT(ParseError("[1,\n\n   2,,]"), HasSubstr("line 3, column 6:"));
}

std::string Nested(int depth, char open, char close, std::string_view inner) {
  std::string text;
  for (int i = 0; i < depth; ++i) {
    text += open;
    if (open == '{') text += "\"k\":";
  }
  text += inner;
  text.append(static_cast<size_t>(depth), close);
  return text;
}

TEST(JsonParse, DepthLimit) {
  EXPECT_TRUE(ParseJson(Nested(kJsonMaxDepth, '[', ']', "1")).ok());
  EXPECT_TRUE(ParseJson(Nested(kJsonMaxDepth, '{', '}', "1")).ok());
  EXPECT_THAT(ParseError(Nested(kJsonMaxDepth + 1, '[', ']', "1")),
              HasSubstr("line 1, column 513: arrays and objects nested deeper than 512"));
  EXPECT_THAT(ParseError(Nested(kJsonMaxDepth + 1, '{', '}', "1")), HasSubstr("nested deeper than 512"));
  // Far deeper than the limit fails the same way instead of exhausting the stack.
  EXPECT_THAT(ParseError(std::string(1'000'000, '[')), HasSubstr("nested deeper than 512"));
}

TEST(JsonValue, ObjectBuilding) {
  JsonValue object = JsonValue::MakeObject();
  EXPECT_TRUE(object.Insert("b", JsonValue::Int(1)));
  EXPECT_TRUE(object.Insert("a", JsonValue::Int(2)));
  EXPECT_FALSE(object.Insert("b", JsonValue::Int(3)));
  EXPECT_EQ(object.Find("b")->int_value(), 1);
  object.Set("b", JsonValue::String("x"));
  object.Set("c", JsonValue::Null());
  ASSERT_EQ(object.size(), 3u);
  EXPECT_EQ(object.members()[0].first, "b");
  EXPECT_EQ(object.members()[0].second.string_value(), "x");
  EXPECT_EQ(ToJson(object), R"({"b":"x","a":2,"c":null})");
}

TEST(JsonValue, WrongTypeAccessorsAreEmpty) {
  const JsonValue number = JsonValue::Int(3);
  EXPECT_EQ(number.string_value(), "");
  EXPECT_TRUE(number.array().empty());
  EXPECT_EQ(number.Find("x"), nullptr);
  EXPECT_EQ(number.size(), 0u);
  EXPECT_EQ(JsonTypeName(number.type()), "number");
  EXPECT_EQ(JsonTypeName(JsonValue::MakeObject().type()), "object");
}

TEST(JsonValue, NumbersFromDoubles) {
  EXPECT_EQ(JsonValue::Number(3.0).int_value(), 3);
  EXPECT_FALSE(JsonValue::Number(3.5).is_integer());
  EXPECT_FALSE(JsonValue::Number(1e300).is_integer());
  EXPECT_FALSE(JsonValue::Number(std::nan("")).is_integer());
  EXPECT_EQ(JsonValue::Number(-9223372036854775808.0).int_value(), std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(JsonValue::Number(9223372036854775808.0).is_integer());
}

TEST(JsonWrite, Compact) {
  const JsonValue v = ParseOrDie(R"( { "a" : [ 1 , 2.5 , true , null ] , "b" : { } , "c" : [ ] } )");
  EXPECT_EQ(ToJson(v), R"({"a":[1,2.5,true,null],"b":{},"c":[]})");
}

TEST(JsonWrite, Pretty) {
  const JsonValue v = ParseOrDie(R"({"a":[1,{"x":"y"}],"b":{},"c":[]})");
  EXPECT_EQ(ToJson(v, /*pretty=*/true),
            "{\n"
            "  \"a\": [\n"
            "    1,\n"
            "    {\n"
            "      \"x\": \"y\"\n"
            "    }\n"
            "  ],\n"
            "  \"b\": {},\n"
            "  \"c\": []\n"
            "}");
  EXPECT_EQ(ToJson(JsonValue::Int(7), true), "7");
}

TEST(JsonWrite, StringEscapes) {
  EXPECT_EQ(ToJson(JsonValue::String("q\"b\\/\b\f\n\r\t")), R"("q\"b\\/\b\f\n\r\t")");
  EXPECT_EQ(ToJson(JsonValue::String(std::string("\x01\x1F\x7F", 3))), "\"\\u0001\\u001f\x7F\"");
  EXPECT_EQ(ToJson(JsonValue::String(std::string("a\0b", 3))), R"("a\u0000b")");
  EXPECT_EQ(ToJson(JsonValue::String("\xC3\xA9\xF0\x9F\x98\x80")), "\"\xC3\xA9\xF0\x9F\x98\x80\"");
  // Invalid UTF-8 becomes U+FFFD so that the output stays valid JSON.
  EXPECT_EQ(ToJson(JsonValue::String("a\xFF" "b\xC3")), "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD\"");
  EXPECT_EQ(ToJson(JsonValue::String("\xED\xA0\x80")), "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

TEST(JsonWrite, Numbers) {
  EXPECT_EQ(ToJson(JsonValue::Number(3.0)), "3");
  EXPECT_EQ(ToJson(JsonValue::Number(-0.0)), "0");
  EXPECT_EQ(ToJson(JsonValue::Number(0.1)), "0.1");
  EXPECT_EQ(ToJson(JsonValue::Number(1e-5)), "1e-05");
  EXPECT_EQ(ToJson(JsonValue::Number(1e300)), "1e+300");
  EXPECT_EQ(ToJson(JsonValue::Number(1e-7 / 3)), "3.3333333333333334e-08");
  EXPECT_EQ(ToJson(JsonValue::Int(std::numeric_limits<int64_t>::min())), "-9223372036854775808");
  EXPECT_EQ(ToJson(ParseOrDie("9007199254740993")), "9007199254740993");
  EXPECT_EQ(ToJson(JsonValue::Number(std::numeric_limits<double>::infinity())), "null");
  EXPECT_EQ(ToJson(JsonValue::Number(std::nan(""))), "null");
}

TEST(JsonWrite, DoublesRoundTrip) {
  const double values[] = {0.1,     1.0 / 3,  2.0 / 3,  1e-300, 5e-324, 1.7976931348623157e308,
                           123.456, 6.02e23,  -1e-7,    1e22,   1e23,   9007199254740993.0,
                           1e-6,    1.25e-5,  3.14159265358979};
  for (double value : values) {
    const std::string text = ToJson(JsonValue::Number(value));
    const JsonValue back = ParseOrDie(text);
    EXPECT_EQ(back.number(), value) << text;
  }
}

TEST(JsonWrite, DocumentRoundTrip) {
  const std::string text = R"({
    "name": "kiln \u00e9 \ud83d\ude00 \"q\"",
    "sizes": [1, -2, 3.5, 1e-9, 9007199254740993, 12345678901234567890],
    "nested": {"a": [[], {}, [null, true, false]], "b": "\u0001"},
    "empty": ""
  })";
  const JsonValue parsed = ParseOrDie(text);
  for (bool pretty : {false, true}) {
    const std::string written = ToJson(parsed, pretty);
    EXPECT_EQ(ParseOrDie(written), parsed) << written;
    EXPECT_EQ(ToJson(ParseOrDie(written), pretty), written);
  }
}

}  // namespace
}  // namespace kiln

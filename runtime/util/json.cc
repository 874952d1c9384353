#include "runtime/util/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

// The integer a double holds, when it is integral and fits int64 exactly.
std::optional<int64_t> IntegralValue(double value) {
  // 2^63 is exactly representable; the range test also rejects NaN.
  if (!(value >= -9223372036854775808.0 && value < 9223372036854775808.0)) return std::nullopt;
  if (value != std::trunc(value)) return std::nullopt;
  return static_cast<int64_t>(value);
}

// Length of the well-formed UTF-8 sequence starting at text[pos] (which is
// >= 0x80), or 0 when it is not one: stray continuation bytes, overlong
// forms, UTF-16 surrogates and code points past U+10FFFF are all rejected.
size_t Utf8SequenceLength(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  size_t length;
  uint8_t second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // overlong
    if (lead == 0xED) second_max = 0x9F;  // surrogates U+D800..U+DFFF
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;  // overlong
    if (lead == 0xF4) second_max = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  if (byte(pos + 1) < second_min || byte(pos + 1) > second_max) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(pos + i) < 0x80 || byte(pos + i) > 0xBF) return 0;
  }
  return length;
}

void AppendUtf8(uint32_t code_point, std::string& out) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

void WriteString(std::string_view text, std::string& out) {
  out += '"';
  size_t pos = 0;
  while (pos < text.size()) {
    const auto c = static_cast<uint8_t>(text[pos]);
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text, pos);
      if (length == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD: keeps the output valid JSON
        ++pos;
      } else {
        out.append(text.substr(pos, length));
        pos += length;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++pos;
  }
  out += '"';
}

void WriteNumber(const JsonValue& value, std::string& out) {
  if (value.int_value().has_value()) {
    absl::StrAppend(&out, *value.int_value());
    return;
  }
  if (!std::isfinite(value.number())) {
    out += "null";
    return;
  }
  // std::to_chars without a precision gives the shortest form that reads back
  // to the same double.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value.number());
  out.append(buffer, result.ptr);
}

void WriteNewline(bool pretty, int indent, std::string& out) {
  if (!pretty) return;
  out += '\n';
  out.append(static_cast<size_t>(indent) * 2, ' ');
}

void WriteValue(const JsonValue& value, bool pretty, int indent, std::string& out) {
  switch (value.type()) {
    case JsonValue::Type::kNull:
      out += "null";
      return;
    case JsonValue::Type::kBool:
      out += value.bool_value() ? "true" : "false";
      return;
    case JsonValue::Type::kNumber:
      WriteNumber(value, out);
      return;
    case JsonValue::Type::kString:
      WriteString(value.string_value(), out);
      return;
    case JsonValue::Type::kArray: {
      if (value.array().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const JsonValue& item : value.array()) {
        if (!first) out += ',';
        first = false;
        WriteNewline(pretty, indent + 1, out);
        WriteValue(item, pretty, indent + 1, out);
      }
      WriteNewline(pretty, indent, out);
      out += ']';
      return;
    }
    case JsonValue::Type::kObject: {
      if (value.members().empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [key, member] : value.members()) {
        if (!first) out += ',';
        first = false;
        WriteNewline(pretty, indent + 1, out);
        WriteString(key, out);
        out += pretty ? ": " : ":";
        WriteValue(member, pretty, indent + 1, out);
      }
      WriteNewline(pretty, indent, out);
      out += '}';
      return;
    }
  }
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Recursive descent over the RFC 8259 grammar. Each Parse* function starts at
// the first byte of its construct and leaves pos_ just past it.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> Run() {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    JsonValue value;
    if (absl::Status status = ParseValue(value, 0); !status.ok()) return status;
    SkipWhitespace();
    if (pos_ != text_.size()) {
      return Error(pos_, absl::StrCat("unexpected ", Describe(pos_), " after the JSON value"));
    }
    return value;
  }

 private:
  absl::Status Error(size_t offset, std::string_view problem) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      const auto c = static_cast<uint8_t>(text_[i]);
      if (c == '\n') {
        ++line;
        column = 1;
      } else if ((c & 0xC0) != 0x80) {  // count characters, not UTF-8 bytes
        ++column;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ", column ", column, ": ", std::string(problem)));
  }

  // What sits at `offset`, for error messages.
  std::string Describe(size_t offset) const {
    if (offset >= text_.size()) return "end of input";
    const auto c = static_cast<uint8_t>(text_[offset]);
    if (c > 0x20 && c < 0x7F) return absl::StrFormat("character '%c'", c);
    return absl::StrFormat("byte 0x%02X", c);
  }

  void SkipWhitespace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
      ++pos_;
    }
  }

  absl::Status ParseValue(JsonValue& out, int depth) {
    SkipWhitespace();
    if (pos_ >= text_.size()) return Error(pos_, "unexpected end of input, expected a value");
    switch (text_[pos_]) {
      case '{':
        return ParseObject(out, depth + 1);
      case '[':
        return ParseArray(out, depth + 1);
      case '"': {
        std::string text;
        if (absl::Status status = ParseString(text); !status.ok()) return status;
        out = JsonValue::String(std::move(text));
        return absl::OkStatus();
      }
      case 't':
        return ParseLiteral("true", JsonValue::Bool(true), out);
      case 'f':
        return ParseLiteral("false", JsonValue::Bool(false), out);
      case 'n':
        return ParseLiteral("null", JsonValue::Null(), out);
      default:
        if (text_[pos_] == '-' || IsDigit(text_[pos_])) return ParseNumber(out);
        return Error(pos_, absl::StrCat("unexpected ", Describe(pos_), ", expected a value"));
    }
  }

  absl::Status ParseLiteral(std::string_view literal, JsonValue value, JsonValue& out) {
    if (text_.substr(pos_, literal.size()) != literal) {
      return Error(pos_, absl::StrCat("invalid literal, expected '", std::string(literal), "'"));
    }
    pos_ += literal.size();
    out = std::move(value);
    return absl::OkStatus();
  }

  absl::Status CheckDepth(size_t start, int depth) const {
    if (depth > kJsonMaxDepth) {
      return Error(start, absl::StrCat("arrays and objects nested deeper than ", kJsonMaxDepth));
    }
    return absl::OkStatus();
  }

  absl::Status ParseArray(JsonValue& out, int depth) {
    if (absl::Status status = CheckDepth(pos_, depth); !status.ok()) return status;
    ++pos_;  // '['
    out = JsonValue::MakeArray();
    SkipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      JsonValue item;
      if (absl::Status status = ParseValue(item, depth); !status.ok()) return status;
      out.array().push_back(std::move(item));
      SkipWhitespace();
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      if (pos_ >= text_.size() || text_[pos_] != ',') {
        return Error(pos_, absl::StrCat("unexpected ", Describe(pos_),
                                        ", expected ',' or ']' after an array element"));
      }
      ++pos_;
      SkipWhitespace();
      if (pos_ < text_.size() && text_[pos_] == ']') {
        return Error(pos_, "trailing comma before ']'");
      }
    }
  }

  absl::Status ParseObject(JsonValue& out, int depth) {
    if (absl::Status status = CheckDepth(pos_, depth); !status.ok()) return status;
    ++pos_;  // '{'
    out = JsonValue::MakeObject();
    SkipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] != '"') {
        return Error(pos_, absl::StrCat("unexpected ", Describe(pos_),
                                        ", expected a string object key"));
      }
      const size_t key_start = pos_;
      std::string key;
      if (absl::Status status = ParseString(key); !status.ok()) return status;
      if (out.Find(key) != nullptr) {
        std::string quoted;
        WriteString(key, quoted);
        return Error(key_start, absl::StrCat("duplicate object key ", quoted));
      }
      SkipWhitespace();
      if (pos_ >= text_.size() || text_[pos_] != ':') {
        return Error(pos_, absl::StrCat("unexpected ", Describe(pos_),
                                        ", expected ':' after an object key"));
      }
      ++pos_;
      JsonValue value;
      if (absl::Status status = ParseValue(value, depth); !status.ok()) return status;
      out.Insert(std::move(key), std::move(value));
      SkipWhitespace();
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      if (pos_ >= text_.size() || text_[pos_] != ',') {
        return Error(pos_, absl::StrCat("unexpected ", Describe(pos_),
                                        ", expected ',' or '}' after an object member"));
      }
      ++pos_;
      SkipWhitespace();
      if (pos_ < text_.size() && text_[pos_] == '}') {
        return Error(pos_, "trailing comma before '}'");
      }
    }
  }

  // Reads the four hex digits of a \u escape whose backslash is at `start`.
  absl::Status ParseHex4(size_t start, uint32_t& code_unit) {
    code_unit = 0;
    for (size_t i = 0; i < 4; ++i) {
      const size_t at = start + 2 + i;
      const int digit = at < text_.size() ? HexDigitValue(text_[at]) : -1;
      if (digit < 0) return Error(start, "\\u escape needs four hex digits");
      code_unit = code_unit * 16 + static_cast<uint32_t>(digit);
    }
    return absl::OkStatus();
  }

  absl::Status ParseEscape(std::string& out) {
    const size_t start = pos_;  // the backslash
    if (start + 1 >= text_.size()) return Error(start, "unterminated escape at end of input");
    const char kind = text_[start + 1];
    pos_ = start + 2;
    switch (kind) {
      case '"': out += '"'; return absl::OkStatus();
      case '\\': out += '\\'; return absl::OkStatus();
      case '/': out += '/'; return absl::OkStatus();
      case 'b': out += '\b'; return absl::OkStatus();
      case 'f': out += '\f'; return absl::OkStatus();
      case 'n': out += '\n'; return absl::OkStatus();
      case 'r': out += '\r'; return absl::OkStatus();
      case 't': out += '\t'; return absl::OkStatus();
      case 'u': break;
      default:
        return Error(start, absl::StrCat("invalid escape: backslash followed by ", Describe(start + 1)));
    }
    uint32_t unit;
    if (absl::Status status = ParseHex4(start, unit); !status.ok()) return status;
    pos_ = start + 6;
    if (unit >= 0xDC00 && unit <= 0xDFFF) {
      return Error(start, absl::StrFormat("lone low surrogate \\u%04X", unit));
    }
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      uint32_t low = 0;
      const bool has_low = text_.substr(pos_, 2) == "\\u" && ParseHex4(pos_, low).ok() &&
                           low >= 0xDC00 && low <= 0xDFFF;
      if (!has_low) {
        return Error(start, absl::StrFormat(
                                "high surrogate \\u%04X is not followed by a low surrogate", unit));
      }
      pos_ += 6;
      unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(unit, out);
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string& out) {
    const size_t start = pos_;
    ++pos_;  // opening quote
    while (true) {
      // Copy the run of bytes that need no attention in one go.
      const size_t run_start = pos_;
      while (pos_ < text_.size()) {
        const auto c = static_cast<uint8_t>(text_[pos_]);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++pos_;
      }
      out.append(text_.substr(run_start, pos_ - run_start));
      if (pos_ >= text_.size()) return Error(start, "unterminated string");
      const auto c = static_cast<uint8_t>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c == '\\') {
        if (absl::Status status = ParseEscape(out); !status.ok()) return status;
      } else if (c < 0x20) {
        return Error(pos_, absl::StrFormat("control character 0x%02X in a string must be escaped", c));
      } else {
        const size_t length = Utf8SequenceLength(text_, pos_);
        if (length == 0) return Error(pos_, absl::StrFormat("invalid UTF-8 byte 0x%02X in a string", c));
        out.append(text_.substr(pos_, length));
        pos_ += length;
      }
    }
  }

  absl::Status ParseNumber(JsonValue& out) {
    const size_t start = pos_;
    const auto digits = [&] {
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) {
      return Error(pos_, absl::StrCat("unexpected ", Describe(pos_), ", expected a digit after '-'"));
    }
    if (text_[pos_] == '0') {
      ++pos_;
      if (pos_ < text_.size() && IsDigit(text_[pos_])) {
        return Error(start, "numbers must not have leading zeros");
      }
    } else {
      digits();
    }
    const size_t integer_end = pos_;
    bool integer_literal = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integer_literal = false;
      ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) {
        return Error(pos_, absl::StrCat("unexpected ", Describe(pos_), ", expected a digit after '.'"));
      }
      digits();
    }
    size_t exponent_start = 0;
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integer_literal = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      exponent_start = pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_])) {
        return Error(pos_, absl::StrCat("unexpected ", Describe(pos_),
                                        ", expected a digit in the exponent"));
      }
      digits();
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integer_literal) {
      int64_t exact;
      if (std::from_chars(first, last, exact).ec == std::errc()) {
        out = JsonValue::Int(exact);
        return absl::OkStatus();
      }
      // Too large for int64: only the double view remains.
    }
    double value = 0;
    const auto result = std::from_chars(first, last, value);
    if (result.ec == std::errc::result_out_of_range) {
      if (!IsBelowOne(start, integer_end, exponent_start)) {
        return Error(start, absl::StrCat("number ", std::string(first, last),
                                         " is out of the range of a double"));
      }
      value = text_[start] == '-' ? -0.0 : 0.0;  // underflow
    } else if (result.ec != std::errc() || result.ptr != last) {
      return Error(start, absl::StrCat("malformed number ", std::string(first, last)));
    }
    out = JsonValue::Number(value);
    return absl::OkStatus();
  }

  // Whether the (grammatically valid, nonzero) number text_[start, pos_) has
  // magnitude below one: decides underflow from overflow when from_chars
  // reports the value out of range.
  bool IsBelowOne(size_t start, size_t integer_end, size_t exponent_start) const {
    size_t digit = text_[start] == '-' ? start + 1 : start;
    // Decimal exponent of the leading significant digit, before the exponent part.
    int64_t leading = 0;
    if (text_[digit] != '0') {
      leading = static_cast<int64_t>(integer_end - digit) - 1;
    } else {
      digit = integer_end + 1;  // past the '.'
      while (digit < text_.size() && text_[digit] == '0') ++digit;
      leading = -static_cast<int64_t>(digit - integer_end);
    }
    int64_t exponent = 0;
    if (exponent_start != 0) {
      for (size_t i = exponent_start; i < pos_ && exponent < 1'000'000'000; ++i) {
        exponent = exponent * 10 + (text_[i] - '0');
      }
      if (text_[exponent_start - 1] == '-') exponent = -exponent;
    }
    return leading + exponent < 0;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = value;
  return v;
}

JsonValue JsonValue::Number(double value) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = value;
  v.int_ = IntegralValue(value);
  return v;
}

JsonValue JsonValue::Int(int64_t value) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = static_cast<double>(value);
  v.int_ = value;
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.type_ = Type::kString;
  v.string_ = std::move(value);
  return v;
}

JsonValue JsonValue::MakeArray(Array items) {
  JsonValue v;
  v.type_ = Type::kArray;
  v.array_ = std::move(items);
  return v;
}

JsonValue JsonValue::MakeObject() {
  JsonValue v;
  v.type_ = Type::kObject;
  return v;
}

const JsonValue* JsonValue::Find(std::string_view key) const {
  const auto it = member_index_.find(key);
  return it == member_index_.end() ? nullptr : &members_[it->second].second;
}

JsonValue* JsonValue::Find(std::string_view key) {
  const auto it = member_index_.find(key);
  return it == member_index_.end() ? nullptr : &members_[it->second].second;
}

bool JsonValue::Insert(std::string key, JsonValue value) {
  if (member_index_.find(key) != member_index_.end()) return false;
  member_index_.emplace(key, members_.size());
  members_.emplace_back(std::move(key), std::move(value));
  return true;
}

void JsonValue::Set(std::string key, JsonValue value) {
  if (JsonValue* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  Insert(std::move(key), std::move(value));
}

size_t JsonValue::size() const {
  if (type_ == Type::kArray) return array_.size();
  if (type_ == Type::kObject) return members_.size();
  return 0;
}

bool JsonValue::operator==(const JsonValue& other) const {
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kNull:
      return true;
    case Type::kBool:
      return bool_ == other.bool_;
    case Type::kNumber:
      if (int_.has_value() && other.int_.has_value()) return *int_ == *other.int_;
      return number_ == other.number_;
    case Type::kString:
      return string_ == other.string_;
    case Type::kArray:
      return array_ == other.array_;
    case Type::kObject:
      return members_ == other.members_;
  }
  return false;
}

std::string_view JsonTypeName(JsonValue::Type type) {
  switch (type) {
    case JsonValue::Type::kNull: return "null";
    case JsonValue::Type::kBool: return "bool";
    case JsonValue::Type::kNumber: return "number";
    case JsonValue::Type::kString: return "string";
    case JsonValue::Type::kArray: return "array";
    case JsonValue::Type::kObject: return "object";
  }
  return "unknown";
}

absl::StatusOr<JsonValue> ParseJson(std::string_view text) { return Parser(text).Run(); }

std::string ToJson(const JsonValue& value, bool pretty) {
  std::string out;
  WriteValue(value, pretty, 0, out);
  return out;
}

}  // namespace kiln

// A small, strict JSON (RFC 8259) value, parser and writer. Used for
// config.json, safetensors headers, test goldens and the HTTP API, so the
// parser treats its input as untrusted: it rejects anything RFC 8259 does not
// allow (invalid UTF-8, lone surrogates, trailing garbage, duplicate object
// keys), limits nesting depth, and reports errors as "line L, column C: ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

// Arrays and objects nested deeper than this are rejected by ParseJson, so
// that hostile input cannot exhaust the stack of the recursive parser.
inline constexpr int kJsonMaxDepth = 512;

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<JsonValue>;
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;  // null
  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool value);
  // The int64 view is set when `value` is integral and within int64 range.
  static JsonValue Number(double value);
  static JsonValue Int(int64_t value);
  static JsonValue String(std::string value);
  static JsonValue MakeArray(Array items = {});
  static JsonValue MakeObject();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // A number whose value is an integer that fits int64.
  bool is_integer() const { return int_.has_value(); }

  // Accessors of the wrong type return false / 0 / empty; check type() first.
  bool bool_value() const { return bool_; }
  double number() const { return number_; }
  // Exact for integer literals (even beyond 2^53); for a literal with a
  // fraction or exponent it is the double's value when that is integral.
  std::optional<int64_t> int_value() const { return int_; }
  const std::string& string_value() const { return string_; }
  const Array& array() const { return array_; }
  Array& array() { return array_; }

  // Object members in insertion (document) order.
  const std::vector<Member>& members() const { return members_; }
  const JsonValue* Find(std::string_view key) const;
  JsonValue* Find(std::string_view key);
  // Adds a member; false (and nothing changes) when the key is already there.
  bool Insert(std::string key, JsonValue value);
  // Adds a member or replaces the value of an existing one in its place.
  void Set(std::string key, JsonValue value);

  // Elements of an array, members of an object, 0 otherwise.
  size_t size() const;

  // Same type and content; objects must also have the same member order.
  // Numbers compare by value (an int64 view, where both have one, decides).
  bool operator==(const JsonValue& other) const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::optional<int64_t> int_;
  std::string string_;
  Array array_;
  std::vector<Member> members_;
  std::map<std::string, size_t, std::less<>> member_index_;
};

// "null", "bool", "number", "string", "array", "object".
std::string_view JsonTypeName(JsonValue::Type type);

// Parses exactly one JSON value, optionally surrounded by whitespace (a
// leading UTF-8 byte order mark is skipped, as RFC 8259 permits). Errors are
// InvalidArgument with "line L, column C: <problem>"; columns count
// characters from 1. Numbers that overflow a double are rejected; numbers
// that underflow become zero.
absl::StatusOr<JsonValue> ParseJson(std::string_view text);

// Writes `value` as JSON. Compact by default; pretty uses two-space indents.
// Integral numbers print as integers, others in the shortest form that reads
// back to the same double. NaN and infinities (which JSON cannot express)
// print as null; invalid UTF-8 in strings prints as U+FFFD.
std::string ToJson(const JsonValue& value, bool pretty = false);

}  // namespace kiln

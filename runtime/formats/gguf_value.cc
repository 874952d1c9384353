// GgufValue: constructors, conversions and rendering.
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/formats/gguf.h"

namespace kiln {

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

namespace {
GgufValue Unsigned(GgufValueType t, uint64_t v) {
  GgufValue out;
  out.type = t;
  out.u = v;
  return out;
}
GgufValue Signed(GgufValueType t, int64_t v) {
  GgufValue out;
  out.type = t;
  out.i = v;
  return out;
}
GgufValue Floating(GgufValueType t, double v) {
  GgufValue out;
  out.type = t;
  out.f = v;
  return out;
}
}  // namespace

GgufValue GgufValue::U8(uint8_t v) { return Unsigned(GgufValueType::kUint8, v); }
GgufValue GgufValue::U16(uint16_t v) { return Unsigned(GgufValueType::kUint16, v); }
GgufValue GgufValue::U32(uint32_t v) { return Unsigned(GgufValueType::kUint32, v); }
GgufValue GgufValue::U64(uint64_t v) { return Unsigned(GgufValueType::kUint64, v); }
GgufValue GgufValue::I8(int8_t v) { return Signed(GgufValueType::kInt8, v); }
GgufValue GgufValue::I16(int16_t v) { return Signed(GgufValueType::kInt16, v); }
GgufValue GgufValue::I32(int32_t v) { return Signed(GgufValueType::kInt32, v); }
GgufValue GgufValue::I64(int64_t v) { return Signed(GgufValueType::kInt64, v); }
GgufValue GgufValue::F32(float v) { return Floating(GgufValueType::kFloat32, v); }
GgufValue GgufValue::F64(double v) { return Floating(GgufValueType::kFloat64, v); }

GgufValue GgufValue::Bool(bool v) {
  GgufValue out;
  out.type = GgufValueType::kBool;
  out.b = v;
  return out;
}

GgufValue GgufValue::String(std::string v) {
  GgufValue out;
  out.type = GgufValueType::kString;
  out.str = std::move(v);
  return out;
}

GgufValue GgufValue::Array(GgufValueType elem_type, std::vector<GgufValue> items) {
  GgufValue out;
  out.type = GgufValueType::kArray;
  out.array_type = elem_type;
  out.array = std::move(items);
  return out;
}

GgufValue GgufValue::StringArray(const std::vector<std::string>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(String(s));
  return Array(GgufValueType::kString, std::move(v));
}

GgufValue GgufValue::F32Array(const std::vector<float>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (float f : items) v.push_back(F32(f));
  return Array(GgufValueType::kFloat32, std::move(v));
}

GgufValue GgufValue::I32Array(const std::vector<int32_t>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(I32(x));
  return Array(GgufValueType::kInt32, std::move(v));
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const {
  return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

static bool IsUnsignedType(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 ||
         t == GgufValueType::kUint32 || t == GgufValueType::kUint64;
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (type == GgufValueType::kBool) return b ? 1 : 0;
  if (!is_integer()) return std::nullopt;
  if (IsUnsignedType(type)) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  return i;
}

std::optional<double> GgufValue::AsFloat() const {
  if (is_float()) return f;
  if (IsUnsignedType(type)) return static_cast<double>(u);
  if (is_integer()) return static_cast<double>(i);
  return std::nullopt;
}

std::string GgufValue::ToString(size_t max_items) const {
  switch (type) {
    case GgufValueType::kBool:
      return b ? "true" : "false";
    case GgufValueType::kString:
      if (str.size() > 120) return absl::StrFormat("\"%s...\" (%d bytes)", str.substr(0, 120), str.size());
      return absl::StrCat("\"", str, "\"");
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      return absl::StrFormat("%g", f);
    case GgufValueType::kArray: {
      std::string out = absl::StrFormat("[%s x %d]", GgufValueTypeName(array_type), array.size());
      if (max_items == 0 || array.empty()) return out;
      out += " {";
      for (size_t k = 0; k < array.size() && k < max_items; ++k) {
        if (k) out += ", ";
        out += array[k].ToString(0);
      }
      if (array.size() > max_items) out += ", ...";
      return out + "}";
    }
    default:
      return IsUnsignedType(type) ? absl::StrCat(u) : absl::StrCat(i);
  }
}

}  // namespace kiln

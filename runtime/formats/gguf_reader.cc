// GGUF parser. The file is untrusted: every length is checked against the
// bytes that remain before it is used, and every tensor extent against the
// data section, so a malformed file yields a precise error, never a crash.
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/formats/gguf.h"
#include "runtime/util/mapped_file.h"

namespace kiln {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr int kMaxDims = 4;              // ggml tensors have at most 4 dimensions
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected
// Array elements across all metadata. Each is held as a GgufValue (~100
// bytes), so a corrupt count in a large file could ask for hundreds of GB;
// real models hold a few million at most (vocabulary, scores, types, merges).
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;

// Smallest encoded size of one value of `t` (for bounding element counts).
uint64_t MinEncodedSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString:  // its uint64 length
      return 8;
    case GgufValueType::kArray:  // element type + count
      return 12;
  }
  return 1;
}

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

}  // namespace

// Reads the file front to back; `what` strings name the item being read so a
// failure can say where it happened.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  absl::Status Run(GgufFile& out) {
    out.name_ = name_;
    out.file_size_ = bytes_.size();
    if (bytes_.size() < 4) return Error("file", "truncated: too small to be a GGUF file (%d bytes)", bytes_.size());
    uint32_t magic;
    std::memcpy(&magic, bytes_.data(), 4);
    if (magic != kMagic) {
      return Error("file", "bad magic %s: not a GGUF file", Printable(bytes_.subspan(0, 4)));
    }
    pos_ = 4;
    uint32_t version;
    if (auto s = ReadPod(version, "version"); !s.ok()) return s;
    if (version == 0x03000000 || version == 0x02000000) {
      return Error("header", "big-endian GGUF files are not supported");
    }
    if (version != 2 && version != 3) {
      return Error("header", "unsupported GGUF version %d (kiln reads versions 2 and 3)", version);
    }
    out.version_ = version;
    uint64_t n_tensors, n_kv;
    if (auto s = ReadPod(n_tensors, "tensor count"); !s.ok()) return s;
    if (auto s = ReadPod(n_kv, "metadata count"); !s.ok()) return s;
    // Each key/value takes at least 12 bytes and each tensor info at least 24.
    if (n_kv > Remaining() / 12) {
      return Error("header", "metadata count %d cannot fit in the %d bytes that follow (truncated or corrupt)",
                   n_kv, Remaining());
    }
    if (n_tensors > Remaining() / 24) {
      return Error("header", "tensor count %d cannot fit in the %d bytes that follow (truncated or corrupt)",
                   n_tensors, Remaining());
    }

    out.metadata_.reserve(n_kv);
    for (uint64_t k = 0; k < n_kv; ++k) {
      std::string key;
      if (auto s = ReadString(key, absl::StrCat("metadata key #", k)); !s.ok()) return s;
      const std::string where = absl::StrCat("key '", key, "'");
      if (key.empty()) return Error(where, "empty metadata key (#%d)", k);
      if (out.metadata_index_.count(key)) return Error(where, "duplicate metadata key");
      uint32_t type;
      if (auto s = ReadPod(type, where + " type"); !s.ok()) return s;
      GgufValue value;
      if (auto s = ReadValue(type, value, where, 0); !s.ok()) return s;
      out.metadata_index_.emplace(key, out.metadata_.size());
      out.metadata_.emplace_back(std::move(key), std::move(value));
    }

    if (const GgufValue* a = out.Find("general.alignment")) {
      if (!a->is_integer()) {
        return Error("key 'general.alignment'", "must be an integer, found %s", GgufValueTypeName(a->type));
      }
      const std::optional<int64_t> v = a->AsInt();
      if (!v || *v <= 0 || (*v & (*v - 1)) != 0 || *v > (1 << 20)) {
        return Error("key 'general.alignment'", "must be a power of two between 1 and 2^20, found %s",
                     a->ToString());
      }
      out.alignment_ = static_cast<uint64_t>(*v);
    }

    out.tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; ++k) {
      if (auto s = ReadTensorInfo(out, k); !s.ok()) return s;
    }

    const uint64_t align = out.alignment_;
    uint64_t data_offset = pos_;
    if (data_offset % align) data_offset += align - data_offset % align;
    out.data_offset_ = data_offset;
    if (!out.tensors_.empty() && data_offset > bytes_.size()) {
      return Error("file", "truncated: tensor data section would start at %d, past the end (%d bytes)",
                   data_offset, bytes_.size());
    }
    const uint64_t data_size = data_offset <= bytes_.size() ? bytes_.size() - data_offset : 0;
    for (GgufTensor& t : out.tensors_) {
      const std::string where = absl::StrCat("tensor '", t.name, "'");
      if (t.offset % align) {
        return Error(where, "data offset %d is not a multiple of the alignment %d", t.offset, align);
      }
      if (t.offset > data_size || t.nbytes > data_size - t.offset) {
        return Error(where,
                     "data [%d, %d) extends past the end of the tensor data section (%d bytes; file truncated?)",
                     t.offset, t.offset + t.nbytes, data_size);
      }
      t.data = bytes_.data() + data_offset + t.offset;
    }
    // Tensors may appear in any order but must not share bytes.
    std::vector<const GgufTensor*> by_offset;
    for (const GgufTensor& t : out.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k) {
      const GgufTensor* prev = by_offset[k - 1];
      const GgufTensor* cur = by_offset[k];
      if (prev->nbytes > 0 && cur->offset < prev->offset + prev->nbytes) {
        return Error(absl::StrCat("tensor '", cur->name, "'"), "data overlaps tensor '%s' ([%d, %d) vs [%d, %d))",
                     prev->name, cur->offset, cur->offset + cur->nbytes, prev->offset, prev->offset + prev->nbytes);
      }
    }
    return absl::OkStatus();
  }

 private:
  template <typename... Args>
  absl::Status Error(std::string_view where, const absl::FormatSpec<Args...>& fmt, const Args&... args) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", std::string(where), ": ", absl::StrFormat(fmt, args...)));
  }

  static std::string Printable(std::span<const uint8_t> b) {
    std::string out = "\"";
    for (uint8_t c : b) {
      if (c >= 0x20 && c < 0x7f) {
        out += static_cast<char>(c);
      } else {
        out += absl::StrFormat("\\x%02x", c);
      }
    }
    return out + "\"";
  }

  uint64_t Remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  absl::Status ReadPod(T& v, std::string_view what) {
    if (Remaining() < sizeof(T)) {
      return Error(what, "truncated: need %d bytes at offset %d, file has %d", sizeof(T), pos_, bytes_.size());
    }
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string& s, std::string_view what) {
    uint64_t len;
    if (auto st = ReadPod(len, what); !st.ok()) return st;
    if (len > Remaining()) {
      return Error(what, "string length %d at offset %d runs past the end of the file (%d bytes left)", len,
                   pos_ - 8, Remaining());
    }
    s.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status ReadValue(uint32_t type, GgufValue& v, const std::string& where, int depth) {
    if (!IsKnownValueType(type)) return Error(where, "unknown metadata value type %d", type);
    v.type = static_cast<GgufValueType>(type);
    switch (v.type) {
      case GgufValueType::kUint8: { uint8_t x; auto s = ReadPod(x, where); v.u = x; return s; }
      case GgufValueType::kUint16: { uint16_t x; auto s = ReadPod(x, where); v.u = x; return s; }
      case GgufValueType::kUint32: { uint32_t x; auto s = ReadPod(x, where); v.u = x; return s; }
      case GgufValueType::kUint64: { uint64_t x; auto s = ReadPod(x, where); v.u = x; return s; }
      case GgufValueType::kInt8: { int8_t x; auto s = ReadPod(x, where); v.i = x; return s; }
      case GgufValueType::kInt16: { int16_t x; auto s = ReadPod(x, where); v.i = x; return s; }
      case GgufValueType::kInt32: { int32_t x; auto s = ReadPod(x, where); v.i = x; return s; }
      case GgufValueType::kInt64: { int64_t x; auto s = ReadPod(x, where); v.i = x; return s; }
      case GgufValueType::kFloat32: { float x; auto s = ReadPod(x, where); v.f = x; return s; }
      case GgufValueType::kFloat64: { double x; auto s = ReadPod(x, where); v.f = x; return s; }
      case GgufValueType::kBool: {
        uint8_t x;
        if (auto s = ReadPod(x, where); !s.ok()) return s;
        if (x > 1) return Error(where, "bool value %d is neither 0 nor 1", x);
        v.b = x != 0;
        return absl::OkStatus();
      }
      case GgufValueType::kString:
        return ReadString(v.str, where);
      case GgufValueType::kArray: {
        if (depth >= kMaxArrayDepth) return Error(where, "arrays nested deeper than %d levels", kMaxArrayDepth);
        uint32_t elem_type;
        uint64_t count;
        if (auto s = ReadPod(elem_type, where); !s.ok()) return s;
        if (!IsKnownValueType(elem_type)) return Error(where, "unknown array element type %d", elem_type);
        if (auto s = ReadPod(count, where); !s.ok()) return s;
        v.array_type = static_cast<GgufValueType>(elem_type);
        if (count > Remaining() / MinEncodedSize(v.array_type)) {
          return Error(where, "array of %d %s runs past the end of the file (%d bytes left)", count,
                       GgufValueTypeName(v.array_type), Remaining());
        }
        if (count > kMaxMetadataValues - array_values_) {
          return Error(where, "array of %d %s takes the metadata past %d values in all, more than any model has "
                       "(corrupt?)", count, GgufValueTypeName(v.array_type), kMaxMetadataValues);
        }
        array_values_ += count;
        v.array.resize(count);
        for (uint64_t k = 0; k < count; ++k) {
          if (auto s = ReadValue(elem_type, v.array[k], where, depth + 1); !s.ok()) return s;
        }
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadTensorInfo(GgufFile& out, uint64_t index) {
    GgufTensor t;
    if (auto s = ReadString(t.name, absl::StrCat("tensor info #", index, " name")); !s.ok()) return s;
    const std::string where = absl::StrCat("tensor '", t.name, "'");
    if (t.name.empty()) return Error(absl::StrCat("tensor info #", index), "empty tensor name");
    if (out.tensor_index_.count(t.name)) return Error(where, "duplicate tensor name");
    uint32_t n_dims;
    if (auto s = ReadPod(n_dims, where); !s.ok()) return s;
    if (n_dims > kMaxDims) return Error(where, "%d dimensions (ggml allows at most %d)", n_dims, kMaxDims);
    uint64_t nelements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t dim;
      if (auto s = ReadPod(dim, where); !s.ok()) return s;
      if (dim < 0) return Error(where, "dimension %d is negative (%d)", d, dim);
      if (dim != 0 && nelements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim) {
        return Error(where, "element count overflows 64 bits at dimension %d", d);
      }
      nelements *= static_cast<uint64_t>(dim);
      t.dims.push_back(dim);
    }
    uint32_t type;
    if (auto s = ReadPod(type, where); !s.ok()) return s;
    const std::optional<GgmlTypeInfo> info = GetGgmlTypeInfo(type);
    if (!info) return Error(where, "unknown tensor type %d", type);
    t.type = info->type;
    if (auto s = ReadPod(t.offset, where); !s.ok()) return s;
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % info->block_elems != 0) {
      return Error(where, "row length %d is not a multiple of the %s block size %d", row, info->name,
                   info->block_elems);
    }
    const std::optional<uint64_t> nbytes = GgmlRowBytes(t.type, nelements);
    if (!nbytes) return Error(where, "byte size of %d %s elements overflows", nelements, info->name);
    t.nbytes = *nbytes;
    t.nelements = static_cast<int64_t>(nelements);
    if (t.offset > std::numeric_limits<uint64_t>::max() - t.nbytes) {
      return Error(where, "data offset %d plus size %d overflows", t.offset, t.nbytes);
    }
    out.tensor_index_.emplace(t.name, out.tensors_.size());
    out.tensors_.push_back(std::move(t));
    return absl::OkStatus();
  }

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
  uint64_t array_values_ = 0;  // array elements read so far, against kMaxMetadataValues
};

GgufFile::~GgufFile() = default;

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = Parse((*mapped)->bytes(), path);
  if (!file.ok()) return file.status();
  (*file)->mapping_ = std::move(*mapped);
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  GgufParser parser(bytes, name);
  if (absl::Status s = parser.Run(*file); !s.ok()) return s;
  return file;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status Missing(const std::string& file, std::string_view key) {
  return absl::NotFoundError(absl::StrCat(file, ": metadata key '", std::string(key), "' not found"));
}

absl::Status WrongType(const std::string& file, std::string_view key, std::string_view expected,
                       const GgufValue& v) {
  std::string actual(GgufValueTypeName(v.type));
  if (v.type == GgufValueType::kArray) absl::StrAppend(&actual, " of ", std::string(GgufValueTypeName(v.array_type)));
  return absl::InvalidArgumentError(absl::StrCat(file, ": metadata key '", std::string(key), "': expected ",
                                                 std::string(expected), ", found ", actual));
}

}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (!v->is_integer()) return WrongType(name_, key, "an integer", *v);
  std::optional<int64_t> x = v->AsInt();
  if (!x) return absl::InvalidArgumentError(absl::StrCat(name_, ": metadata key '", std::string(key), "': value ",
                                                         v->ToString(), " does not fit in int64"));
  return *x;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  std::optional<double> x = v->AsFloat();
  if (!x) return WrongType(name_, key, "a number", *v);
  return *x;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type != GgufValueType::kBool) return WrongType(name_, key, "a bool", *v);
  return v->b;
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type != GgufValueType::kString) return WrongType(name_, key, "a string", *v);
  return v->str;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return WrongType(name_, key, "an array of string", *v);
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.str);
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type != GgufValueType::kArray || (v->array_type == GgufValueType::kString ||
                                           v->array_type == GgufValueType::kArray ||
                                           v->array_type == GgufValueType::kBool)) {
    return WrongType(name_, key, "an array of numbers", *v);
  }
  std::vector<float> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(static_cast<float>(*e.AsFloat()));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  GgufValue elem_kind;
  elem_kind.type = v->array_type;
  if (v->type != GgufValueType::kArray || !elem_kind.is_integer()) {
    return WrongType(name_, key, "an array of integers", *v);
  }
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    std::optional<int64_t> x = e.AsInt();
    if (!x) return absl::InvalidArgumentError(absl::StrCat(name_, ": metadata key '", std::string(key),
                                                           "': element does not fit in int64"));
    out.push_back(*x);
  }
  return out;
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(std::string_view key, int64_t fallback) const {
  return Find(key) ? GetInt(key) : fallback;
}
absl::StatusOr<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  return Find(key) ? GetFloat(key) : fallback;
}
absl::StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  return Find(key) ? GetBool(key) : fallback;
}
absl::StatusOr<std::string> GgufFile::GetStringOr(std::string_view key, std::string fallback) const {
  return Find(key) ? GetString(key) : absl::StatusOr<std::string>(std::move(fallback));
}

}  // namespace kiln

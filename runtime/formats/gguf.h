// GGUF model files (versions 2 and 3): a parsed, validated view over a
// memory-mapped file. Every offset and length in the file is checked before
// use; a malformed file yields an error naming the file, the key or tensor
// and the problem, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/formats/ggml_types.h"

namespace kiln {

class MappedFile;

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufValueTypeName(GgufValueType type);

// One metadata value. Integers are kept in `i` (signed) or `u` (unsigned)
// after widening, floats in `f`; arrays hold their elements (which may be
// arrays themselves) and the element type.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint32;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string str;
  GgufValueType array_type = GgufValueType::kUint32;
  std::vector<GgufValue> array;

  static GgufValue U8(uint8_t v);
  static GgufValue I8(int8_t v);
  static GgufValue U16(uint16_t v);
  static GgufValue I16(int16_t v);
  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue U64(uint64_t v);
  static GgufValue I64(int64_t v);
  static GgufValue F32(float v);
  static GgufValue F64(double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue Array(GgufValueType elem_type, std::vector<GgufValue> items);
  static GgufValue StringArray(const std::vector<std::string>& items);
  static GgufValue F32Array(const std::vector<float>& items);
  static GgufValue I32Array(const std::vector<int32_t>& items);

  bool is_integer() const;
  bool is_float() const;
  // The value as a signed integer, if it is an integer type (or bool) that fits.
  std::optional<int64_t> AsInt() const;
  // The value as a double, if it is numeric.
  std::optional<double> AsFloat() const;
  // Short human-readable rendering (arrays are summarised).
  std::string ToString(size_t max_items = 8) const;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous row length
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;   // from the start of the tensor data section
  uint64_t nbytes = 0;
  int64_t nelements = 0;
  const uint8_t* data = nullptr;  // into the mapped file

  int64_t rows() const { return dims.empty() ? 1 : nelements / dims[0]; }
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
};

class GgufFile {
 public:
  // Maps and parses `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes owned by the caller (which must outlive the result); `name`
  // is used in error messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes,
                                                         std::string name);
  ~GgufFile();

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }
  // Whether the bytes are a read-only mapping of the file (Open), whose
  // pages a reader may drop and have read back from the file.
  bool file_mapped() const { return mapping_ != nullptr; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;

  // Typed getters: NotFound if absent, InvalidArgument (naming the key, the
  // expected and the actual type) if the type does not fit.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  // Defaults for optional keys; a present key of the wrong type is still an error.
  absl::StatusOr<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  absl::StatusOr<double> GetFloatOr(std::string_view key, double fallback) const;
  absl::StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;
  absl::StatusOr<std::string> GetStringOr(std::string_view key, std::string fallback) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::unique_ptr<MappedFile> mapping_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kiln

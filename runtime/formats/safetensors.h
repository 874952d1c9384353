// Hugging Face safetensors files: an 8-byte little-endian header length, a
// JSON header {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {string: string}}, then the data section the offsets point
// into. The reader validates everything before handing out a tensor: a
// malformed file yields an error naming the file, the tensor and the problem.
// Tensor data is not aligned by the format (the header length is arbitrary),
// so readers must not assume alignment of `SafetensorsTensor::data`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

class MappedFile;

enum class SafetensorsDtype {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

// As the format spells it: "F32", "BF16", "F8_E4M3", ...
std::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
int64_t SafetensorsDtypeSize(SafetensorsDtype dtype);
// Exact (the format is case-sensitive); nullopt for a dtype kiln does not know.
std::optional<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name);

// The header is at most this long; a longer one means a corrupt or foreign
// file (the reference implementation uses the same limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // empty for a scalar
  int64_t num_elements = 1;
  // Byte range [data_begin, data_end) within the data section.
  uint64_t data_begin = 0;
  uint64_t data_end = 0;
  std::span<const uint8_t> data;
};

class SafetensorsFile {
 public:
  // Maps and validates the file at `path`; errors name `path`.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Validates a whole file held in memory; `bytes` must outlive the result.
  // `name` is what errors call the file.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::span<const uint8_t> bytes,
                                                               std::string_view name);
  ~SafetensorsFile();

  const std::string& name() const { return name_; }
  // In header order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view tensor_name) const;
  // "__metadata__", in header order.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // Offset of the data section in the file: 8 + header length.
  uint64_t data_offset() const { return data_offset_; }

 private:
  SafetensorsFile() = default;

  std::string name_;
  std::unique_ptr<MappedFile> file_;  // null for Parse()
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  uint64_t data_offset_ = 0;
};

// A model's weights: one safetensors file, or shards listed by a
// `*.safetensors.index.json` whose "weight_map" maps each tensor to the shard
// file (beside the index) that holds it.
class SafetensorsCheckpoint {
 public:
  // `path` is a .safetensors file or a .safetensors.index.json.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);
  // `dir/model.safetensors.index.json` when present, else `dir/model.safetensors`.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> OpenFolder(const std::string& dir);

  // The file opened: the index for a sharded checkpoint.
  const std::string& path() const { return path_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Every tensor of every shard, by name.
  const std::map<std::string, const SafetensorsTensor*, std::less<>>& tensors() const {
    return tensors_;
  }
  const SafetensorsTensor* Find(std::string_view tensor_name) const;

 private:
  SafetensorsCheckpoint() = default;
  absl::Status OpenShards(const std::string& index_path);

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> tensors_;
};

}  // namespace kiln

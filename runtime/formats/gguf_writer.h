// Writes GGUF files (version 3 by default). Tensor data is produced by a
// callback at write time, so a multi-gigabyte model streams to disk without
// being held in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/formats/gguf.h"

namespace kiln {

class GgufWriter {
 public:
  // Fills exactly `dst.size()` bytes of a tensor's data.
  using TensorFill = std::function<absl::Status(std::span<uint8_t> dst)>;

  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  // Adds or replaces a metadata key (order of first insertion is kept).
  void Set(std::string key, GgufValue value);
  // Declares a tensor; its byte size follows from type and dims. Fails on a
  // duplicate name, an unknown type or dims that are not whole blocks.
  absl::Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                         TensorFill fill);
  absl::Status AddTensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                         std::vector<uint8_t> data);

  // Writes to `path` (through a temporary file renamed at the end, so an
  // interrupted write never leaves a truncated model behind). `progress` is
  // called after each tensor with (tensors written, total).
  absl::Status WriteFile(const std::string& path,
                         const std::function<void(size_t, size_t)>& progress = nullptr) const;
  absl::StatusOr<std::vector<uint8_t>> WriteToBuffer() const;

  uint64_t TotalTensorBytes() const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    uint64_t nbytes;
    uint64_t offset;
    TensorFill fill;
  };
  absl::Status WriteTo(const std::function<absl::Status(std::span<const uint8_t>)>& sink,
                       const std::function<void(size_t, size_t)>& progress) const;

  uint32_t version_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace kiln

#include "runtime/formats/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

class ByteSink {
 public:
  template <typename T>
  void Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void Str(const std::string& s) {
    Pod<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void Value(const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::kUint8: Pod<uint8_t>(static_cast<uint8_t>(v.u)); break;
      case GgufValueType::kUint16: Pod<uint16_t>(static_cast<uint16_t>(v.u)); break;
      case GgufValueType::kUint32: Pod<uint32_t>(static_cast<uint32_t>(v.u)); break;
      case GgufValueType::kUint64: Pod<uint64_t>(v.u); break;
      case GgufValueType::kInt8: Pod<int8_t>(static_cast<int8_t>(v.i)); break;
      case GgufValueType::kInt16: Pod<int16_t>(static_cast<int16_t>(v.i)); break;
      case GgufValueType::kInt32: Pod<int32_t>(static_cast<int32_t>(v.i)); break;
      case GgufValueType::kInt64: Pod<int64_t>(v.i); break;
      case GgufValueType::kFloat32: Pod<float>(static_cast<float>(v.f)); break;
      case GgufValueType::kFloat64: Pod<double>(v.f); break;
      case GgufValueType::kBool: Pod<uint8_t>(v.b ? 1 : 0); break;
      case GgufValueType::kString: Str(v.str); break;
      case GgufValueType::kArray:
        Pod<uint32_t>(static_cast<uint32_t>(v.array_type));
        Pod<uint64_t>(v.array.size());
        for (const GgufValue& e : v.array) Value(e);
        break;
    }
  }
  void PadTo(uint64_t alignment) {
    while (buf_.size() % alignment) buf_.push_back(0);
  }
  std::vector<uint8_t>& bytes() { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

// Checks that array elements all carry the declared element type, so the
// file we write is one our reader (and llama.cpp's) accepts.
absl::Status CheckValue(const std::string& key, const GgufValue& v) {
  if (v.type != GgufValueType::kArray) return absl::OkStatus();
  for (const GgufValue& e : v.array) {
    if (e.type != v.array_type) {
      return absl::InvalidArgumentError(absl::StrFormat("gguf writer: key '%s': array of %s holds a %s", key,
                                                        GgufValueTypeName(v.array_type),
                                                        GgufValueTypeName(e.type)));
    }
    if (absl::Status s = CheckValue(key, e); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment) : version_(version), alignment_(alignment) {
  if (alignment_ != 32) Set("general.alignment", GgufValue::U32(static_cast<uint32_t>(alignment_)));
}

void GgufWriter::Set(std::string key, GgufValue value) {
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

absl::Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> dims, TensorFill fill) {
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return absl::AlreadyExistsError(absl::StrCat("gguf writer: duplicate tensor '", name, "'"));
  }
  if (dims.empty() || dims.size() > 4) {
    return absl::InvalidArgumentError(absl::StrFormat("gguf writer: tensor '%s': %d dims (1 to 4 allowed)", name,
                                                      dims.size()));
  }
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d <= 0) return absl::InvalidArgumentError(absl::StrFormat("gguf writer: tensor '%s': dim %d", name, d));
    n *= static_cast<uint64_t>(d);
  }
  const GgmlTypeInfo& info = GetGgmlTypeInfo(type);
  if (dims[0] % info.block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "gguf writer: tensor '%s': row length %d is not a multiple of the %s block size %d", name, dims[0],
        info.name, info.block_elems));
  }
  const std::optional<uint64_t> nbytes = GgmlRowBytes(type, n);
  if (!nbytes) return absl::InvalidArgumentError(absl::StrCat("gguf writer: tensor '", name, "': size overflows"));
  const uint64_t offset = data_size_;
  data_size_ += *nbytes;
  if (data_size_ % alignment_) data_size_ += alignment_ - data_size_ % alignment_;
  tensors_.push_back({std::move(name), type, std::move(dims), *nbytes, offset, std::move(fill)});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<int64_t> dims,
                                   std::vector<uint8_t> data) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
  const std::string label = name;
  return AddTensor(std::move(name), type, std::move(dims), [shared, label](std::span<uint8_t> dst) {
    if (dst.size() != shared->size()) {
      return absl::InvalidArgumentError(absl::StrFormat("gguf writer: tensor '%s': %d bytes given, %d expected",
                                                        label, shared->size(), dst.size()));
    }
    std::memcpy(dst.data(), shared->data(), dst.size());
    return absl::OkStatus();
  });
}

uint64_t GgufWriter::TotalTensorBytes() const {
  uint64_t n = 0;
  for (const PendingTensor& t : tensors_) n += t.nbytes;
  return n;
}

absl::Status GgufWriter::WriteTo(const std::function<absl::Status(std::span<const uint8_t>)>& sink,
                                 const std::function<void(size_t, size_t)>& progress) const {
  ByteSink head;
  head.Pod<uint32_t>(0x46554747);
  head.Pod<uint32_t>(version_);
  head.Pod<uint64_t>(tensors_.size());
  head.Pod<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    if (absl::Status s = CheckValue(key, value); !s.ok()) return s;
    head.Str(key);
    head.Pod<uint32_t>(static_cast<uint32_t>(value.type));
    head.Value(value);
  }
  for (const PendingTensor& t : tensors_) {
    head.Str(t.name);
    head.Pod<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) head.Pod<int64_t>(d);
    head.Pod<uint32_t>(static_cast<uint32_t>(t.type));
    head.Pod<uint64_t>(t.offset);
  }
  head.PadTo(alignment_);
  if (absl::Status s = sink(head.bytes()); !s.ok()) return s;

  std::vector<uint8_t> buf;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const PendingTensor& t = tensors_[k];
    uint64_t padded = t.nbytes;
    if (padded % alignment_) padded += alignment_ - padded % alignment_;
    buf.assign(padded, 0);
    if (absl::Status s = t.fill(std::span<uint8_t>(buf.data(), t.nbytes)); !s.ok()) return s;
    if (absl::Status s = sink(buf); !s.ok()) return s;
    if (progress) progress(k + 1, tensors_.size());
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteFile(const std::string& path,
                                   const std::function<void(size_t, size_t)>& progress) const {
  const std::string tmp = path + ".part";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  absl::Status status = WriteTo(
      [&](std::span<const uint8_t> bytes) {
        if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
          return absl::ResourceExhaustedError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
        }
        return absl::OkStatus();
      },
      progress);
  if (std::fclose(f) != 0 && status.ok()) {
    status = absl::ResourceExhaustedError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
  }
  if (!status.ok()) {
    std::remove(tmp.c_str());
    return status;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": rename failed: ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::WriteToBuffer() const {
  std::vector<uint8_t> out;
  absl::Status s = WriteTo(
      [&](std::span<const uint8_t> bytes) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        return absl::OkStatus();
      },
      nullptr);
  if (!s.ok()) return s;
  return out;
}

}  // namespace kiln

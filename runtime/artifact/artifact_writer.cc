#include "runtime/artifact/artifact_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/artifact/storage_type.h"
#include "runtime/artifact/xxhash64.h"

namespace kiln {
namespace {

constexpr uint32_t kMaxSectionAlignment = 1u << 20;
// The weights section starts on a page so a backend can map, pin
// (cuMemHostRegister) or read (O_DIRECT) exactly its range of the file.
constexpr uint32_t kWeightsSectionAlignment = 4096;

uint64_t AlignUp(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// The same status with `context: ` in front of its message.
absl::Status WithContext(const absl::Status& status, const std::string& context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// A file written front to back, whose first bytes (header and table) are
// rewritten at the end, once the checksums are known.
class OutputFile {
 public:
  explicit OutputFile(std::string path) : path_(std::move(path)) {}
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  absl::Status Create() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return fd_ < 0 ? Error("cannot create") : absl::OkStatus();
  }

  absl::Status Append(std::span<const uint8_t> bytes, Xxh64* hash) {
    if (hash != nullptr) hash->Update(bytes);
    if (absl::Status s = WriteAt(position_, bytes); !s.ok()) return s;
    position_ += bytes.size();
    return absl::OkStatus();
  }

  // Zeros up to `offset` (padding before a section or a tensor).
  absl::Status PadTo(uint64_t offset, Xxh64* hash) {
    static constexpr uint8_t kZeros[4096] = {};
    while (position_ < offset) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(offset - position_, sizeof(kZeros)));
      if (absl::Status s = Append(std::span<const uint8_t>(kZeros, n), hash); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status WriteAt(uint64_t offset, std::span<const uint8_t> bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Error("write failed");
      bytes = bytes.subspan(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status SyncAndClose() {
    const bool synced = ::fsync(fd_) == 0;
    const int fd = std::exchange(fd_, -1);
    if (!synced) {
      absl::Status s = Error("fsync failed");
      ::close(fd);
      return s;
    }
    return ::close(fd) == 0 ? absl::OkStatus() : Error("close failed");
  }

  uint64_t position() const { return position_; }

 private:
  absl::Status Error(const char* what) const {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(path_, ": ", what, ": ", std::strerror(err)));
  }

  std::string path_;
  int fd_ = -1;
  uint64_t position_ = 0;
};

template <typename Bytes>
ArtifactWriter::Fill CopyFrom(Bytes bytes) {
  auto shared = std::make_shared<Bytes>(std::move(bytes));
  return [shared](std::span<uint8_t> dst) {
    std::memcpy(dst.data(), shared->data(), dst.size());
    return absl::OkStatus();
  };
}

}  // namespace

absl::Status ArtifactWriter::AddSection(SectionKind kind, std::string name, uint64_t size, Fill fill,
                                        uint32_t alignment) {
  if (!IsKnownSectionKind(static_cast<uint32_t>(kind))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("artifact writer: unknown section kind %d", static_cast<uint32_t>(kind)));
  }
  const std::string label = SectionLabel(kind, name);
  if (kind == SectionKind::kWeights || kind == SectionKind::kWeightsIndex) {
    return absl::InvalidArgumentError(
        absl::StrCat("artifact writer: ", label, ": weights and their index are added with AddWeight"));
  }
  if (absl::Status s = CheckSectionName(name); !s.ok()) return WithContext(s, "artifact writer");
  if (alignment < kSectionAlignment || alignment > kMaxSectionAlignment || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("artifact writer: %s: alignment %d is not a power of two from %d to %d", label, alignment,
                        kSectionAlignment, kMaxSectionAlignment));
  }
  for (const PendingSection& s : sections_) {
    if (s.kind == kind && s.name == name) {
      return absl::AlreadyExistsError(absl::StrCat("artifact writer: duplicate ", label));
    }
  }
  sections_.push_back({kind, std::move(name), size, alignment, std::move(fill)});
  return absl::OkStatus();
}

absl::Status ArtifactWriter::AddSection(SectionKind kind, std::string name, std::vector<uint8_t> bytes,
                                        uint32_t alignment) {
  const uint64_t size = bytes.size();
  return AddSection(kind, std::move(name), size, CopyFrom(std::move(bytes)), alignment);
}

absl::Status ArtifactWriter::AddSection(SectionKind kind, std::string name, std::string bytes, uint32_t alignment) {
  const uint64_t size = bytes.size();
  return AddSection(kind, std::move(name), size, CopyFrom(std::move(bytes)), alignment);
}

absl::Status ArtifactWriter::AddWeight(std::string name, std::string storage, std::vector<int64_t> shape, Fill fill) {
  if (absl::Status s = CheckWeightName(name); !s.ok()) return WithContext(s, "artifact writer");
  for (const PendingWeight& w : weights_) {
    if (w.weight.name == name) {
      return absl::AlreadyExistsError(absl::StrCat("artifact writer: duplicate weight '", name, "'"));
    }
  }
  absl::StatusOr<uint64_t> nbytes = StorageBytes(storage, shape);
  if (!nbytes.ok()) return WithContext(nbytes.status(), absl::StrCat("artifact writer: weight '", name, "'"));
  const uint64_t offset = AlignUp(weights_size_, kWeightAlignment);
  weights_size_ = offset + *nbytes;
  weights_.push_back(
      {ArtifactWeight{std::move(name), std::move(storage), std::move(shape), offset, *nbytes, {}}, std::move(fill)});
  return absl::OkStatus();
}

absl::Status ArtifactWriter::AddWeight(std::string name, std::string storage, std::vector<int64_t> shape,
                                       std::vector<uint8_t> bytes) {
  absl::StatusOr<uint64_t> nbytes = StorageBytes(storage, shape);
  if (nbytes.ok() && *nbytes != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrFormat("artifact writer: weight '%s': %d bytes given, %s needs %d", name,
                                                      bytes.size(), storage, *nbytes));
  }
  return AddWeight(std::move(name), std::move(storage), std::move(shape), CopyFrom(std::move(bytes)));
}

absl::Status ArtifactWriter::Write(const std::string& path, const Progress& progress) const {
  // Lay out: header, table, then each section at its alignment.
  std::vector<SectionEntry> entries;
  for (const PendingSection& s : sections_) {
    entries.push_back({static_cast<uint32_t>(s.kind), s.alignment, 0, s.size, 0, s.name});
  }
  std::string index;
  if (!weights_.empty()) {
    std::vector<ArtifactWeight> listed;
    for (const PendingWeight& w : weights_) listed.push_back(w.weight);
    index = EncodeWeightsIndex(listed);
    entries.push_back({static_cast<uint32_t>(SectionKind::kWeightsIndex), kSectionAlignment, 0, index.size(), 0, ""});
    entries.push_back(
        {static_cast<uint32_t>(SectionKind::kWeights), kWeightsSectionAlignment, 0, weights_size_, 0, ""});
  }
  const uint64_t table_end = kArtifactHeaderSize + entries.size() * kSectionEntrySize;
  uint64_t file_size = table_end;
  for (SectionEntry& e : entries) {
    e.offset = AlignUp(file_size, e.alignment);
    file_size = e.offset + e.size;
  }

  const std::string part = path + ".part";
  absl::Status status = [&]() -> absl::Status {
    OutputFile out(part);
    if (absl::Status s = out.Create(); !s.ok()) return s;
    if (absl::Status s = out.PadTo(table_end, nullptr); !s.ok()) return s;  // header and table come last
    std::vector<uint8_t> buffer;
    for (size_t i = 0; i < entries.size(); ++i) {
      SectionEntry& e = entries[i];
      const auto kind = static_cast<SectionKind>(e.kind);
      const std::string label = absl::StrCat(path, ": ", SectionLabel(kind, e.name));
      if (absl::Status s = out.PadTo(e.offset, nullptr); !s.ok()) return s;
      Xxh64 hash;
      if (kind == SectionKind::kWeightsIndex) {
        if (absl::Status s = out.Append({reinterpret_cast<const uint8_t*>(index.data()), index.size()}, &hash);
            !s.ok()) {
          return s;
        }
      } else if (kind == SectionKind::kWeights) {
        for (const PendingWeight& w : weights_) {
          if (absl::Status s = out.PadTo(e.offset + w.weight.offset, &hash); !s.ok()) return s;
          buffer.assign(w.weight.nbytes, 0);
          if (absl::Status s = w.fill(buffer); !s.ok()) {
            return WithContext(s, absl::StrCat(path, ": weight '", w.weight.name, "'"));
          }
          if (absl::Status s = out.Append(buffer, &hash); !s.ok()) return s;
          if (progress) progress(out.position(), file_size);
        }
      } else {  // a user section: entries[i] was made from sections_[i]
        buffer.assign(e.size, 0);
        if (absl::Status s = sections_[i].fill(buffer); !s.ok()) return WithContext(s, label);
        if (absl::Status s = out.Append(buffer, &hash); !s.ok()) return s;
      }
      e.checksum = hash.Digest();
      if (progress && kind != SectionKind::kWeights) progress(out.position(), file_size);
    }

    std::vector<uint8_t> head(table_end);
    for (size_t i = 0; i < entries.size(); ++i) {
      EncodeSectionEntry(entries[i], std::span<uint8_t, kSectionEntrySize>(
                                         head.data() + kArtifactHeaderSize + i * kSectionEntrySize, kSectionEntrySize));
    }
    ArtifactHeader header;
    header.section_count = static_cast<uint32_t>(entries.size());
    header.table_offset = kArtifactHeaderSize;
    header.file_size = file_size;
    const std::span<uint8_t, kArtifactHeaderSize> header_bytes(head.data(), kArtifactHeaderSize);
    EncodeHeader(header, header_bytes);
    header.checksum = HeaderChecksum(header_bytes, std::span<const uint8_t>(head).subspan(kArtifactHeaderSize));
    EncodeHeader(header, header_bytes);
    if (absl::Status s = out.WriteAt(0, head); !s.ok()) return s;
    return out.SyncAndClose();
  }();
  if (!status.ok()) {
    std::remove(part.c_str());
    return status;
  }
  if (std::rename(part.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(part.c_str());
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat(path, ": rename from ", part, " failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace kiln

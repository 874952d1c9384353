#include "runtime/artifact/artifact.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/artifact/xxhash64.h"
#include "runtime/util/mapped_file.h"

namespace kiln {
namespace {

constexpr absl::StatusCode kMalformed = absl::StatusCode::kInvalidArgument;
// Checksum mismatches and truncation: the bytes are not what was written.
constexpr absl::StatusCode kCorrupt = absl::StatusCode::kDataLoss;

// A byte range of the file that nothing else may overlap.
struct Extent {
  uint64_t begin;
  uint64_t end;
  std::string what;
};

std::string Describe(const Extent& e) { return absl::StrFormat("%s [%d, %d)", e.what, e.begin, e.end); }

}  // namespace

Artifact::~Artifact() = default;

absl::StatusOr<std::unique_ptr<Artifact>> Artifact::Open(const std::string& path, const ArtifactOpenOptions& options) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  absl::StatusOr<std::unique_ptr<Artifact>> artifact = Parse((*mapped)->bytes(), path, options);
  if (!artifact.ok()) return artifact.status();
  (*artifact)->mapping_ = *std::move(mapped);
  return artifact;
}

absl::StatusOr<std::unique_ptr<Artifact>> Artifact::Parse(std::span<const uint8_t> bytes, std::string name,
                                                          const ArtifactOpenOptions& options) {
  std::unique_ptr<Artifact> artifact(new Artifact());
  artifact->name_ = std::move(name);
  artifact->bytes_ = bytes;
  absl::StatusOr<ArtifactHeader> header = artifact->ReadHeader();
  if (!header.ok()) return header.status();
  if (absl::Status s = artifact->ReadSectionTable(*header); !s.ok()) return s;
  if (absl::Status s = artifact->CheckLayout(header->table_offset, uint64_t{header->section_count} * kSectionEntrySize);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = artifact->CheckSectionChecksums(options); !s.ok()) return s;
  if (absl::Status s = artifact->ReadWeights(); !s.ok()) return s;
  return artifact;
}

absl::Status Artifact::Error(absl::StatusCode code, std::string_view problem) const {
  return absl::Status(code, absl::StrCat(name_, ": ", std::string(problem)));
}

// Magic, version, flags, file size, table bounds and the header checksum.
absl::StatusOr<ArtifactHeader> Artifact::ReadHeader() {
  if (bytes_.size() < kArtifactHeaderSize) {
    return Error(kCorrupt, absl::StrFormat("truncated: %d bytes, shorter than the %d-byte header", bytes_.size(),
                                           kArtifactHeaderSize));
  }
  if (std::memcmp(bytes_.data(), kArtifactMagic, sizeof(kArtifactMagic)) != 0) {
    return Error(kMalformed, "not a kiln artifact (bad magic)");
  }
  const std::span<const uint8_t, kArtifactHeaderSize> header_bytes(bytes_.data(), kArtifactHeaderSize);
  const ArtifactHeader header = DecodeHeader(header_bytes);
  if (header.version != kArtifactVersion) {
    return Error(kMalformed, absl::StrFormat("format version %d is not supported (this build reads version %d)",
                                             header.version, kArtifactVersion));
  }
  if (header.flags != 0) {
    return Error(kMalformed, absl::StrFormat("unknown flags 0x%x (format version %d defines none)", header.flags,
                                             kArtifactVersion));
  }
  if (header.file_size != bytes_.size()) {
    return Error(kCorrupt, absl::StrFormat("file is %d bytes but its header says %d (truncated or appended to)",
                                           bytes_.size(), header.file_size));
  }
  const uint64_t table_size = uint64_t{header.section_count} * kSectionEntrySize;
  if (header.table_offset < kArtifactHeaderSize) {
    return Error(kMalformed, absl::StrFormat("section table at offset %d overlaps the header", header.table_offset));
  }
  if (header.table_offset > bytes_.size() || table_size > bytes_.size() - header.table_offset) {
    return Error(kMalformed,
                 absl::StrFormat("section table (%d entries at offset %d) runs past the end of the file (%d bytes)",
                                 header.section_count, header.table_offset, bytes_.size()));
  }
  const std::span<const uint8_t> table = bytes_.subspan(header.table_offset, table_size);
  if (const uint64_t actual = HeaderChecksum(header_bytes, table); actual != header.checksum) {
    return Error(kCorrupt, absl::StrFormat("header checksum mismatch (expected 0x%016x, actual 0x%016x)",
                                           header.checksum, actual));
  }
  version_ = header.version;
  return header;
}

// Each entry's kind, name, alignment and bounds, and (kind, name) unique.
absl::Status Artifact::ReadSectionTable(const ArtifactHeader& header) {
  const std::span<const uint8_t> table =
      bytes_.subspan(header.table_offset, uint64_t{header.section_count} * kSectionEntrySize);
  std::map<std::pair<SectionKind, std::string>, size_t> by_kind_name;
  for (size_t i = 0; i < header.section_count; ++i) {
    const std::span<const uint8_t, kSectionEntrySize> raw(table.data() + i * kSectionEntrySize, kSectionEntrySize);
    const SectionEntry entry = DecodeSectionEntry(raw);
    if (!IsKnownSectionKind(entry.kind)) {
      return Error(kMalformed, absl::StrFormat("section #%d: unknown kind %d", i, entry.kind));
    }
    if (!SectionNameIsPadded(raw)) {
      return Error(kMalformed, absl::StrFormat("section #%d: name is not NUL-terminated and NUL-padded", i));
    }
    if (absl::Status s = CheckSectionName(entry.name); !s.ok()) {
      return Error(kMalformed, absl::StrFormat("section #%d: %s", i, s.message()));
    }
    const auto kind = static_cast<SectionKind>(entry.kind);
    const std::string label = SectionLabel(kind, entry.name);
    if (entry.alignment < kSectionAlignment || (entry.alignment & (entry.alignment - 1)) != 0) {
      return Error(kMalformed, absl::StrFormat("%s: alignment %d is not a power of two of at least %d", label,
                                               entry.alignment, kSectionAlignment));
    }
    if (entry.offset % entry.alignment != 0) {
      return Error(kMalformed, absl::StrFormat("%s: misaligned: offset %d is not a multiple of its alignment %d", label,
                                               entry.offset, entry.alignment));
    }
    if (entry.offset > bytes_.size() || entry.size > bytes_.size() - entry.offset) {
      return Error(kMalformed, absl::StrFormat("%s: bytes [%d, +%d) run past the end of the file (%d bytes)", label,
                                               entry.offset, entry.size, bytes_.size()));
    }
    if (auto [it, added] = by_kind_name.emplace(std::pair(kind, entry.name), i); !added) {
      return Error(kMalformed, absl::StrFormat("duplicate %s (table entries #%d and #%d)", label, it->second, i));
    }
    sections_.push_back(
        {kind, entry.name, entry.alignment, entry.offset, entry.checksum, bytes_.subspan(entry.offset, entry.size)});
  }
  return absl::OkStatus();
}

absl::Status Artifact::CheckSectionChecksums(const ArtifactOpenOptions& options) const {
  for (const ArtifactSection& s : sections_) {
    if (s.kind == SectionKind::kWeights && !options.verify_weights) continue;
    if (absl::Status st = CheckSectionChecksum(s); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// At most one weights and one weights_index section, both or neither, and
// an index that describes the weights section.
absl::Status Artifact::ReadWeights() {
  const ArtifactSection* index = nullptr;
  const ArtifactSection* weights = nullptr;
  for (const ArtifactSection& s : sections_) {
    const ArtifactSection** slot = s.kind == SectionKind::kWeights        ? &weights
                                   : s.kind == SectionKind::kWeightsIndex ? &index
                                                                          : nullptr;
    if (slot == nullptr) continue;
    if (*slot != nullptr) {
      return Error(kMalformed, absl::StrFormat("two %s sections ('%s' and '%s'); one is allowed",
                                               SectionKindName(s.kind), (*slot)->name, s.name));
    }
    *slot = &s;
  }
  if ((index == nullptr) != (weights == nullptr)) {
    return Error(kMalformed, index == nullptr ? "a weights section needs a weights_index section"
                                              : "a weights_index section needs a weights section");
  }

  if (index == nullptr) return absl::OkStatus();  // a program-only artifact
  absl::StatusOr<std::vector<ArtifactWeight>> decoded = DecodeWeightsIndex(index->bytes, weights->bytes);
  if (!decoded.ok()) {
    return Error(kMalformed, absl::StrCat(SectionLabel(index->kind, index->name), ": ", decoded.status().message()));
  }
  weights_ = *std::move(decoded);
  for (size_t i = 0; i < weights_.size(); ++i) weight_by_name_.emplace(weights_[i].name, i);
  return absl::OkStatus();
}

// No section may overlap the header, the table or another section (empty
// sections occupy nothing), and every byte outside them must be zero: then
// each byte of the file is either under a checksum or known, and no change
// to it goes unnoticed.
absl::Status Artifact::CheckLayout(uint64_t table_offset, uint64_t table_size) const {
  std::vector<Extent> extents = {
      {0, kArtifactHeaderSize, "the header"},
      {table_offset, table_offset + table_size, "the section table"},
  };
  for (const ArtifactSection& s : sections_) {
    if (!s.bytes.empty()) extents.push_back({s.offset, s.offset + s.bytes.size(), SectionLabel(s.kind, s.name)});
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  const Extent* furthest = nullptr;  // of the extents so far, the one reaching furthest
  for (const Extent& e : extents) {
    if (e.begin == e.end) continue;
    if (furthest != nullptr && e.begin < furthest->end) {
      return Error(kMalformed, absl::StrCat(Describe(e), " overlaps ", Describe(*furthest)));
    }
    if (absl::Status s = CheckPadding(furthest == nullptr ? 0 : furthest->end, e.begin); !s.ok()) return s;
    if (furthest == nullptr || e.end > furthest->end) furthest = &e;
  }
  return CheckPadding(furthest->end, bytes_.size());
}

absl::Status Artifact::CheckPadding(uint64_t begin, uint64_t end) const {
  for (uint64_t i = begin; i < end; ++i) {
    if (bytes_[i] != 0) {
      return Error(kCorrupt,
                   absl::StrFormat("non-zero byte 0x%02x at offset %d, in padding outside any section", bytes_[i], i));
    }
  }
  return absl::OkStatus();
}

absl::Status Artifact::CheckSectionChecksum(const ArtifactSection& section) const {
  if (const uint64_t actual = Xxh64Hash(section.bytes); actual != section.checksum) {
    return Error(kCorrupt, absl::StrFormat("%s: checksum mismatch (expected 0x%016x, actual 0x%016x)",
                                           SectionLabel(section.kind, section.name), section.checksum, actual));
  }
  return absl::OkStatus();
}

const ArtifactSection* Artifact::Find(SectionKind kind, std::string_view name) const {
  for (const ArtifactSection& s : sections_) {
    if (s.kind == kind && s.name == name) return &s;
  }
  return nullptr;
}

const ArtifactWeight* Artifact::FindWeight(std::string_view name) const {
  const auto it = weight_by_name_.find(name);
  return it == weight_by_name_.end() ? nullptr : &weights_[it->second];
}

absl::Status Artifact::VerifyWeights() const {
  const ArtifactSection* weights = nullptr;
  for (const ArtifactSection& s : sections_) {
    if (s.kind == SectionKind::kWeights) weights = &s;
  }
  return weights == nullptr ? absl::OkStatus() : CheckSectionChecksum(*weights);
}

}  // namespace kiln

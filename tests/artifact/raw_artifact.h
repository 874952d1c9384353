// Raw artifact bytes for tests and the artifact fuzzer: a builder for files
// the writer refuses to produce, and Reseal, which makes an edited file's
// size and checksums consistent again so a parse reaches the damage the edit
// was meant to test.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "runtime/artifact/artifact_format.h"
#include "runtime/artifact/xxhash64.h"

namespace kiln::testing {

// One section of a raw artifact; `kind` is a plain number so tests can
// write unknown kinds.
struct RawSection {
  uint32_t kind;
  std::string name;
  std::string bytes;
  uint32_t alignment = kSectionAlignment;
};

// Lays sections out as the writer does (header, table, each section at its
// alignment) with correct checksums but no validation at all, so tests can
// build files that the writer refuses to write.
inline std::vector<uint8_t> BuildRawArtifact(const std::vector<RawSection>& sections) {
  const size_t table_end = kArtifactHeaderSize + sections.size() * kSectionEntrySize;
  std::vector<uint8_t> out(table_end);
  for (size_t i = 0; i < sections.size(); ++i) {
    const RawSection& s = sections[i];
    out.resize((out.size() + s.alignment - 1) / s.alignment * s.alignment);
    const SectionEntry entry{s.kind,
                             s.alignment,
                             out.size(),
                             s.bytes.size(),
                             Xxh64Hash({reinterpret_cast<const uint8_t*>(s.bytes.data()), s.bytes.size()}),
                             s.name};
    out.insert(out.end(), s.bytes.begin(), s.bytes.end());
    EncodeSectionEntry(entry, std::span<uint8_t, kSectionEntrySize>(
                                  out.data() + kArtifactHeaderSize + i * kSectionEntrySize, kSectionEntrySize));
  }
  ArtifactHeader header;
  header.section_count = static_cast<uint32_t>(sections.size());
  header.table_offset = kArtifactHeaderSize;
  header.file_size = out.size();
  const std::span<uint8_t, kArtifactHeaderSize> head(out.data(), kArtifactHeaderSize);
  EncodeHeader(header, head);
  header.checksum =
      HeaderChecksum(head, std::span<const uint8_t>(out).subspan(kArtifactHeaderSize, table_end - kArtifactHeaderSize));
  EncodeHeader(header, head);
  return out;
}

// After an edit of `bytes` (an artifact, or what is left of one), makes the
// file size, every in-bounds section checksum and the header checksum match
// again, so that a parse gets past them to whatever the edit broke. Leaves
// the bytes alone when the header or table is not there to fix.
inline void Reseal(std::vector<uint8_t>& bytes) {
  if (bytes.size() < kArtifactHeaderSize) return;
  const std::span<uint8_t, kArtifactHeaderSize> head(bytes.data(), kArtifactHeaderSize);
  ArtifactHeader header = DecodeHeader(head);
  const uint64_t table_size = uint64_t{header.section_count} * kSectionEntrySize;
  if (header.table_offset > bytes.size() || table_size > bytes.size() - header.table_offset) return;
  for (uint64_t i = 0; i < header.section_count; ++i) {
    const std::span<uint8_t, kSectionEntrySize> raw(bytes.data() + header.table_offset + i * kSectionEntrySize,
                                                    kSectionEntrySize);
    SectionEntry entry = DecodeSectionEntry(raw);
    if (entry.offset > bytes.size() || entry.size > bytes.size() - entry.offset) continue;
    entry.checksum = Xxh64Hash(std::span<const uint8_t>(bytes).subspan(entry.offset, entry.size));
    // Re-encoding would drop bytes after a NUL in the name; patch the field.
    for (size_t b = 0; b < 8; ++b) raw[kEntryChecksumOffset + b] = static_cast<uint8_t>(entry.checksum >> (8 * b));
  }
  header.file_size = bytes.size();
  // The magic is part of what the checksum covers: keep the bytes as they are.
  uint8_t magic[8];
  std::memcpy(magic, bytes.data(), sizeof(magic));
  EncodeHeader(header, head);
  std::memcpy(bytes.data(), magic, sizeof(magic));
  header.checksum = HeaderChecksum(head, std::span<const uint8_t>(bytes).subspan(header.table_offset, table_size));
  for (size_t b = 0; b < 8; ++b) bytes[kHeaderChecksumOffset + b] = static_cast<uint8_t>(header.checksum >> (8 * b));
}

}  // namespace kiln::testing

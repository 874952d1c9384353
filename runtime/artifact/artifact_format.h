// The on-disk layout of a kiln artifact, format version 1. Writer, reader
// and the fuzzer share these definitions so the three cannot drift apart.
//
//   [0, 64)        header
//   [table, +96n)  section table: n entries of 96 bytes (the writer puts it
//                  right after the header)
//   sections       each at an offset that is a multiple of its alignment
//                  (at least 64), zero padding between them; the file ends
//                  where the last section does. Every byte is either under a
//                  checksum or padding that must be zero.
//
// Header (all integers little-endian):
//    0  char[8]  magic "KILNART\0"
//    8  u32      format version
//   12  u32      flags: must-understand features; version 1 defines none, so
//                a reader rejects any bit it does not know
//   16  u32      section count
//   20  u32      zero
//   24  u64      offset of the section table
//   32  u64      size of the whole file (catches truncation up front)
//   40  u8[16]   zero
//   56  u64      XXH64 (seed 0) of header bytes [0, 56) followed by the table
//
// Section table entry:
//    0  u32      kind (SectionKind)
//    4  u32      alignment of the section's offset: a power of two, >= 64
//    8  u64      offset from the start of the file
//   16  u64      size in bytes
//   24  u64      XXH64 (seed 0) of the section's bytes
//   32  char[64] name, NUL-padded (at most 63 printable ASCII characters,
//                no spaces); (kind, name) is unique within a file
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kiln {

enum class SectionKind : uint32_t {
  kMetadata = 1,
  kIrText = 2,
  kPlan = 3,
  kTokenizer = 4,
  kWeightsIndex = 5,  // written by the writer from its AddWeight calls
  kWeights = 6,       // raw tensor bytes, each tensor 64-byte aligned
  kKernels = 7,       // one section per target, named like "cuda:sm_90"
};

inline constexpr char kArtifactMagic[8] = {'K', 'I', 'L', 'N', 'A', 'R', 'T', '\0'};
inline constexpr uint32_t kArtifactVersion = 1;
inline constexpr size_t kArtifactHeaderSize = 64;
inline constexpr size_t kSectionEntrySize = 96;
inline constexpr size_t kSectionNameCapacity = 64;  // including the terminating NUL
inline constexpr size_t kHeaderChecksumOffset = 56;
inline constexpr size_t kEntryChecksumOffset = 24;
// Enough for any SIMD load and for cache-line-aligned device uploads.
inline constexpr uint32_t kSectionAlignment = 64;

// True for the ids of SectionKind.
bool IsKnownSectionKind(uint32_t id);
// "metadata", "ir_text", "plan", "tokenizer", "weights_index", "weights",
// "kernels"; "unknown" for anything else.
std::string_view SectionKindName(SectionKind kind);

struct ArtifactHeader {
  uint32_t version = kArtifactVersion;
  uint32_t flags = 0;
  uint32_t section_count = 0;
  uint64_t table_offset = 0;
  uint64_t file_size = 0;
  uint64_t checksum = 0;
};

struct SectionEntry {
  uint32_t kind = 0;
  uint32_t alignment = kSectionAlignment;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::string name;
};

// Writes the magic and every field of `header`.
void EncodeHeader(const ArtifactHeader& header, std::span<uint8_t, kArtifactHeaderSize> out);
// Reads the fields; the magic is the caller's to check.
ArtifactHeader DecodeHeader(std::span<const uint8_t, kArtifactHeaderSize> in);
// `entry.name` must fit (CheckSectionName).
void EncodeSectionEntry(const SectionEntry& entry, std::span<uint8_t, kSectionEntrySize> out);
// The name is read up to its first NUL (or all 64 bytes when there is none:
// CheckSectionName then rejects it).
SectionEntry DecodeSectionEntry(std::span<const uint8_t, kSectionEntrySize> in);
// The name bytes of an encoded entry are NUL-padded: one NUL at least, and
// nothing but NULs after the first.
bool SectionNameIsPadded(std::span<const uint8_t, kSectionEntrySize> entry);

// The header checksum: XXH64 of header bytes [0, 56) followed by the table.
uint64_t HeaderChecksum(std::span<const uint8_t, kArtifactHeaderSize> header, std::span<const uint8_t> table);

// OK when `name` can name a section; otherwise an error without file context.
absl::Status CheckSectionName(std::string_view name);
// "section metadata" or "section kernels 'cuda:sm_90'", for messages.
std::string SectionLabel(SectionKind kind, std::string_view name);

}  // namespace kiln

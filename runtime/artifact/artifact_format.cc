#include "runtime/artifact/artifact_format.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/artifact/xxhash64.h"

namespace kiln {
namespace {

constexpr size_t kEntryNameOffset = 32;

void Store32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void Store64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t Load32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

bool IsKnownSectionKind(uint32_t id) {
  return id >= static_cast<uint32_t>(SectionKind::kMetadata) && id <= static_cast<uint32_t>(SectionKind::kKernels);
}

std::string_view SectionKindName(SectionKind kind) {
  switch (kind) {
    case SectionKind::kMetadata:
      return "metadata";
    case SectionKind::kIrText:
      return "ir_text";
    case SectionKind::kPlan:
      return "plan";
    case SectionKind::kTokenizer:
      return "tokenizer";
    case SectionKind::kWeightsIndex:
      return "weights_index";
    case SectionKind::kWeights:
      return "weights";
    case SectionKind::kKernels:
      return "kernels";
  }
  return "unknown";
}

void EncodeHeader(const ArtifactHeader& header, std::span<uint8_t, kArtifactHeaderSize> out) {
  std::fill(out.begin(), out.end(), 0);
  std::memcpy(out.data(), kArtifactMagic, sizeof(kArtifactMagic));
  Store32(out.data() + 8, header.version);
  Store32(out.data() + 12, header.flags);
  Store32(out.data() + 16, header.section_count);
  Store64(out.data() + 24, header.table_offset);
  Store64(out.data() + 32, header.file_size);
  Store64(out.data() + kHeaderChecksumOffset, header.checksum);
}

ArtifactHeader DecodeHeader(std::span<const uint8_t, kArtifactHeaderSize> in) {
  ArtifactHeader h;
  h.version = Load32(in.data() + 8);
  h.flags = Load32(in.data() + 12);
  h.section_count = Load32(in.data() + 16);
  h.table_offset = Load64(in.data() + 24);
  h.file_size = Load64(in.data() + 32);
  h.checksum = Load64(in.data() + kHeaderChecksumOffset);
  return h;
}

void EncodeSectionEntry(const SectionEntry& entry, std::span<uint8_t, kSectionEntrySize> out) {
  std::fill(out.begin(), out.end(), 0);
  Store32(out.data(), entry.kind);
  Store32(out.data() + 4, entry.alignment);
  Store64(out.data() + 8, entry.offset);
  Store64(out.data() + 16, entry.size);
  Store64(out.data() + kEntryChecksumOffset, entry.checksum);
  std::memcpy(out.data() + kEntryNameOffset, entry.name.data(), std::min(entry.name.size(), kSectionNameCapacity - 1));
}

SectionEntry DecodeSectionEntry(std::span<const uint8_t, kSectionEntrySize> in) {
  SectionEntry e;
  e.kind = Load32(in.data());
  e.alignment = Load32(in.data() + 4);
  e.offset = Load64(in.data() + 8);
  e.size = Load64(in.data() + 16);
  e.checksum = Load64(in.data() + kEntryChecksumOffset);
  const auto* name = reinterpret_cast<const char*>(in.data() + kEntryNameOffset);
  e.name.assign(name, strnlen(name, kSectionNameCapacity));
  return e;
}

bool SectionNameIsPadded(std::span<const uint8_t, kSectionEntrySize> entry) {
  const auto name = entry.subspan(kEntryNameOffset);
  const auto nul = std::find(name.begin(), name.end(), 0);
  return nul != name.end() && std::all_of(nul, name.end(), [](uint8_t b) { return b == 0; });
}

uint64_t HeaderChecksum(std::span<const uint8_t, kArtifactHeaderSize> header, std::span<const uint8_t> table) {
  Xxh64 h;
  h.Update(header.first(kHeaderChecksumOffset));
  h.Update(table);
  return h.Digest();
}

absl::Status CheckSectionName(std::string_view name) {
  if (name.size() >= kSectionNameCapacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("section name of %d bytes (at most %d allowed)", name.size(), kSectionNameCapacity - 1));
  }
  for (char c : name) {
    if (c <= 0x20 || c >= 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrFormat("section name '%s' holds byte 0x%02x (printable ASCII without spaces allowed)",
                          absl::CHexEscape(std::string(name)), static_cast<uint8_t>(c)));
    }
  }
  return absl::OkStatus();
}

std::string SectionLabel(SectionKind kind, std::string_view name) {
  if (name.empty()) return absl::StrCat("section ", std::string(SectionKindName(kind)));
  return absl::StrCat("section ", std::string(SectionKindName(kind)), " '", std::string(name), "'");
}

}  // namespace kiln

// Writes kiln artifacts (artifact_format.h). Sections and weights are
// declared first and produced when Write streams them to disk, so a model of
// many gigabytes is never held in memory; each section's XXH64 is computed
// on the way out, and the table with the checksums is written last.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/artifact/artifact_format.h"
#include "runtime/artifact/weights_index.h"

namespace kiln {

class ArtifactWriter {
 public:
  // Fills exactly `dst.size()` bytes (a whole section, or a whole tensor).
  using Fill = std::function<absl::Status(std::span<uint8_t> dst)>;
  // Called after each section and each tensor with (bytes written, file size).
  using Progress = std::function<void(uint64_t, uint64_t)>;

  // Declares a section. Fails on a kind that is not a SectionKind, on
  // weights / weights_index (AddWeight builds those), on a name that
  // CheckSectionName rejects, on a (kind, name) already added, or on an
  // alignment that is not a power of two from 64 to 1 MiB.
  absl::Status AddSection(SectionKind kind, std::string name, uint64_t size, Fill fill,
                          uint32_t alignment = kSectionAlignment);
  absl::Status AddSection(SectionKind kind, std::string name, std::vector<uint8_t> bytes,
                          uint32_t alignment = kSectionAlignment);
  absl::Status AddSection(SectionKind kind, std::string name, std::string bytes,
                          uint32_t alignment = kSectionAlignment);

  // Declares a tensor of the weights section (storage and shape as in
  // storage_type.h). Fails on an invalid or duplicate name, an unknown
  // storage type, a shape that is not whole blocks, or (for `bytes`) a size
  // other than the one shape and storage give.
  absl::Status AddWeight(std::string name, std::string storage, std::vector<int64_t> shape, Fill fill);
  absl::Status AddWeight(std::string name, std::string storage, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

  // Writes the artifact to `path` through `path`.part, renamed into place
  // only once everything is on disk (and synced), so an interrupted or failed
  // write never leaves a truncated artifact behind. User sections come in the
  // order they were added, then weights_index and weights (only when there
  // are weights: a program-only artifact has neither). The weights section
  // starts on a 4096-byte page, each tensor in it on kWeightAlignment.
  absl::Status Write(const std::string& path, const Progress& progress = nullptr) const;

 private:
  struct PendingSection {
    SectionKind kind;
    std::string name;
    uint64_t size;
    uint32_t alignment;
    Fill fill;
  };
  struct PendingWeight {
    ArtifactWeight weight;  // without data
    Fill fill;
  };

  std::vector<PendingSection> sections_;
  std::vector<PendingWeight> weights_;
  uint64_t weights_size_ = 0;  // end of the last tensor
};

}  // namespace kiln

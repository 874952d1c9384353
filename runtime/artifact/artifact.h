// A kiln artifact opened for reading: a validated view over a memory-mapped
// file (layout in artifact_format.h). Nothing in the file is trusted: the
// magic, version, flags, file size, table bounds, header checksum, every
// section's kind, name, alignment, bounds, overlap and checksum, and every
// weights index entry are checked before anything is exposed. A bad file is
// an absl::Status naming the file, the section or tensor, and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/artifact/artifact_format.h"
#include "runtime/artifact/weights_index.h"

namespace kiln {

class MappedFile;

struct ArtifactSection {
  SectionKind kind;
  std::string name;
  uint32_t alignment = kSectionAlignment;
  uint64_t offset = 0;    // from the start of the file
  uint64_t checksum = 0;  // XXH64 of `bytes`, as the table records it
  std::span<const uint8_t> bytes;

  std::string_view text() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
};

struct ArtifactOpenOptions {
  // Checksumming the weights section reads every byte of it, which for a big
  // model is most of the load time. A loader that reads (uploads) the weights
  // anyway can pass false and call VerifyWeights() itself (for instance
  // while the upload runs); every other section is always verified at open.
  bool verify_weights = true;
};

class Artifact {
 public:
  // Maps and parses `path`.
  static absl::StatusOr<std::unique_ptr<Artifact>> Open(const std::string& path,
                                                        const ArtifactOpenOptions& options = {});
  // Parses bytes owned by the caller, which must outlive the result; `name`
  // stands for the file in error messages.
  static absl::StatusOr<std::unique_ptr<Artifact>> Parse(std::span<const uint8_t> bytes, std::string name,
                                                         const ArtifactOpenOptions& options = {});
  ~Artifact();

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return bytes_.size(); }
  // Whether the bytes are a read-only mapping of the file (Open), whose
  // pages a reader may drop and have read back from the file.
  bool file_mapped() const { return mapping_ != nullptr; }

  // In table order.
  const std::vector<ArtifactSection>& sections() const { return sections_; }
  // nullptr when there is no section of that kind and name.
  const ArtifactSection* Find(SectionKind kind, std::string_view name = "") const;

  // Empty for a program-only artifact (no weights section).
  const std::vector<ArtifactWeight>& weights() const { return weights_; }
  const ArtifactWeight* FindWeight(std::string_view name) const;

  // Checks the weights section against its checksum (what Open skips with
  // verify_weights = false). OK when there is no weights section.
  absl::Status VerifyWeights() const;

 private:
  Artifact() = default;
  // The steps of Parse, in order; each relies on the ones before.
  absl::StatusOr<ArtifactHeader> ReadHeader();
  absl::Status ReadSectionTable(const ArtifactHeader& header);
  absl::Status CheckLayout(uint64_t table_offset, uint64_t table_size) const;
  absl::Status CheckPadding(uint64_t begin, uint64_t end) const;
  absl::Status CheckSectionChecksums(const ArtifactOpenOptions& options) const;
  absl::Status ReadWeights();
  absl::Status CheckSectionChecksum(const ArtifactSection& section) const;
  absl::Status Error(absl::StatusCode code, std::string_view problem) const;

  std::unique_ptr<MappedFile> mapping_;
  std::string name_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  std::vector<ArtifactSection> sections_;
  std::vector<ArtifactWeight> weights_;
  std::map<std::string, size_t, std::less<>> weight_by_name_;
};

}  // namespace kiln

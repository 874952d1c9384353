// The weights_index section: the tensors that the weights section holds and
// where. It is compact JSON so `kiln inspect` (and a person with `less`) can
// read it:
//   {"version":1,"tensors":[{"name":"blk.0.attn_q.weight","storage":"q4_k",
//     "shape":[64,256],"offset":0,"nbytes":9216}, ...]}
// Offsets count from the start of the weights section; every tensor starts at
// a multiple of kWeightAlignment, so its bytes upload or map without a copy.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

inline constexpr uint64_t kWeightAlignment = 64;
inline constexpr uint32_t kWeightsIndexVersion = 1;

struct ArtifactWeight {
  std::string name;
  std::string storage;         // see storage_type.h: "f32", "q4_k", "int4:g128", ...
  std::vector<int64_t> shape;  // row-major: shape.back() is the contiguous row
  uint64_t offset = 0;         // from the start of the weights section
  uint64_t nbytes = 0;
  std::span<const uint8_t> data;  // into the artifact (set by the reader)
};

// OK when `name` can name a weight: 1 to 255 printable ASCII characters, no
// spaces. Errors carry no file context.
absl::Status CheckWeightName(std::string_view name);

// The section bytes for `weights` (data spans are not part of it).
std::string EncodeWeightsIndex(std::span<const ArtifactWeight> weights);

// Parses an index and checks every entry against `weights_section`: known
// keys of the right types, unique valid names, a known storage type, nbytes
// equal to what shape and storage give, an aligned offset, bytes inside the
// section and no two tensors overlapping. Binds each weight's data into
// `weights_section`. Errors name the tensor but not the file.
absl::StatusOr<std::vector<ArtifactWeight>> DecodeWeightsIndex(std::span<const uint8_t> index,
                                                               std::span<const uint8_t> weights_section);

}  // namespace kiln

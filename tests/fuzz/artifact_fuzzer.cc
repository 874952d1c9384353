// Feeds arbitrary bytes to the artifact reader twice: as they are, and
// resealed (file size and checksums made consistent again, see
// tests/artifact/raw_artifact.h), so that mutations get past the checksums
// to the table, layout and weights index checks. When a file parses, every
// view it hands out is checked to lie inside the input and touched, so a
// bad bound shows up as a trap or under ASan.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/artifact/artifact.h"
#include "tests/artifact/raw_artifact.h"

namespace {

void Require(bool invariant) {
  if (!invariant) __builtin_trap();
}

bool Inside(std::span<const uint8_t> view, std::span<const uint8_t> input) {
  return view.empty() || (view.data() >= input.data() && view.data() + view.size() <= input.data() + input.size());
}

uint64_t Touch(std::span<const uint8_t> view) { return view.empty() ? 0 : view.front() + view.back(); }

uint64_t Exercise(std::span<const uint8_t> input) {
  uint64_t sink = 0;
  for (bool verify_weights : {true, false}) {
    auto artifact = kiln::Artifact::Parse(input, "fuzz.kart", {.verify_weights = verify_weights});
    if (!artifact.ok()) continue;
    const kiln::Artifact& a = **artifact;
    for (const kiln::ArtifactSection& s : a.sections()) {
      Require(Inside(s.bytes, input));
      Require(s.offset % s.alignment == 0 && s.alignment >= kiln::kSectionAlignment);
      Require(a.Find(s.kind, s.name) == &s);
      sink += Touch(s.bytes);
    }
    for (const kiln::ArtifactWeight& w : a.weights()) {
      Require(Inside(w.data, input) && w.data.size() == w.nbytes);
      Require(a.FindWeight(w.name) == &w);
      sink += Touch(w.data);
    }
    sink += a.VerifyWeights().ok();
  }
  return sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t sink = Exercise({data, size});
  std::vector<uint8_t> resealed(data, data + size);
  kiln::testing::Reseal(resealed);
  sink += Exercise(resealed);
  return sink == 0x5eed ? 1 : 0;
}

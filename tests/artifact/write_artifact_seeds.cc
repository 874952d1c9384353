// Writes the artifact fuzzer's seeds: the sample artifact of the tests, with
// weights and program-only. tests/fuzz/CMakeLists.txt runs it at build time,
// so the seeds always follow the format the writer of this tree produces.
#include <cstdio>

#include "runtime/artifact/artifact_writer.h"
#include "tests/artifact/sample_artifact.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s WITH_WEIGHTS.kart PROGRAM_ONLY.kart\n", argv[0]);
    return 2;
  }
  for (int i = 0; i < 2; ++i) {
    kiln::ArtifactWriter writer;
    absl::Status s = kiln::testing::AddSampleContent(writer, /*with_weights=*/i == 0);
    if (s.ok()) s = writer.Write(argv[1 + i]);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

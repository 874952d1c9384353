// Feeds arbitrary bytes to the GGUF parser and, when a file parses, walks
// everything it exposes: any out-of-bounds read shows up under ASan.
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kiln::GgufFile::Parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  uint64_t sink = 0;
  for (const auto& [key, value] : (*file)->metadata()) sink += key.size() + value.ToString().size();
  for (const kiln::GgufTensor& t : (*file)->tensors()) {
    for (uint64_t k = 0; k < t.nbytes; k += 61) sink += t.data[k];
    if (t.nbytes) sink += t.data[t.nbytes - 1];
  }
  (void)(*file)->GetStringArray("tokenizer.ggml.tokens");
  (void)(*file)->GetFloatArray("tokenizer.ggml.scores");
  (void)(*file)->GetIntArray("tokenizer.ggml.token_type");
  return sink == 0x5eed ? 1 : 0;
}

// Feeds arbitrary text to the tokenizers of real vocabularies (loaded once
// from KILN_FUZZ_VOCAB_DIR): prompts reach them straight from HTTP requests.
// The first byte picks the vocabulary (and, from 0x80 up, a second pass with
// special tokens), the rest is the text. Every id must lie in the
// vocabulary, and for the byte-level and SentencePiece vocabularies valid
// UTF-8 must come back byte for byte (Decode(Encode(s)) == s), but for
// SentencePiece's space marker U+2581, which comes back as a space.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_replace.h"
#include "runtime/formats/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/unicode.h"

namespace {

struct Vocabulary {
  std::unique_ptr<kiln::GgufFile> gguf;
  std::unique_ptr<kiln::Tokenizer> tokenizer;
  bool lossless;
  bool space_marker;  // SentencePiece: U+2581 stands for a space
};

std::vector<Vocabulary>& Vocabularies() {
  static std::vector<Vocabulary> v;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = KILN_FUZZ_VOCAB_DIR;
  struct File {
    const char* name;
    bool lossless, space_marker;
  };
  for (const auto& [name, lossless, space_marker] : {File{"ggml-vocab-llama-spm.gguf", true, true},
                                                     File{"ggml-vocab-gpt-2.gguf", true, false},
                                                     File{"ggml-vocab-deepseek-llm.gguf", true, false},
                                                     File{"ggml-vocab-bert-bge.gguf", false, false}}) {
    auto gguf = kiln::GgufFile::Open(dir + "/" + name);
    if (!gguf.ok()) {
      std::fprintf(stderr, "tokenizer_fuzzer: %s\n", std::string(gguf.status().message()).c_str());
      std::abort();
    }
    auto tokenizer = kiln::Tokenizer::FromGguf(**gguf);
    if (!tokenizer.ok()) {
      std::fprintf(stderr, "tokenizer_fuzzer: %s: %s\n", name, std::string(tokenizer.status().message()).c_str());
      std::abort();
    }
    Vocabularies().push_back({std::move(*gguf), std::move(*tokenizer), lossless, space_marker});
  }
  return 0;
}

void CheckIds(const kiln::Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Vocabulary& v = Vocabularies()[data[0] % Vocabularies().size()];
  const kiln::Tokenizer& tokenizer = *v.tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  CheckIds(tokenizer, ids);
  const std::string decoded = tokenizer.Decode(ids);
  // SentencePiece spells a space U+2581 ("▁"), so a literal one in the text
  // comes back as a space (llama.cpp's tokenizer does the same).
  const std::string expected =
      v.space_marker ? absl::StrReplaceAll(absl::string_view(text.data(), text.size()), {{"\u2581", " "}})
                     : std::string(text);
  if (v.lossless && decoded != expected && kiln::ReplaceInvalidUtf8(text) == text) {
    std::fprintf(stderr, "tokenizer_fuzzer: %s does not round-trip: %zu bytes in, %zu out\n",
                 std::string(tokenizer.kind()).c_str(), text.size(), decoded.size());
    __builtin_trap();
  }
  // A lead byte of 0x80 or more (rare in the text seeds) also runs the
  // options: special tokens added and parsed, and decoded with their text.
  if (data[0] & 0x80) {
    const std::vector<int32_t> special = tokenizer.Encode(text, {.add_special = true, .parse_special = true});
    CheckIds(tokenizer, special);
    (void)tokenizer.Decode(special, /*keep_special=*/true);
  }
  return 0;
}

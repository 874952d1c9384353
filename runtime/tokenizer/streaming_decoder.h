// Turns generated token ids into text as they arrive. A character whose
// UTF-8 bytes are spread over several tokens (byte-fallback <0xNN> tokens,
// byte-level BPE pieces) is held back until its last byte arrives, so every
// chunk returned is valid UTF-8.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tokenizer/tokenizer.h"

namespace kiln {

class StreamingDecoder {
 public:
  // `tokenizer` must outlive the decoder. Control tokens render as nothing
  // unless `keep_special`. No leading space is removed: generated text is a
  // continuation of the prompt.
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool keep_special = false)
      : tokenizer_(tokenizer), keep_special_(keep_special) {}

  // The text that `id` completes (possibly empty). Bytes that can never
  // become valid UTF-8 are replaced by U+FFFD at once; an incomplete
  // sequence at the end waits for the next token.
  std::string Push(int32_t id);

  // Everything still held back, an unfinished sequence replaced by U+FFFD.
  // The decoder is then empty and can start a new stream.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool keep_special_;
  std::string pending_;
};

}  // namespace kiln

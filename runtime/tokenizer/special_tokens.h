// Cutting special tokens out of input text before the model sees it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/vocab.h"

namespace kiln {

// A run of ordinary text, or one special token (token != kNoToken).
struct TextFragment {
  std::string_view text;
  int32_t token = kNoToken;
};

// llama.cpp's tokenizer_st_partition: special tokens are taken longest text
// first, and each one splits every text fragment at each of its occurrences.
// User-defined tokens always split; control and unknown tokens only when
// `parse_special` is on.
class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);

  std::vector<TextFragment> Split(std::string_view text, bool parse_special) const;

 private:
  const Vocab& vocab_;
  std::vector<int32_t> specials_;  // longest text first
};

}  // namespace kiln

// Byte-level BPE (GPT-2 style, `tokenizer.ggml.model = gpt2`) as llama.cpp
// runs it: the pre-tokenizer's regexes cut the text into pieces, each
// piece's bytes are shown as printable characters, and adjacent symbols
// merge by the rank of their pair in `tokenizer.ggml.merges`.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/tokenizer/pretokenizer.h"
#include "runtime/tokenizer/tokenizer_model.h"
#include "runtime/tokenizer/vocab.h"

namespace kiln {

class BytePairModel : public TokenizerModel {
 public:
  // Fails on a regex of the pre-tokenizer that does not compile.
  static absl::StatusOr<std::unique_ptr<BytePairModel>> Create(const Vocab& vocab);

  void Encode(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string NormalTokenBytes(std::string_view token_text) const override;

 private:
  BytePairModel(const Vocab& vocab, const PreTokenizerSpec& pre, std::unique_ptr<RegexSplitter> splitter);
  // Merges the characters of one byte-level encoded piece and appends the ids.
  void EncodePiece(std::string_view piece, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  const PreTokenizerSpec& pre_;
  std::unique_ptr<RegexSplitter> splitter_;
  // "left right" -> rank; the first of duplicate merges wins.
  StringIdMap merge_ranks_;
};

}  // namespace kiln

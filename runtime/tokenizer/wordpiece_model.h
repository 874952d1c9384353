// WordPiece (BERT, `tokenizer.ggml.model = bert`) as llama.cpp runs it.
//
// Normalisation as HF's BertNormalizer/BasicTokenizer with lowercasing:
// accents stripped (NFD, combining marks dropped), text lowercased, control
// characters dropped, whitespace splits words, and every punctuation
// character, ASCII symbol and CJK ideograph is a word of its own. Each word
// is then cut greedily into the longest vocabulary pieces.
//
// GGUF stores BERT vocabularies converted: a word-initial piece carries a
// U+2581 prefix instead of lacking "##", and a continuation piece is stored
// without its "##". So a word is looked up as U+2581 + word, and the pieces
// after the first are looked up as they are. A word with an unmatchable
// position becomes a single [UNK].
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/tokenizer_model.h"
#include "runtime/tokenizer/vocab.h"

namespace kiln {

class WordPieceModel : public TokenizerModel {
 public:
  explicit WordPieceModel(const Vocab& vocab) : vocab_(vocab) {}

  void Encode(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string NormalTokenBytes(std::string_view token_text) const override;

 private:
  const Vocab& vocab_;
};

// The words BERT's normaliser makes of `text` (exposed for tests).
std::vector<std::string> BertPreTokenize(std::string_view text);

}  // namespace kiln

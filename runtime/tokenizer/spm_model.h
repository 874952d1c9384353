// SentencePiece-style BPE as llama.cpp runs it for `tokenizer.ggml.model =
// llama`: spaces become U+2581, adjacent pieces merge greedily by token
// score, and characters left without a token fall back to <0xNN> tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/tokenizer_model.h"
#include "runtime/tokenizer/vocab.h"

namespace kiln {

class SentencePieceModel : public TokenizerModel {
 public:
  explicit SentencePieceModel(const Vocab& vocab);

  void Encode(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string NormalTokenBytes(std::string_view token_text) const override;

 private:
  void EmitBytes(std::string_view text, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  // <0xNN> token per byte (or the one-character token, or kNoToken).
  std::array<int32_t, 256> byte_tokens_;
};

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";

// `text` with every kSentencePieceSpace replaced by a space.
std::string UnescapeSentencePieceSpaces(std::string_view text);

}  // namespace kiln

// The part of a tokenizer that differs per vocabulary type: how a run of
// ordinary text becomes ids, and what bytes a normal token stands for.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class TokenizerModel {
 public:
  virtual ~TokenizerModel() = default;

  // Appends the ids of `text`, a run of input with no special token in it.
  // `after_special` is true for the first run of the input and for a run
  // that follows a special token (SentencePiece prefixes a space there).
  virtual void Encode(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;

  // The bytes a token of type kNormal stands for, from its vocabulary text.
  virtual std::string NormalTokenBytes(std::string_view token_text) const = 0;
};

}  // namespace kiln

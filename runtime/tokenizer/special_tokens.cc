#include "runtime/tokenizer/special_tokens.h"

#include <algorithm>

namespace kiln {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : vocab_(vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType type = vocab.type(id);
    const bool special =
        type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown;
    if (special && !vocab.text(id).empty()) specials_.push_back(id);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [&](int32_t a, int32_t b) { return vocab.text(a).size() > vocab.text(b).size(); });
}

std::vector<TextFragment> SpecialTokenSplitter::Split(std::string_view text, bool parse_special) const {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({text});
  std::vector<TextFragment> next;
  for (int32_t id : specials_) {
    if (!parse_special && vocab_.type(id) != TokenType::kUserDefined) continue;
    const std::string& special = vocab_.text(id);
    if (text.find(special) == std::string_view::npos) continue;  // cheap common case
    next.clear();
    for (const TextFragment& fragment : fragments) {
      if (fragment.token != kNoToken) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      for (size_t hit; (hit = rest.find(special)) != std::string_view::npos;) {
        if (hit > 0) next.push_back({rest.substr(0, hit)});
        next.push_back({special, id});
        rest.remove_prefix(hit + special.size());
      }
      if (!rest.empty()) next.push_back({rest});
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace kiln

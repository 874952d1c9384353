#include "runtime/tokenizer/wordpiece_model.h"

#include <algorithm>

#include "runtime/tokenizer/spm_model.h"
#include "runtime/tokenizer/unicode.h"

namespace kiln {

std::vector<std::string> BertPreTokenize(std::string_view text) {
  std::vector<std::string> words(1);
  for (uint32_t cpt : DecodeUtf8Lenient(text)) {
    cpt = NfdBase(cpt);
    if (IsWhitespace(cpt)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const CharClass cls = ClassOf(cpt);
    if (cpt == 0 || cpt == kReplacementChar || cls == CharClass::kControl || cls == CharClass::kMark) continue;
    std::string utf8;
    AppendUtf8(ToLower(cpt), utf8);
    const bool stands_alone =
        cls == CharClass::kPunctuation || (cpt < 0x7F && cls == CharClass::kSymbol) || IsCjkIdeograph(cpt);
    if (stands_alone) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(utf8);
      words.emplace_back();
    } else {
      words.back() += utf8;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WordPieceModel::Encode(std::string_view text, bool /*after_special*/, std::vector<int32_t>& out) const {
  const size_t max_piece = vocab_.max_token_bytes();
  for (const std::string& word : BertPreTokenize(text)) {
    const std::string marked = std::string(kSentencePieceSpace) + word;
    const size_t n = marked.size();
    const size_t first_piece = out.size();
    bool matched_all = true;
    for (size_t i = 0; i < n && matched_all;) {
      // Longest piece first (in bytes, as llama.cpp does).
      matched_all = false;
      for (size_t j = std::min(n, i + max_piece + 1); j > i; --j) {
        if (std::optional<int32_t> id = vocab_.Find(std::string_view(marked).substr(i, j - i))) {
          out.push_back(*id);
          i = j;
          matched_all = true;
          break;
        }
      }
    }
    if (!matched_all) {
      out.resize(first_piece);
      if (vocab_.spec().unk_id != kNoToken) out.push_back(vocab_.spec().unk_id);
    }
  }
}

std::string WordPieceModel::NormalTokenBytes(std::string_view token_text) const {
  return UnescapeSentencePieceSpaces(token_text);
}

}  // namespace kiln

#include "runtime/tokenizer/spm_model.h"

#include <cstdio>
#include <queue>

#include "runtime/tokenizer/unicode.h"

namespace kiln {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the escaped text
  size_t size;    // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;
};

// Highest score first; among equal scores the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

std::string UnescapeSentencePieceSpaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t hit = text.find(kSentencePieceSpace, pos);
    if (hit == std::string_view::npos) {
      out.append(text.substr(pos));
      break;
    }
    out.append(text.substr(pos, hit - pos));
    out.push_back(' ');
    pos = hit + kSentencePieceSpace.size();
  }
  return out;
}

SentencePieceModel::SentencePieceModel(const Vocab& vocab) : vocab_(vocab) {
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    std::optional<int32_t> id = vocab.Find(hex);
    if (!id) id = vocab.Find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id.value_or(kNoToken);
  }
}

void SentencePieceModel::EmitBytes(std::string_view text, std::vector<int32_t>& out) const {
  for (char c : text) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
    if (id == kNoToken) {
      // A vocabulary without byte tokens: one <unk> for the whole piece, as
      // SentencePiece does (llama.cpp would abort here).
      if (vocab_.spec().unk_id != kNoToken) out.push_back(vocab_.spec().unk_id);
      return;
    }
  }
  for (char c : text) out.push_back(byte_tokens_[static_cast<uint8_t>(c)]);
}

void SentencePieceModel::Encode(std::string_view raw, bool after_special, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(raw.size() * 3 + 3);
  if (vocab_.spec().add_space_prefix && after_special) text.append(kSentencePieceSpace);
  for (char c : raw) {
    if (c == ' ') {
      text.append(kSentencePieceSpace);
    } else {
      text.push_back(c);
    }
  }

  // One symbol per UTF-8 character (length taken from the lead byte only).
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    const size_t size = std::min(Utf8SequenceLength(static_cast<uint8_t>(text[offset])), text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + size == text.size() ? -1 : index + 1, offset, size});
    offset += size;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view merged(text.data() + symbols[left].offset, symbols[left].size + symbols[right].size);
    std::optional<int32_t> id = vocab_.Find(merged);
    if (!id) return;
    queue.push({left, right, vocab_.score(*id), merged.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    // Stale: one side was merged away or grew since the pair was queued.
    if (left.size == 0 || right.size == 0 || left.size + right.size != bigram.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  // Every merged symbol is a token by construction; only single characters
  // can be missing from the vocabulary, and those become byte tokens.
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view piece(text.data() + symbols[i].offset, symbols[i].size);
    if (std::optional<int32_t> id = vocab_.Find(piece)) {
      out.push_back(*id);
    } else {
      EmitBytes(piece, out);
    }
  }
}

std::string SentencePieceModel::NormalTokenBytes(std::string_view token_text) const {
  return UnescapeSentencePieceSpaces(token_text);
}

}  // namespace kiln

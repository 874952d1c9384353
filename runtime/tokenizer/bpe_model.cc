#include "runtime/tokenizer/bpe_model.h"

#include <queue>

#include "runtime/tokenizer/unicode.h"

namespace kiln {
namespace {

struct Symbol {
  int prev;
  int next;
  size_t offset;  // into the encoded piece
  size_t size;    // 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  std::string text;  // what the pair spelled when queued
};

// Lowest rank first; among equal ranks the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BytePairModel>> BytePairModel::Create(const Vocab& vocab) {
  const PreTokenizerSpec* pre = FindPreTokenizer(vocab.spec().pre_tokenizer);
  if (pre == nullptr) {
    return absl::InvalidArgumentError("tokenizer: unknown pre-tokenizer '" + vocab.spec().pre_tokenizer + "'");
  }
  absl::StatusOr<std::unique_ptr<RegexSplitter>> splitter = RegexSplitter::Create(pre->regexes);
  if (!splitter.ok()) return splitter.status();
  return std::unique_ptr<BytePairModel>(new BytePairModel(vocab, *pre, *std::move(splitter)));
}

BytePairModel::BytePairModel(const Vocab& vocab, const PreTokenizerSpec& pre,
                             std::unique_ptr<RegexSplitter> splitter)
    : vocab_(vocab), pre_(pre), splitter_(std::move(splitter)) {
  const std::vector<std::string>& merges = vocab.spec().merges;
  merge_ranks_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // llama.cpp splits a merge at its first space after position 0; a line
    // without one pairs two empty strings, which never match.
    const std::string& line = merges[rank];
    if (line.find(' ', 1) == std::string::npos) continue;
    merge_ranks_.emplace(line, static_cast<int32_t>(rank));
  }
}

void BytePairModel::Encode(std::string_view text, bool /*after_special*/, std::vector<int32_t>& out) const {
  // llama.cpp decodes the text leniently before splitting (ill-formed bytes
  // become U+FFFD), so the pieces below hold those replacement characters.
  const std::string clean = SanitizeUtf8(text);
  std::string encoded;
  for (std::string_view piece : splitter_->Split(clean)) {
    encoded.clear();
    for (char c : piece) encoded += ByteToUnicode(static_cast<uint8_t>(c));
    EncodePiece(encoded, out);
  }
}

void BytePairModel::EncodePiece(std::string_view piece, std::vector<int32_t>& out) const {
  if (pre_.ignore_merges) {
    if (std::optional<int32_t> id = vocab_.Find(piece)) {
      out.push_back(*id);
      return;
    }
  }

  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < piece.size();) {
    const size_t size = std::min(Utf8SequenceLength(static_cast<uint8_t>(piece[offset])), piece.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + size == piece.size() ? -1 : index + 1, offset, size});
    offset += size;
  }
  auto text_of = [&](const Symbol& s) { return piece.substr(s.offset, s.size); };

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  std::string key;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view l = text_of(symbols[left]);
    const std::string_view r = text_of(symbols[right]);
    key.assign(l);
    key.push_back(' ');
    key.append(r);
    auto it = merge_ranks_.find(key);
    if (it == merge_ranks_.end()) return;
    queue.push({left, right, it->second, std::string(piece.substr(symbols[left].offset, l.size() + r.size()))});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.size == 0 || right.size == 0) continue;
    // Stale: the pair no longer spells what it spelled when queued.
    if (left.size + right.size != bigram.text.size() ||
        piece.substr(left.offset, left.size + right.size) != bigram.text) {
      continue;
    }
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const std::string_view text = text_of(symbols[i]);
    if (std::optional<int32_t> id = vocab_.Find(text)) {
      out.push_back(*id);
      continue;
    }
    // Not a token: llama.cpp looks each byte up as a one-byte token and
    // drops the bytes that are not.
    for (char c : text) {
      if (std::optional<int32_t> id = vocab_.Find(std::string_view(&c, 1))) out.push_back(*id);
    }
  }
}

std::string BytePairModel::NormalTokenBytes(std::string_view token_text) const {
  std::string out;
  for (uint32_t cpt : DecodeUtf8Lenient(token_text)) {
    const int byte = UnicodeToByte(cpt);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      AppendUtf8(cpt, out);  // outside the byte alphabet: keep the character itself
    }
  }
  return out;
}

}  // namespace kiln

#include "runtime/tokenizer/tokenizer.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/tokenizer/bpe_model.h"
#include "runtime/tokenizer/spm_model.h"
#include "runtime/tokenizer/wordpiece_model.h"

namespace kiln {
namespace {

// Texts llama.cpp treats as end of generation whatever their token type
// says (it also makes them control tokens).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>",      "_<EOT>",     "<|end_of_text|>", "<｜end▁of▁sentence｜>",
};

// The byte of a "<0xNN>" token, or -1.
int ByteTokenValue(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  char hex[3] = {text[3], text[4], 0};
  char* end = nullptr;
  const long value = std::strtol(hex, &end, 16);
  return end == hex + 2 ? static_cast<int>(value) : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  absl::StatusOr<VocabSpec> spec = ReadVocabSpec(gguf);
  if (!spec.ok()) return spec.status();
  return FromSpec(*std::move(spec));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSpec(VocabSpec spec) {
  if (spec.scores.size() != spec.tokens.size() || spec.types.size() != spec.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", spec.tokens.size(), " tokens but ",
                                                   spec.scores.size(), " scores and ", spec.types.size(),
                                                   " token types"));
  }
  const auto in_vocab = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < spec.tokens.size(); };
  if ((spec.add_bos && !in_vocab(spec.bos_id)) || (spec.add_eos && !in_vocab(spec.eos_id)) ||
      (spec.add_sep && !in_vocab(spec.sep_id))) {
    return absl::InvalidArgumentError("tokenizer: add_bos/add_eos/add_sep is set but its token id is not in the vocabulary");
  }
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    for (std::string_view text : kEndOfGenerationTexts) {
      if (spec.tokens[id] == text) spec.types[id] = TokenType::kControl;
    }
  }
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(std::move(spec)));
  if (absl::Status status = tokenizer->Init(); !status.ok()) return status;
  return tokenizer;
}

Tokenizer::Tokenizer(VocabSpec spec) : vocab_(std::move(spec)) {}

absl::Status Tokenizer::Init() {
  const VocabSpec& spec = vocab_.spec();
  switch (spec.model) {
    case VocabModel::kSentencePiece:
      model_ = std::make_unique<SentencePieceModel>(vocab_);
      kind_ = "llama (SentencePiece)";
      break;
    case VocabModel::kBytePairEncoding: {
      absl::StatusOr<std::unique_ptr<BytePairModel>> bpe = BytePairModel::Create(vocab_);
      if (!bpe.ok()) return bpe.status();
      model_ = *std::move(bpe);
      kind_ = absl::StrCat("gpt2 (byte-level BPE, pre-tokenizer ", spec.pre_tokenizer, ")");
      break;
    }
    case VocabModel::kWordPiece:
      model_ = std::make_unique<WordPieceModel>(vocab_);
      kind_ = "bert (WordPiece)";
      break;
  }
  special_splitter_ = std::make_unique<SpecialTokenSplitter>(vocab_);

  token_bytes_.resize(vocab_.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const std::string& text = vocab_.text(id);
    switch (vocab_.type(id)) {
      case TokenType::kNormal:
        token_bytes_[id] = model_->NormalTokenBytes(text);
        break;
      case TokenType::kByte: {
        const int byte = ByteTokenValue(text);
        token_bytes_[id] = byte >= 0 ? std::string(1, static_cast<char>(byte)) : model_->NormalTokenBytes(text);
        break;
      }
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        token_bytes_[id] = text;
        break;
      case TokenType::kUnused:
      case TokenType::kUndefined:
        break;  // llama.cpp renders these as nothing
    }
    if (vocab_.type(id) == TokenType::kControl) {
      for (std::string_view eog : kEndOfGenerationTexts) {
        if (text == eog) end_of_generation_.insert(id);
      }
    }
  }
  if (spec.eos_id != kNoToken) end_of_generation_.insert(spec.eos_id);
  return absl::OkStatus();
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const TokenType type = vocab_.type(id);
  return type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUserDefined;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  const VocabSpec& spec = vocab_.spec();
  std::vector<int32_t> ids;
  if (options.add_special && spec.add_bos) ids.push_back(spec.bos_id);
  bool after_special = true;
  for (const TextFragment& fragment : special_splitter_->Split(text, options.parse_special)) {
    if (fragment.token != kNoToken) {
      ids.push_back(fragment.token);
      after_special = true;
    } else {
      model_->Encode(fragment.text, after_special, ids);
      after_special = false;
    }
  }
  if (options.add_special && spec.add_eos) ids.push_back(spec.eos_id);
  if (options.add_special && spec.add_sep) ids.push_back(spec.sep_id);
  return ids;
}

std::string_view Tokenizer::TokenBytes(int32_t id, bool keep_special) const {
  if (!vocab_.valid(id)) return {};
  const TokenType type = vocab_.type(id);
  if (!keep_special && (type == TokenType::kControl || type == TokenType::kUnknown)) return {};
  return token_bytes_[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool keep_special) const {
  const bool prefixed = vocab_.spec().add_space_prefix;
  std::string out;
  bool strip_space = prefixed;
  for (int32_t id : ids) {
    if (!vocab_.valid(id)) continue;
    std::string_view bytes = TokenBytes(id, keep_special);
    if (IsSpecial(id)) {
      strip_space = prefixed;
    } else {
      if (strip_space && !bytes.empty() && bytes.front() == ' ') bytes.remove_prefix(1);
      strip_space = false;
    }
    out.append(bytes);
  }
  return out;
}

bool Tokenizer::SameVocabulary(const Tokenizer& other) const {
  if (vocab_size() != other.vocab_size()) return false;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (token_text(id) != other.token_text(id)) return false;
  }
  return true;
}

}  // namespace kiln

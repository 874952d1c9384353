// Tokenizers built from GGUF metadata, matching llama.cpp token for token.
//
//   absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(gguf);
//   std::vector<int32_t> ids = (*tok)->Encode("Hello", {.add_special = true});
//   std::string text = (*tok)->Decode(ids);
//
// Three models: SentencePiece-style BPE ("llama"), byte-level BPE ("gpt2",
// with the pre-tokenizer named by tokenizer.ggml.pre) and WordPiece ("bert").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "runtime/formats/gguf.h"
#include "runtime/tokenizer/special_tokens.h"
#include "runtime/tokenizer/tokenizer_model.h"
#include "runtime/tokenizer/vocab.h"

namespace kiln {

struct EncodeOptions {
  // Add what the vocabulary asks for around the text: BOS (add_bos), EOS
  // (add_eos), BERT's [CLS] ... [SEP].
  bool add_special = false;
  // Control-token text in the input (e.g. "<|im_start|>") becomes that
  // token. User-defined tokens are matched either way, as in llama.cpp.
  bool parse_special = false;
};

class Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSpec(VocabSpec spec);

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;

  // The bytes the ids stand for. Control and unknown tokens are empty unless
  // `keep_special`. With SentencePiece's space prefix, the one space the
  // encoder put at the start of the text and after each special token is
  // removed again, so Decode(Encode(s)) == s for lossless vocabularies.
  // Ids outside the vocabulary are skipped.
  std::string Decode(std::span<const int32_t> ids, bool keep_special = false) const;

  // The bytes of one token as generation streams it (no space removed; may
  // be part of a UTF-8 character). Empty for an id outside the vocabulary.
  std::string_view TokenBytes(int32_t id, bool keep_special = false) const;

  // "llama (SentencePiece)", "gpt2 (byte-level BPE, pre-tokenizer qwen2)", "bert (WordPiece)".
  std::string_view kind() const { return kind_; }
  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return vocab_.spec().bos_id; }
  int32_t eos_id() const { return vocab_.spec().eos_id; }
  int32_t unk_id() const { return vocab_.spec().unk_id; }
  int32_t sep_id() const { return vocab_.spec().sep_id; }
  int32_t pad_id() const { return vocab_.spec().pad_id; }
  bool add_bos() const { return vocab_.spec().add_bos; }
  bool add_eos() const { return vocab_.spec().add_eos; }
  // The vocabulary text of a token ("▁Hello", "Ġworld", "<s>").
  const std::string& token_text(int32_t id) const { return vocab_.text(id); }
  // The same tokens with the same texts, id for id (a draft model, or a
  // reference for KL divergence, must share the vocabulary).
  bool SameVocabulary(const Tokenizer& other) const;
  TokenType token_type(int32_t id) const { return vocab_.type(id); }
  // Whether generation stops at `id`: EOS and the end-of-turn tokens
  // llama.cpp recognises by their text (<|eot_id|>, <|im_end|>, ...).
  bool IsEndOfGeneration(int32_t id) const { return end_of_generation_.contains(id); }
  // tokenizer.chat_template (Jinja source), empty if absent.
  const std::string& chat_template() const { return vocab_.spec().chat_template; }
  const VocabSpec& spec() const { return vocab_.spec(); }

 private:
  explicit Tokenizer(VocabSpec spec);
  absl::Status Init();
  bool IsSpecial(int32_t id) const;

  Vocab vocab_;
  std::unique_ptr<TokenizerModel> model_;
  std::unique_ptr<SpecialTokenSplitter> special_splitter_;
  std::vector<std::string> token_bytes_;  // per id, as rendered with keep_special
  absl::flat_hash_set<int32_t> end_of_generation_;
  std::string kind_;
};

}  // namespace kiln

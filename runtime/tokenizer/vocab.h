// The vocabulary of a tokenizer as GGUF metadata describes it, with the
// defaults llama.cpp applies where a key is absent.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/formats/gguf.h"

namespace kiln {

inline constexpr int32_t kNoToken = -1;

// A string -> int map that looks up by string_view without a copy.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>>;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// tokenizer.ggml.model
enum class VocabModel {
  kSentencePiece,  // "llama"
  kBytePairEncoding,  // "gpt2" (byte-level)
  kWordPiece,      // "bert"
};

struct VocabSpec {
  VocabModel model = VocabModel::kSentencePiece;
  std::string model_name;      // tokenizer.ggml.model as written
  std::string pre_tokenizer;   // tokenizer.ggml.pre; "default" where absent
  std::vector<std::string> tokens;
  std::vector<float> scores;   // one per token (0 where the file has none)
  std::vector<TokenType> types;  // one per token (kNormal where the file has none)
  std::vector<std::string> merges;  // BPE only, "left right" in rank order

  int32_t bos_id = kNoToken;
  int32_t eos_id = kNoToken;
  int32_t unk_id = kNoToken;
  int32_t sep_id = kNoToken;
  int32_t pad_id = kNoToken;
  int32_t mask_id = kNoToken;
  bool add_bos = false;  // prepend bos_id when special tokens are added
  bool add_eos = false;  // append eos_id when special tokens are added
  bool add_sep = false;  // append sep_id when special tokens are added (BERT)
  bool add_space_prefix = false;  // SentencePiece: prefix the text with a space
  std::string chat_template;      // tokenizer.chat_template; empty where absent
};

// Reads the tokenizer.* keys of `gguf`. Errors name the key at fault: a
// missing or mistyped token list, scores or token types shorter than the
// token list, missing BPE merges, an unknown model name (listing the
// supported ones), or add_bos/add_eos set without the matching token id.
absl::StatusOr<VocabSpec> ReadVocabSpec(const GgufFile& gguf);

// A vocabulary with its text -> id index.
class Vocab {
 public:
  explicit Vocab(VocabSpec spec);

  const VocabSpec& spec() const { return spec_; }
  int32_t size() const { return static_cast<int32_t>(spec_.tokens.size()); }
  const std::string& text(int32_t id) const { return spec_.tokens[id]; }
  float score(int32_t id) const { return spec_.scores[id]; }
  TokenType type(int32_t id) const { return spec_.types[id]; }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }

  // The id whose text is exactly `text`.
  std::optional<int32_t> Find(std::string_view text) const;
  // Longest token text in bytes.
  size_t max_token_bytes() const { return max_token_bytes_; }

 private:
  VocabSpec spec_;
  StringIdMap index_;
  size_t max_token_bytes_ = 0;
};

}  // namespace kiln

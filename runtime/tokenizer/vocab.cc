#include "runtime/tokenizer/vocab.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/tokenizer/pretokenizer.h"

namespace kiln {
namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kPreKey[] = "tokenizer.ggml.pre";
constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kScoresKey[] = "tokenizer.ggml.scores";
constexpr char kTokenTypeKey[] = "tokenizer.ggml.token_type";
constexpr char kMergesKey[] = "tokenizer.ggml.merges";

// The reader's errors already name the file and the key.
absl::Status WithContext(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("tokenizer: ", status.message()));
}

// Reads an optional token id. Like llama.cpp, an id outside the vocabulary
// (0xFFFFFFFF is how converters write "unset") leaves the default in place.
absl::Status ReadTokenId(const GgufFile& gguf, std::string_view key, int32_t n_tokens, int32_t& id) {
  if (!gguf.Find(key)) return absl::OkStatus();
  absl::StatusOr<int64_t> value = gguf.GetInt(key);
  if (!value.ok()) return WithContext(value.status());
  if (*value >= 0 && *value < n_tokens) id = static_cast<int32_t>(*value);
  return absl::OkStatus();
}

absl::Status ReadBool(const GgufFile& gguf, std::string_view key, bool& flag) {
  absl::StatusOr<bool> value = gguf.GetBoolOr(key, flag);
  if (!value.ok()) return WithContext(value.status());
  flag = *value;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<VocabSpec> ReadVocabSpec(const GgufFile& gguf) {
  VocabSpec spec;
  absl::StatusOr<std::string> model = gguf.GetString(kModelKey);
  if (!model.ok()) return WithContext(model.status());
  spec.model_name = *model;

  absl::StatusOr<std::vector<std::string>> tokens = gguf.GetStringArray(kTokensKey);
  if (!tokens.ok()) return WithContext(tokens.status());
  spec.tokens = *std::move(tokens);
  if (spec.tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", gguf.name(), ": '", kTokensKey, "' is empty"));
  }
  const auto n_tokens = static_cast<int32_t>(spec.tokens.size());

  spec.scores.assign(n_tokens, 0.0f);
  if (gguf.Find(kScoresKey)) {
    absl::StatusOr<std::vector<float>> scores = gguf.GetFloatArray(kScoresKey);
    if (!scores.ok()) return WithContext(scores.status());
    if (scores->size() < spec.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", gguf.name(), ": '", kScoresKey, "' has ",
                                                     scores->size(), " entries for ", n_tokens, " tokens"));
    }
    std::copy_n(scores->begin(), n_tokens, spec.scores.begin());
  }

  spec.types.assign(n_tokens, TokenType::kNormal);
  if (gguf.Find(kTokenTypeKey)) {
    absl::StatusOr<std::vector<int64_t>> types = gguf.GetIntArray(kTokenTypeKey);
    if (!types.ok()) return WithContext(types.status());
    if (types->size() < spec.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", gguf.name(), ": '", kTokenTypeKey, "' has ",
                                                     types->size(), " entries for ", n_tokens, " tokens"));
    }
    for (int32_t i = 0; i < n_tokens; ++i) {
      const int64_t t = (*types)[i];
      spec.types[i] = (t >= 1 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
  }

  const bool has_pre = gguf.Find(kPreKey) != nullptr;
  absl::StatusOr<std::string> pre_name = gguf.GetStringOr(kPreKey, "default");
  if (!pre_name.ok()) return WithContext(pre_name.status());
  spec.pre_tokenizer = *std::move(pre_name);

  // Per-model defaults, as llama.cpp's llama_vocab::load sets them before
  // reading the metadata that may override them.
  if (spec.model_name == "llama") {
    spec.model = VocabModel::kSentencePiece;
    spec.bos_id = 1;
    spec.eos_id = 2;
    spec.unk_id = 0;
    spec.add_bos = true;
    spec.add_space_prefix = true;
  } else if (spec.model_name == "gpt2") {
    spec.model = VocabModel::kBytePairEncoding;
    absl::StatusOr<std::vector<std::string>> merges = gguf.GetStringArray(kMergesKey);
    if (!merges.ok()) return WithContext(merges.status());
    spec.merges = *std::move(merges);
    if (!has_pre) {
      std::fprintf(stderr, "kiln: warning: %s has no '%s'; using the 'default' pre-tokenizer\n",
                   gguf.name().c_str(), kPreKey);
    }
    const PreTokenizerSpec* pre = FindPreTokenizer(spec.pre_tokenizer);
    if (pre == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", gguf.name(), ": unknown '", kPreKey, "' value '",
                                                     spec.pre_tokenizer, "' (known: ",
                                                     absl::StrJoin(PreTokenizerNames(), ", ", [](std::string* out, std::string_view name) { out->append(name); }), ")"));
    }
    // llama.cpp's BPE default of 11 is Falcon's <|endoftext|>.
    spec.bos_id = pre->has_bos ? 11 : kNoToken;
    spec.eos_id = 11;
    spec.add_bos = pre->add_bos;
  } else if (spec.model_name == "bert") {
    spec.model = VocabModel::kWordPiece;
    spec.bos_id = 101;  // [CLS]
    spec.unk_id = 100;
    spec.sep_id = 102;
    spec.pad_id = 0;
    spec.mask_id = 103;
    spec.add_bos = true;
    spec.add_sep = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", gguf.name(), ": unsupported '", kModelKey,
                                                   "' value '", spec.model_name,
                                                   "' (supported: llama, gpt2, bert)"));
  }
  for (int32_t* id : {&spec.bos_id, &spec.eos_id, &spec.unk_id, &spec.sep_id, &spec.pad_id, &spec.mask_id}) {
    if (*id >= n_tokens) *id = kNoToken;
  }

  struct IdKey {
    const char* key;
    int32_t* id;
  };
  const IdKey id_keys[] = {
      {"tokenizer.ggml.bos_token_id", &spec.bos_id},
      {"tokenizer.ggml.eos_token_id", &spec.eos_id},
      {"tokenizer.ggml.unknown_token_id", &spec.unk_id},
      {"tokenizer.ggml.seperator_token_id", &spec.sep_id},  // sic: the GGUF key is misspelt
      {"tokenizer.ggml.padding_token_id", &spec.pad_id},
      {"tokenizer.ggml.mask_token_id", &spec.mask_id},
  };
  for (const IdKey& k : id_keys) {
    if (absl::Status s = ReadTokenId(gguf, k.key, n_tokens, *k.id); !s.ok()) return s;
  }
  // BERT converters write [CLS] as cls_token_id; it is what gets prepended.
  if (spec.model == VocabModel::kWordPiece && !gguf.Find("tokenizer.ggml.bos_token_id")) {
    if (absl::Status s = ReadTokenId(gguf, "tokenizer.ggml.cls_token_id", n_tokens, spec.bos_id); !s.ok()) return s;
  }
  if (absl::Status s = ReadBool(gguf, "tokenizer.ggml.add_bos_token", spec.add_bos); !s.ok()) return s;
  if (absl::Status s = ReadBool(gguf, "tokenizer.ggml.add_eos_token", spec.add_eos); !s.ok()) return s;
  if (absl::Status s = ReadBool(gguf, "tokenizer.ggml.add_space_prefix", spec.add_space_prefix); !s.ok()) return s;
  // Only SentencePiece prefixes a space; llama.cpp ignores the key elsewhere.
  if (spec.model != VocabModel::kSentencePiece) spec.add_space_prefix = false;

  struct Required {
    bool needed;
    int32_t id;
    const char* flag_key;
    const char* id_key;
  };
  const Required required[] = {
      {spec.add_bos, spec.bos_id, "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"},
      {spec.add_eos, spec.eos_id, "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"},
      {spec.add_sep, spec.sep_id, "BERT's [SEP]", "tokenizer.ggml.seperator_token_id"},
  };
  for (const Required& r : required) {
    if (r.needed && r.id == kNoToken) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", gguf.name(), ": '", r.flag_key,
                                                     "' asks for the token but '", r.id_key,
                                                     "' is not set to a token of the vocabulary"));
    }
  }

  absl::StatusOr<std::string> chat_template = gguf.GetStringOr("tokenizer.chat_template", "");
  if (!chat_template.ok()) return WithContext(chat_template.status());
  spec.chat_template = *std::move(chat_template);
  return spec;
}

Vocab::Vocab(VocabSpec spec) : spec_(std::move(spec)) {
  index_.reserve(spec_.tokens.size());
  for (int32_t id = 0; id < size(); ++id) {
    const std::string& text = spec_.tokens[id];
    max_token_bytes_ = std::max(max_token_bytes_, text.size());
    // Of duplicate texts (llama.cpp refuses such files) the first keeps the
    // entry; empty texts are never looked up.
    if (!text.empty()) index_.emplace(text, id);
  }
}

std::optional<int32_t> Vocab::Find(std::string_view text) const {
  auto it = index_.find(text);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kiln

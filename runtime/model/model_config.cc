#include "runtime/model/model_config.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/formats/gguf.h"

namespace kiln {

const std::vector<std::string>& SupportedArchitectures() {
  static const std::vector<std::string> kArchs = {"llama", "mistral", "qwen2"};
  return kArchs;
}

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& gguf) {
  ModelConfig c;
  absl::StatusOr<std::string> arch = gguf.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  c.architecture = *arch;
  const auto& supported = SupportedArchitectures();
  if (std::find(supported.begin(), supported.end(), c.architecture) == supported.end()) {
    return absl::UnimplementedError(absl::StrCat(gguf.name(), ": architecture '", c.architecture,
                                                 "' is not supported (supported: ",
                                                 absl::StrJoin(supported, ", "), ")"));
  }
  const std::string p = c.architecture + ".";
  auto get_int = [&](const std::string& key, int64_t& out) -> absl::Status {
    absl::StatusOr<int64_t> v = gguf.GetInt(p + key);
    if (!v.ok()) return v.status();
    out = *v;
    return absl::OkStatus();
  };
  for (auto [key, field] : {std::pair<const char*, int64_t*>{"embedding_length", &c.n_embd},
                            {"block_count", &c.n_layer},
                            {"attention.head_count", &c.n_head},
                            {"feed_forward_length", &c.n_ff},
                            {"context_length", &c.n_ctx_train}}) {
    if (absl::Status s = get_int(key, *field); !s.ok()) return s;
    if (*field <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s%s must be positive, found %d", gguf.name(), p,
                                                        key, *field));
    }
  }
  absl::StatusOr<int64_t> kv = gguf.GetIntOr(p + "attention.head_count_kv", c.n_head);
  if (!kv.ok()) return kv.status();
  c.n_head_kv = *kv;
  absl::StatusOr<std::string> name = gguf.GetStringOr("general.name", "");
  if (!name.ok()) return name.status();
  c.name = *name;

  if (c.n_embd % c.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %sembedding_length %d is not divisible by %sattention.head_count %d", gguf.name(), p, c.n_embd, p,
        c.n_head));
  }
  absl::StatusOr<int64_t> head_dim = gguf.GetIntOr(p + "attention.key_length", c.n_embd / c.n_head);
  if (!head_dim.ok()) return head_dim.status();
  c.head_dim = *head_dim;
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %sattention.head_count %d is not a multiple of %sattention.head_count_kv %d", gguf.name(), p,
        c.n_head, p, c.n_head_kv));
  }
  absl::StatusOr<int64_t> rope_dim = gguf.GetIntOr(p + "rope.dimension_count", c.head_dim);
  if (!rope_dim.ok()) return rope_dim.status();
  c.rope_dim = *rope_dim;
  if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %srope.dimension_count %d must be even and at most the head dimension %d", gguf.name(), p,
        c.rope_dim, c.head_dim));
  }
  absl::StatusOr<double> theta = gguf.GetFloatOr(p + "rope.freq_base", 10000.0);
  if (!theta.ok()) return theta.status();
  c.rope_theta = *theta;
  absl::StatusOr<double> eps = gguf.GetFloatOr(p + "attention.layer_norm_rms_epsilon", 1e-5);
  if (!eps.ok()) return eps.status();
  c.norm_eps = *eps;
  absl::StatusOr<std::string> scaling = gguf.GetStringOr(p + "rope.scaling.type", "none");
  if (!scaling.ok()) return scaling.status();
  c.rope_scaling.type = *scaling;
  absl::StatusOr<double> factor = gguf.GetFloatOr(p + "rope.scaling.factor", 1.0);
  if (!factor.ok()) return factor.status();
  c.rope_scaling.factor = *factor;
  absl::StatusOr<int64_t> orig = gguf.GetIntOr(p + "rope.scaling.original_context_length", 0);
  if (!orig.ok()) return orig.status();
  c.rope_scaling.original_context = *orig;

  // The vocabulary size is the embedding's row count; the token list, where
  // present, must agree with it.
  const GgufTensor* emb = gguf.FindTensor("token_embd.weight");
  if (emb == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(gguf.name(), ": tensor 'token_embd.weight' not found"));
  }
  if (emb->dims.size() != 2 || emb->dims[0] != c.n_embd) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tensor 'token_embd.weight' must be [%d, n_vocab], found %d dims", gguf.name(), c.n_embd,
        emb->dims.size()));
  }
  c.n_vocab = emb->dims[1];
  if (const GgufValue* tokens = gguf.Find("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->type == GgufValueType::kArray &&
      static_cast<int64_t>(tokens->array.size()) != c.n_vocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tokenizer.ggml.tokens has %d entries but token_embd.weight has %d rows", gguf.name(),
        tokens->array.size(), c.n_vocab));
  }
  c.tied_embeddings = gguf.FindTensor("output.weight") == nullptr;
  c.qkv_bias = gguf.FindTensor("blk.0.attn_q.bias") != nullptr;
  return c;
}

}  // namespace kiln

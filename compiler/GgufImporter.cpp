//===- GgufImporter.cpp - GGUF metadata and tensors to a model spec -------===//

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/Importers.h"
#include "runtime/formats/gguf.h"
#include "runtime/model/model_config.h"

namespace kiln::compiler {
namespace {

// A tensor that must be present with the given math shape ([out, in] or [n]).
absl::StatusOr<WeightRef> Require(const GgufFile& gguf, const std::string& name, std::vector<int64_t> shape) {
  const GgufTensor* t = gguf.FindTensor(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrFormat("%s: tensor '%s' not found (a Llama-family model needs it)",
                                               gguf.name(), name));
  }
  // GGUF lists dims contiguous-first: a [out, in] matrix is stored as {in, out}.
  std::vector<int64_t> file_shape(t->dims.rbegin(), t->dims.rend());
  if (file_shape != shape) {
    auto show = [](const std::vector<int64_t>& v) {
      std::string s = "[";
      for (size_t k = 0; k < v.size(); ++k) absl::StrAppend(&s, k ? ", " : "", v[k]);
      return s + "]";
    };
    return absl::InvalidArgumentError(absl::StrFormat("%s: tensor '%s' has shape %s, expected %s", gguf.name(),
                                                      name, show(file_shape), show(shape)));
  }
  return WeightRef{name, std::move(shape), t->type};
}

}  // namespace

absl::StatusOr<LlamaModelSpec> SpecFromGguf(const GgufFile& gguf) {
  absl::StatusOr<ModelConfig> c = ModelConfigFromGguf(gguf);
  if (!c.ok()) return c.status();
  LlamaModelSpec spec;
  spec.architecture = c->architecture;
  spec.name = c->name;
  spec.source = gguf.name();
  spec.n_vocab = c->n_vocab;
  spec.n_embd = c->n_embd;
  spec.n_head = c->n_head;
  spec.n_head_kv = c->n_head_kv;
  spec.head_dim = c->head_dim;
  spec.n_ff = c->n_ff;
  spec.n_ctx = c->n_ctx_train;
  spec.rope_dims = c->rope_dim;
  spec.rope_theta = c->rope_theta;
  // llama.cpp's rope type per architecture: qwen2 rotates NeoX-style halves,
  // llama/mistral GGUFs carry q/k permuted for adjacent pairs.
  spec.rope_style = c->architecture == "qwen2" ? "half" : "interleaved";
  spec.rope_scaling = c->rope_scaling.type;
  spec.rope_factor = c->rope_scaling.factor;
  spec.norm_eps = c->norm_eps;

  const int64_t d = spec.n_embd, q = spec.n_head * spec.head_dim, kv = spec.n_head_kv * spec.head_dim;
  auto take = [&](const std::string& name, std::vector<int64_t> shape, WeightRef& out) -> absl::Status {
    absl::StatusOr<WeightRef> w = Require(gguf, name, std::move(shape));
    if (!w.ok()) return w.status();
    out = *std::move(w);
    return absl::OkStatus();
  };
  if (auto s = take("token_embd.weight", {spec.n_vocab, d}, spec.token_embd); !s.ok()) return s;
  if (auto s = take("output_norm.weight", {d}, spec.output_norm); !s.ok()) return s;
  if (!c->tied_embeddings) {
    WeightRef out;
    if (auto s = take("output.weight", {spec.n_vocab, d}, out); !s.ok()) return s;
    spec.output = std::move(out);
  }
  absl::StatusOr<int64_t> layers = gguf.GetInt(c->architecture + ".block_count");
  if (!layers.ok()) return layers.status();
  for (int64_t l = 0; l < *layers; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    LlamaLayer layer;
    for (auto [name, shape, out] : {
             std::tuple<std::string, std::vector<int64_t>, WeightRef*>{"attn_norm.weight", {d}, &layer.attn_norm},
             {"attn_q.weight", {q, d}, &layer.q},
             {"attn_k.weight", {kv, d}, &layer.k},
             {"attn_v.weight", {kv, d}, &layer.v},
             {"attn_output.weight", {d, q}, &layer.o},
             {"ffn_norm.weight", {d}, &layer.ffn_norm},
             {"ffn_gate.weight", {spec.n_ff, d}, &layer.gate},
             {"ffn_up.weight", {spec.n_ff, d}, &layer.up},
             {"ffn_down.weight", {d, spec.n_ff}, &layer.down}}) {
      if (auto s = take(b + name, shape, *out); !s.ok()) return s;
    }
    if (c->qkv_bias) {
      WeightRef bq, bk, bv;
      if (auto s = take(b + "attn_q.bias", {q}, bq); !s.ok()) return s;
      if (auto s = take(b + "attn_k.bias", {kv}, bk); !s.ok()) return s;
      if (auto s = take(b + "attn_v.bias", {kv}, bv); !s.ok()) return s;
      layer.q_bias = bq;
      layer.k_bias = bk;
      layer.v_bias = bv;
    }
    spec.layers.push_back(std::move(layer));
  }
  return spec;
}

}  // namespace kiln::compiler

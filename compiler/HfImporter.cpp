//===- HfImporter.cpp - Hugging Face config + safetensors to a model spec -===//

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/Importers.h"
#include "runtime/formats/hf_config.h"
#include "runtime/formats/safetensors.h"

namespace kiln::compiler {
namespace {

absl::StatusOr<GgmlType> StorageOf(const SafetensorsTensor& t) {
  switch (t.dtype) {
    case SafetensorsDtype::kF32: return GgmlType::kF32;
    case SafetensorsDtype::kF16: return GgmlType::kF16;
    case SafetensorsDtype::kBF16: return GgmlType::kBF16;
    default:
      return absl::UnimplementedError(absl::StrFormat(
          "tensor '%s' is %s: kiln imports F32, F16 and BF16 checkpoints", t.name,
          SafetensorsDtypeName(t.dtype)));
  }
}

}  // namespace

absl::StatusOr<LlamaModelSpec> SpecFromHf(const HfModel& model, const std::string& dir) {
  const HfLlamaConfig& c = model.config;
  LlamaModelSpec spec;
  spec.architecture = c.architecture;
  spec.source = dir;
  spec.n_vocab = c.vocab_size;
  spec.n_embd = c.hidden_size;
  spec.n_head = c.num_attention_heads;
  spec.n_head_kv = c.num_key_value_heads;
  spec.head_dim = c.head_dim;
  spec.n_ff = c.intermediate_size;
  spec.n_ctx = c.max_position_embeddings;
  spec.rope_dims = c.head_dim;
  spec.rope_theta = c.rope_theta;
  // HF checkpoints keep q/k unpermuted: rotary pairs are (i, i + d/2).
  spec.rope_style = "half";
  spec.rope_scaling = std::string(HfRopeScalingTypeName(c.rope_scaling.type));
  spec.rope_factor = c.rope_scaling.factor;
  spec.norm_eps = c.rms_norm_eps;
  if (c.o_proj_bias) {
    return absl::UnimplementedError(absl::StrCat(dir, ": o_proj biases (attention_bias) are not supported yet"));
  }

  // OpenHfModel already checked every expected tensor and its shape.
  auto ref = [&](const std::string& name) -> absl::StatusOr<WeightRef> {
    const SafetensorsTensor* t = model.weights->Find(name);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat(dir, ": tensor '", name, "' not found"));
    absl::StatusOr<GgmlType> storage = StorageOf(*t);
    if (!storage.ok()) return absl::Status(storage.status().code(), absl::StrCat(dir, ": ", storage.status().message()));
    return WeightRef{name, t->shape, *storage};
  };
  auto take = [&](const std::string& name, WeightRef& out) -> absl::Status {
    absl::StatusOr<WeightRef> w = ref(name);
    if (!w.ok()) return w.status();
    out = *std::move(w);
    return absl::OkStatus();
  };
  if (auto s = take("model.embed_tokens.weight", spec.token_embd); !s.ok()) return s;
  if (auto s = take("model.norm.weight", spec.output_norm); !s.ok()) return s;
  if (!c.tie_word_embeddings) {
    WeightRef head;
    if (auto s = take("lm_head.weight", head); !s.ok()) return s;
    spec.output = std::move(head);
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string b = absl::StrCat("model.layers.", l, ".");
    LlamaLayer layer;
    for (auto [name, out] : {std::pair<const char*, WeightRef*>{"input_layernorm.weight", &layer.attn_norm},
                             {"self_attn.q_proj.weight", &layer.q},
                             {"self_attn.k_proj.weight", &layer.k},
                             {"self_attn.v_proj.weight", &layer.v},
                             {"self_attn.o_proj.weight", &layer.o},
                             {"post_attention_layernorm.weight", &layer.ffn_norm},
                             {"mlp.gate_proj.weight", &layer.gate},
                             {"mlp.up_proj.weight", &layer.up},
                             {"mlp.down_proj.weight", &layer.down}}) {
      if (auto s = take(b + name, *out); !s.ok()) return s;
    }
    if (c.qkv_bias) {
      WeightRef bq, bk, bv;
      if (auto s = take(b + "self_attn.q_proj.bias", bq); !s.ok()) return s;
      if (auto s = take(b + "self_attn.k_proj.bias", bk); !s.ok()) return s;
      if (auto s = take(b + "self_attn.v_proj.bias", bv); !s.ok()) return s;
      layer.q_bias = bq;
      layer.k_bias = bk;
      layer.v_bias = bv;
    }
    spec.layers.push_back(std::move(layer));
  }
  return spec;
}

}  // namespace kiln::compiler

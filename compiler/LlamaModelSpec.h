//===- LlamaModelSpec.h - one description of a Llama-family model ---------===//
//
// What the importers (GGUF, Hugging Face) agree on before any IR is built:
// hyperparameters and, for every role in the graph, which tensor of the file
// fills it. llama, mistral, qwen2, SmolLM2 and TinyLlama differ only in
// these fields, never in code paths.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/formats/ggml_types.h"

namespace kiln::compiler {

struct WeightRef {
  std::string name;            // tensor name in the model file
  std::vector<int64_t> shape;  // [rows (out features), cols (in features)] or [n]
  GgmlType storage = GgmlType::kF32;
};

struct LlamaLayer {
  WeightRef attn_norm, q, k, v, o, ffn_norm, gate, up, down;
  std::optional<WeightRef> q_bias, k_bias, v_bias;
};

struct LlamaModelSpec {
  std::string architecture;  // llama | mistral | qwen2 (HF: the config's class)
  std::string name;
  std::string source;        // the file or folder imported
  int64_t n_vocab = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_ctx = 0;
  int64_t rope_dims = 0;
  double rope_theta = 10000.0;
  std::string rope_style;    // "interleaved" (GGUF llama) or "half" (NeoX: qwen2, HF checkpoints)
  std::string rope_scaling = "none";
  double rope_factor = 1.0;
  double norm_eps = 1e-5;
  WeightRef token_embd, output_norm;
  std::optional<WeightRef> output;  // absent: tied to token_embd
  std::vector<LlamaLayer> layers;
};

}  // namespace kiln::compiler

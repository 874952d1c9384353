// Hyperparameters of a Llama-family model (llama, mistral, qwen2, SmolLM2,
// TinyLlama: one family whose differences are fields here), read from GGUF
// metadata with the defaults llama.cpp applies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

class GgufFile;

struct RopeScaling {
  std::string type = "none";  // none | linear | yarn | llama3 ...
  double factor = 1.0;
  int64_t original_context = 0;
};

struct ModelConfig {
  std::string architecture;  // general.architecture
  std::string name;          // general.name, may be empty
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_ff = 0;
  int64_t head_dim = 0;
  int64_t n_ctx_train = 0;
  int64_t rope_dim = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;
  bool tied_embeddings = false;  // no output.weight: the head reuses token_embd
  bool qkv_bias = false;         // qwen2

  int64_t gqa_group() const { return n_head_kv ? n_head / n_head_kv : 0; }
};

// The architectures kiln's Llama-family path accepts.
const std::vector<std::string>& SupportedArchitectures();

// Reads and checks the hyperparameters. An unsupported architecture is an
// error that lists the supported ones; inconsistent values (heads that do not
// divide the width, ...) name the keys involved.
absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& gguf);

}  // namespace kiln

// Hugging Face model folders of the Llama family (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM): the hyperparameters of config.json,
// with the defaults transformers applies, and the check that the folder's
// safetensors hold every tensor that layout needs, with the right shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/formats/safetensors.h"

namespace kiln {

enum class HfRopeScalingType { kNone, kLinear, kDynamic, kYarn, kLlama3 };

// "none", "linear", "dynamic", "yarn", "llama3".
std::string_view HfRopeScalingTypeName(HfRopeScalingType type);

// config.json "rope_scaling" (or "rope_parameters" in newer transformers).
struct HfRopeScaling {
  HfRopeScalingType type = HfRopeScalingType::kNone;
  double factor = 1.0;
  // Context length before scaling; required for llama3, optional (0 when
  // absent) for yarn and dynamic.
  int64_t original_max_position_embeddings = 0;
  // llama3: wavelengths between these bands are interpolated smoothly.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // yarn, with transformers' defaults.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // absent: derived from factor
};

struct HfLlamaConfig {
  std::string architecture;  // "LlamaForCausalLM", ...
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // default: num_attention_heads
  int64_t head_dim = 0;             // default: hidden_size / num_attention_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 0;
  double rope_theta = 10000.0;
  HfRopeScaling rope_scaling;
  bool tie_word_embeddings = false;  // lm_head reuses model.embed_tokens
  bool qkv_bias = false;             // q/k/v projections carry biases (Qwen2; Llama attention_bias)
  bool o_proj_bias = false;          // so does o_proj (Llama attention_bias)
  std::optional<int64_t> sliding_window;  // Mistral; Qwen2 only with use_sliding_window
  std::vector<int64_t> bos_token_ids;     // empty when unset
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype;  // "bfloat16", ...; empty when unset
};

// The architectures ParseHfConfig accepts.
const std::vector<std::string>& SupportedHfArchitectures();

// Reads config.json text; `name` is what errors call the file. Missing
// required keys, wrong types and inconsistent sizes are errors naming the key.
absl::StatusOr<HfLlamaConfig> ParseHfConfig(std::string_view json_text, std::string_view name);
absl::StatusOr<HfLlamaConfig> ReadHfConfig(const std::string& path);

// A tensor the Llama layout needs. Linear weights are [out, in] as
// PyTorch stores them.
struct HfExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// model.embed_tokens.weight, every model.layers.N.* weight (and the q/k/v/o
// biases where the config has them), model.norm.weight, and lm_head.weight
// unless the embeddings are tied.
std::vector<HfExpectedTensor> ExpectedLlamaTensors(const HfLlamaConfig& config);

// Every expected tensor is present with its shape; extra tensors are allowed.
// Errors list what is missing or misshapen, and what the layout expects.
absl::Status CheckLlamaTensors(const HfLlamaConfig& config, const SafetensorsCheckpoint& weights);

struct HfModel {
  HfLlamaConfig config;
  std::unique_ptr<SafetensorsCheckpoint> weights;
};

// Opens `dir`/config.json and the folder's model.safetensors (or sharded
// index), and checks the tensors against the config.
absl::StatusOr<HfModel> OpenHfModel(const std::string& dir);

}  // namespace kiln

#include "runtime/formats/hf_config.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/util/json.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// TinyLlama-1.1B-Chat-v1.0's config.json.
constexpr char kTinyLlamaConfig[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
})";

// Qwen2.5-0.5B-Instruct's config.json.
constexpr char kQwen25Config[] = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Llama-3.1-8B's config.json.
constexpr char kLlama31Config[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// A minimal valid config; tests replace or add keys through `extra`.
std::string SmallConfig(std::string_view architecture = "LlamaForCausalLM", std::string_view extra = "") {
  return absl::StrCat(R"({"architectures": [")", std::string(architecture), R"("], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
    "vocab_size": 100, "max_position_embeddings": 256, "rms_norm_eps": 1e-6)",
                      extra.empty() ? "" : ", ", std::string(extra), "}");
}

// SmallConfig() with `key` set to the JSON `value`.
std::string WithKey(std::string_view key, std::string_view value) {
  JsonValue json = *ParseJson(SmallConfig());
  json.Set(std::string(key), *ParseJson(value));
  return ToJson(json);
}

HfLlamaConfig ParseOrDie(std::string_view text) {
  absl::StatusOr<HfLlamaConfig> config = ParseHfConfig(text, "config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : HfLlamaConfig();
}

std::string ConfigError(std::string_view text) {
  absl::StatusOr<HfLlamaConfig> config = ParseHfConfig(text, "config.json");
  EXPECT_FALSE(config.ok()) << "accepted: " << text;
  return config.ok() ? "" : std::string(config.status().message());
}

TEST(HfConfig, TinyLlama) {
  const HfLlamaConfig c = ParseOrDie(kTinyLlamaConfig);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.num_hidden_layers, 22);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 10000.0);  // absent: the default
  EXPECT_EQ(c.rope_scaling.type, HfRopeScalingType::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_THAT(c.bos_token_ids, ElementsAre(1));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(HfConfig, Qwen25) {
  const HfLlamaConfig c = ParseOrDie(kQwen25Config);
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);  // implied by the architecture
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window is false
  EXPECT_THAT(c.bos_token_ids, ElementsAre(151643));
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645));
}

TEST(HfConfig, Llama31RopeScalingAndEosList) {
  const HfLlamaConfig c = ParseOrDie(kLlama31Config);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, HfRopeScalingType::kLlama3);
  EXPECT_EQ(HfRopeScalingTypeName(c.rope_scaling.type), "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
}

TEST(HfConfig, MistralSlidingWindowAndExplicitHeadDim) {
  EXPECT_EQ(ParseOrDie(SmallConfig("MistralForCausalLM", R"("sliding_window": 4096)")).sliding_window, 4096);
  EXPECT_EQ(ParseOrDie(SmallConfig("MistralForCausalLM")).sliding_window, 4096);  // transformers' default
  const HfLlamaConfig v3 = ParseOrDie(SmallConfig("MistralForCausalLM", R"("sliding_window": null, "head_dim": 16)"));
  EXPECT_FALSE(v3.sliding_window.has_value());
  EXPECT_EQ(v3.head_dim, 16);  // explicit, not hidden_size / heads (8)
  EXPECT_FALSE(v3.qkv_bias);
}

TEST(HfConfig, Defaults) {
  const HfLlamaConfig c = ParseOrDie(absl::StrReplaceAll(SmallConfig(), {{R"("num_key_value_heads": 2,)", ""}}));
  EXPECT_EQ(c.num_key_value_heads, 8);  // = num_attention_heads
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.bos_token_ids.empty());
  EXPECT_TRUE(c.torch_dtype.empty());
  EXPECT_EQ(ParseOrDie(SmallConfig("LlamaForCausalLM", R"("dtype": "float16")")).torch_dtype, "float16");
  EXPECT_EQ(ParseOrDie(SmallConfig("LlamaForCausalLM", R"("head_dim": null)")).head_dim, 8);
  const HfLlamaConfig biased = ParseOrDie(SmallConfig("LlamaForCausalLM", R"("attention_bias": true)"));
  EXPECT_TRUE(biased.qkv_bias);
  EXPECT_TRUE(biased.o_proj_bias);
}

TEST(HfConfig, RopeScalingKinds) {
  const HfLlamaConfig linear = ParseOrDie(SmallConfig("LlamaForCausalLM", R"("rope_scaling": {"type": "linear", "factor": 2.0})"));
  EXPECT_EQ(linear.rope_scaling.type, HfRopeScalingType::kLinear);
  EXPECT_EQ(linear.rope_scaling.factor, 2.0);

  const HfLlamaConfig dynamic = ParseOrDie(SmallConfig("LlamaForCausalLM", R"("rope_scaling": {"type": "dynamic", "factor": 4})"));
  EXPECT_EQ(dynamic.rope_scaling.type, HfRopeScalingType::kDynamic);
  EXPECT_EQ(dynamic.rope_scaling.factor, 4.0);
  EXPECT_EQ(dynamic.rope_scaling.original_max_position_embeddings, 0);

  const HfLlamaConfig yarn = ParseOrDie(SmallConfig(
      "Qwen2ForCausalLM",
      R"("rope_scaling": {"rope_type": "yarn", "type": "ignored", "factor": 4.0, "original_max_position_embeddings": 32768})"));
  EXPECT_EQ(yarn.rope_scaling.type, HfRopeScalingType::kYarn);
  EXPECT_EQ(yarn.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_EQ(yarn.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(yarn.rope_scaling.beta_slow, 1.0);
  EXPECT_FALSE(yarn.rope_scaling.attention_factor.has_value());

  const HfLlamaConfig yarn_full = ParseOrDie(SmallConfig(
      "LlamaForCausalLM",
      R"("rope_scaling": {"rope_type": "yarn", "factor": 2, "beta_fast": 16, "beta_slow": 2, "attention_factor": 1.5})"));
  EXPECT_EQ(yarn_full.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(yarn_full.rope_scaling.beta_slow, 2.0);
  EXPECT_EQ(yarn_full.rope_scaling.attention_factor, 1.5);

  EXPECT_EQ(ParseOrDie(SmallConfig("LlamaForCausalLM", R"("rope_scaling": {"rope_type": "default"})")).rope_scaling.type,
            HfRopeScalingType::kNone);
}

TEST(HfConfig, RopeParametersOfNewerTransformers) {
  const HfLlamaConfig c = ParseOrDie(SmallConfig(
      "LlamaForCausalLM", R"("rope_parameters": {"rope_theta": 500000.0, "rope_type": "linear", "factor": 2.0})"));
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, HfRopeScalingType::kLinear);
  EXPECT_EQ(ParseOrDie(SmallConfig("LlamaForCausalLM", R"("rope_parameters": {"rope_theta": 1e6, "rope_type": "default"})"))
                .rope_theta,
            1e6);
}

TEST(HfConfigErrors, NotAnObject) {
  EXPECT_EQ(ConfigError("{"), "config.json: not valid JSON: line 1, column 2: unexpected end of input, expected a string object key");
  EXPECT_EQ(ConfigError("[]"), "config.json: is a JSON array, not an object");
}

TEST(HfConfigErrors, Architecture) {
  EXPECT_EQ(ConfigError(R"({"hidden_size": 64})"), "config.json: missing required key 'architectures'");
  EXPECT_EQ(ConfigError(SmallConfig("GPT2LMHeadModel")),
            "config.json: architecture 'GPT2LMHeadModel' is not supported (supported: LlamaForCausalLM, "
            "MistralForCausalLM, Qwen2ForCausalLM)");
  EXPECT_EQ(ConfigError(R"({"architectures": "LlamaForCausalLM"})"),
            "config.json: 'architectures' must be a non-empty list of strings, got string \"LlamaForCausalLM\"");
  EXPECT_THAT(ConfigError(R"({"architectures": []})"), HasSubstr("must be a non-empty list of strings, got array []"));
}

TEST(HfConfigErrors, MissingRequiredKeys) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "vocab_size", "max_position_embeddings", "rms_norm_eps"}) {
    const std::string config = SmallConfig();
    JsonValue json = *ParseJson(config);
    JsonValue without = JsonValue::MakeObject();
    for (const auto& [k, v] : json.members()) {
      if (k != key) without.Insert(k, v);
    }
    EXPECT_EQ(ConfigError(ToJson(without)), absl::StrCat("config.json: missing required key '", key, "'"));
  }
  EXPECT_EQ(ConfigError(WithKey("vocab_size", "null")), "config.json: required key 'vocab_size' is null");
}

TEST(HfConfigErrors, WrongTypes) {
  const auto with = WithKey;
  EXPECT_EQ(ConfigError(with("hidden_size", R"("64")")),
            "config.json: 'hidden_size' must be an integer, got string \"64\"");
  EXPECT_EQ(ConfigError(with("num_hidden_layers", "2.5")),
            "config.json: 'num_hidden_layers' must be an integer, got number 2.5");
  EXPECT_EQ(ConfigError(with("rms_norm_eps", "[1e-6]")),
            "config.json: 'rms_norm_eps' must be a number, got array [1e-06]");
  EXPECT_EQ(ConfigError(with("tie_word_embeddings", R"("yes")")),
            "config.json: 'tie_word_embeddings' must be true or false, got string \"yes\"");
  EXPECT_EQ(ConfigError(with("eos_token_id", R"([2, "3"])")),
            "config.json: 'eos_token_id' must be an integer or a list of integers, got array [2,\"3\"]");
  EXPECT_EQ(ConfigError(with("torch_dtype", "16")), "config.json: 'torch_dtype' must be a string, got number 16");
  EXPECT_EQ(ConfigError(with("rope_scaling", "2")),
            "config.json: 'rope_scaling' must be null or an object, got number 2");
  EXPECT_THAT(ConfigError(with("vocab_size", R"("a very long string value that will be shortened in the message")")),
              HasSubstr("got string \"a very long string value that will b..."));
}

TEST(HfConfigErrors, Sizes) {
  const auto with = WithKey;
  EXPECT_EQ(ConfigError(with("num_attention_heads", "6")),
            "config.json: num_attention_heads 6 does not divide hidden_size 64 (and no head_dim is given)");
  EXPECT_EQ(ConfigError(with("num_key_value_heads", "3")),
            "config.json: num_key_value_heads 3 does not divide num_attention_heads 8");
  EXPECT_EQ(ConfigError(with("num_key_value_heads", "16")),
            "config.json: num_key_value_heads 16 does not divide num_attention_heads 8");
  EXPECT_EQ(ConfigError(with("intermediate_size", "-1")), "config.json: 'intermediate_size' must be positive, got -1");
  EXPECT_EQ(ConfigError(with("num_hidden_layers", "0")), "config.json: 'num_hidden_layers' must be positive, got 0");
  EXPECT_EQ(ConfigError(with("rms_norm_eps", "0")), "config.json: 'rms_norm_eps' must be positive, got 0");
  EXPECT_EQ(ConfigError(with("rope_theta", "-5")), "config.json: 'rope_theta' must be positive, got -5");
  EXPECT_EQ(ConfigError(with("num_hidden_layers", "1000000000000")),
            "config.json: 'num_hidden_layers' is 1000000000000, beyond kiln's limit of 65536");
  EXPECT_EQ(ConfigError(with("vocab_size", "4294967296")),
            "config.json: 'vocab_size' is 4294967296, beyond kiln's limit of 2147483648");
  EXPECT_EQ(ConfigError(with("head_dim", "7")), "config.json: head_dim 7 is odd; rotary embeddings rotate pairs");
}

TEST(HfConfigErrors, RopeScaling) {
  const auto rope = [](std::string_view scaling) {
    return ConfigError(SmallConfig("LlamaForCausalLM", absl::StrCat(R"("rope_scaling": )", std::string(scaling))));
  };
  EXPECT_EQ(rope(R"({"rope_type": "longrope", "factor": 2})"),
            "config.json: rope_scaling type 'longrope' is not supported (supported: default, linear, dynamic, yarn, "
            "llama3)");
  EXPECT_EQ(rope(R"({"factor": 2})"), "config.json: 'rope_scaling' has neither 'rope_type' nor 'type'");
  EXPECT_EQ(rope(R"({"type": "linear"})"), "config.json: missing required key 'rope_scaling.factor'");
  EXPECT_EQ(rope(R"({"type": "linear", "factor": "2"})"),
            "config.json: 'rope_scaling.factor' must be a number, got string \"2\"");
  EXPECT_EQ(rope(R"({"type": "linear", "factor": 0})"), "config.json: 'rope_scaling.factor' must be positive, got 0");
  EXPECT_EQ(rope(R"({"rope_type": "llama3", "factor": 8, "high_freq_factor": 4, "original_max_position_embeddings": 8192})"),
            "config.json: missing required key 'rope_scaling.low_freq_factor'");
  EXPECT_EQ(rope(R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4,
                     "original_max_position_embeddings": 8192})"),
            "config.json: 'rope_scaling.high_freq_factor' (4) must exceed 'low_freq_factor' (4)");
  EXPECT_EQ(rope(R"({"rope_type": 3})"), "config.json: 'rope_scaling.rope_type' must be a string, got number 3");
}

TEST(HfConfigErrors, UnsupportedVariants) {
  EXPECT_EQ(ConfigError(SmallConfig("LlamaForCausalLM", R"("hidden_act": "gelu")")),
            "config.json: hidden_act 'gelu' is not supported (the Llama layout uses 'silu')");
  EXPECT_EQ(ConfigError(SmallConfig("LlamaForCausalLM", R"("mlp_bias": true)")),
            "config.json: mlp_bias true is not supported (the Llama layout has none)");
  EXPECT_EQ(ConfigError(SmallConfig("Qwen2ForCausalLM", R"("use_sliding_window": true)")),
            "config.json: use_sliding_window true is not supported");
}

// ---- Model folders ----

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
};

// The Llama layout written out by hand (independently of
// ExpectedLlamaTensors) for a tiny model: hidden 8, 2 heads of 4, 1 kv head,
// intermediate 12, vocab 16.
std::vector<Tensor> TinyLayout(int layers, bool qkv_bias, bool o_bias, bool lm_head) {
  std::vector<Tensor> tensors = {{"model.embed_tokens.weight", {16, 8}}};
  for (int i = 0; i < layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    tensors.push_back({p + "self_attn.q_proj.weight", {8, 8}});
    tensors.push_back({p + "self_attn.k_proj.weight", {4, 8}});
    tensors.push_back({p + "self_attn.v_proj.weight", {4, 8}});
    tensors.push_back({p + "self_attn.o_proj.weight", {8, 8}});
    if (qkv_bias) {
      tensors.push_back({p + "self_attn.q_proj.bias", {8}});
      tensors.push_back({p + "self_attn.k_proj.bias", {4}});
      tensors.push_back({p + "self_attn.v_proj.bias", {4}});
    }
    if (o_bias) tensors.push_back({p + "self_attn.o_proj.bias", {8}});
    tensors.push_back({p + "mlp.gate_proj.weight", {12, 8}});
    tensors.push_back({p + "mlp.up_proj.weight", {12, 8}});
    tensors.push_back({p + "mlp.down_proj.weight", {8, 12}});
    tensors.push_back({p + "input_layernorm.weight", {8}});
    tensors.push_back({p + "post_attention_layernorm.weight", {8}});
  }
  tensors.push_back({"model.norm.weight", {8}});
  if (lm_head) tensors.push_back({"lm_head.weight", {16, 8}});
  return tensors;
}

std::string TinyConfig(std::string_view architecture, bool tied, std::string_view extra = "") {
  return absl::StrCat(R"({"architectures": [")", std::string(architecture), R"("], "hidden_size": 8,
    "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "vocab_size": 16, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
    "tie_word_embeddings": )",
                      tied ? "true" : "false", std::string(extra), "}");
}

// Distinct, recognisable values: element i of the k-th tensor is k + i/1000.
std::vector<float> ValuesOf(size_t ordinal, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(ordinal) + static_cast<float>(i) / 1000;
  return values;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A safetensors file of F32 tensors; `first_ordinal` numbers them for ValuesOf.
std::string WriteSafetensors(const std::vector<Tensor>& tensors, size_t first_ordinal) {
  std::vector<testing::SafetensorsEntry> entries;
  for (size_t k = 0; k < tensors.size(); ++k) {
    entries.push_back({tensors[k].name, "F32", tensors[k].shape,
                       testing::F32Bytes(ValuesOf(first_ordinal + k, NumElements(tensors[k].shape)))});
  }
  return testing::SafetensorsBytes(entries);
}

std::vector<float> FloatsOf(const SafetensorsTensor& tensor) {
  std::vector<float> values(tensor.data.size() / sizeof(float));
  std::memcpy(values.data(), tensor.data.data(), tensor.data.size());
  return values;
}

std::filesystem::path WriteModel(const std::string& name, const std::string& config, const std::vector<Tensor>& tensors) {
  const std::filesystem::path dir = testing::ScratchDir(name);
  testing::WriteBinaryFile(dir / "config.json", config);
  testing::WriteBinaryFile(dir / "model.safetensors", WriteSafetensors(tensors, 0));
  return dir;
}

std::string OpenError(const std::filesystem::path& dir) {
  absl::StatusOr<HfModel> model = OpenHfModel(dir.string());
  EXPECT_FALSE(model.ok());
  return model.ok() ? "" : std::string(model.status().message());
}

TEST(HfModel, ExpectedTensorsOfTheLayouts) {
  const HfLlamaConfig llama = ParseOrDie(TinyConfig("LlamaForCausalLM", false));
  const std::vector<HfExpectedTensor> expected = ExpectedLlamaTensors(llama);
  const std::vector<Tensor> by_hand = TinyLayout(2, false, false, true);
  ASSERT_EQ(expected.size(), by_hand.size());
  for (const Tensor& tensor : by_hand) {
    const auto it = std::find_if(expected.begin(), expected.end(),
                                 [&](const HfExpectedTensor& e) { return e.name == tensor.name; });
    ASSERT_NE(it, expected.end()) << tensor.name;
    EXPECT_EQ(it->shape, tensor.shape) << tensor.name;
  }
  EXPECT_EQ(ExpectedLlamaTensors(ParseOrDie(TinyConfig("Qwen2ForCausalLM", true))).size(), 1 + 2 * 12 + 1u);
  EXPECT_EQ(ExpectedLlamaTensors(ParseOrDie(kQwen25Config)).size(), 1 + 24 * 12 + 1u);
  EXPECT_EQ(ExpectedLlamaTensors(ParseOrDie(kTinyLlamaConfig)).size(), 1 + 22 * 9 + 2u);
}

TEST(HfModel, OpensATinyLlama) {
  const std::vector<Tensor> layout = TinyLayout(2, false, false, true);
  const std::filesystem::path dir = WriteModel("hf_tiny_llama", TinyConfig("LlamaForCausalLM", false), layout);
  absl::StatusOr<HfModel> model = OpenHfModel(dir.string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->config.architecture, "LlamaForCausalLM");
  EXPECT_EQ(model->config.head_dim, 4);
  EXPECT_EQ(model->config.torch_dtype, "float32");
  EXPECT_EQ(model->weights->tensors().size(), layout.size());
  for (size_t k = 0; k < layout.size(); ++k) {
    const SafetensorsTensor* tensor = model->weights->Find(layout[k].name);
    ASSERT_NE(tensor, nullptr) << layout[k].name;
    EXPECT_EQ(tensor->shape, layout[k].shape);
    EXPECT_EQ(FloatsOf(*tensor), ValuesOf(k, NumElements(layout[k].shape))) << layout[k].name;
  }
}

TEST(HfModel, OpensATiedQwen2SplitIntoShards) {
  const std::vector<Tensor> layout = TinyLayout(2, true, false, false);
  const std::filesystem::path dir = testing::ScratchDir("hf_tiny_qwen2");
  testing::WriteBinaryFile(dir / "config.json", TinyConfig("Qwen2ForCausalLM", true));
  const size_t split = layout.size() / 2;
  const std::vector<Tensor> first(layout.begin(), layout.begin() + static_cast<ptrdiff_t>(split));
  const std::vector<Tensor> second(layout.begin() + static_cast<ptrdiff_t>(split), layout.end());
  testing::WriteBinaryFile(dir / "model-00001-of-00002.safetensors", WriteSafetensors(first, 0));
  testing::WriteBinaryFile(dir / "model-00002-of-00002.safetensors", WriteSafetensors(second, split));
  JsonValue weight_map = JsonValue::MakeObject();
  for (size_t k = 0; k < layout.size(); ++k) {
    weight_map.Insert(layout[k].name, JsonValue::String(k < split ? "model-00001-of-00002.safetensors"
                                                                   : "model-00002-of-00002.safetensors"));
  }
  JsonValue index = JsonValue::MakeObject();
  index.Insert("weight_map", std::move(weight_map));
  testing::WriteBinaryFile(dir / "model.safetensors.index.json", ToJson(index, /*pretty=*/true));

  absl::StatusOr<HfModel> model = OpenHfModel(dir.string());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->config.qkv_bias);
  EXPECT_TRUE(model->config.tie_word_embeddings);
  EXPECT_EQ(model->weights->shards().size(), 2u);
  for (size_t k = 0; k < layout.size(); ++k) {
    const SafetensorsTensor* tensor = model->weights->Find(layout[k].name);
    ASSERT_NE(tensor, nullptr) << layout[k].name;
    EXPECT_EQ(FloatsOf(*tensor), ValuesOf(k, NumElements(layout[k].shape))) << layout[k].name;
  }
  EXPECT_EQ(model->weights->Find("model.layers.1.self_attn.k_proj.bias")->shape, std::vector<int64_t>{4});
}

TEST(HfModel, LlamaAttentionBiasNeedsOProjBias) {
  const std::string config = TinyConfig("LlamaForCausalLM", false, R"(, "attention_bias": true)");
  EXPECT_TRUE(OpenHfModel(WriteModel("hf_llama_bias", config, TinyLayout(2, true, true, true)).string()).ok());
  EXPECT_THAT(OpenError(WriteModel("hf_llama_no_obias", config, TinyLayout(2, true, false, true))),
              HasSubstr("2 of the 29 tensors of the LlamaForCausalLM layout are missing: "
                        "model.layers.0.self_attn.o_proj.bias [8], model.layers.1.self_attn.o_proj.bias [8] ("));
}

TEST(HfModel, MissingTensorListsWhatTheLayoutExpects) {
  std::vector<Tensor> layout = TinyLayout(2, false, false, true);
  std::erase_if(layout, [](const Tensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  const std::filesystem::path dir = WriteModel("hf_missing", TinyConfig("LlamaForCausalLM", false), layout);
  absl::StatusOr<HfModel> model = OpenHfModel(dir.string());
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::IsNotFound(model.status()));
  EXPECT_EQ(model.status().message(),
            (dir / "model.safetensors").string() +
                ": 1 of the 21 tensors of the LlamaForCausalLM layout are missing: "
                "model.layers.1.mlp.up_proj.weight [12, 8] (the layout expects: model.embed_tokens.weight "
                "[16, 8], model.norm.weight [8], lm_head.weight [16, 8]; and for each layer N in 0..1: "
                "model.layers.N.input_layernorm.weight [8], model.layers.N.self_attn.q_proj.weight [8, 8], "
                "model.layers.N.self_attn.k_proj.weight [4, 8], model.layers.N.self_attn.v_proj.weight [4, 8], "
                "model.layers.N.self_attn.o_proj.weight [8, 8], model.layers.N.post_attention_layernorm.weight "
                "[8], model.layers.N.mlp.gate_proj.weight [12, 8], model.layers.N.mlp.up_proj.weight [12, 8], "
                "model.layers.N.mlp.down_proj.weight [8, 12])");
}

TEST(HfModel, UntiedModelNeedsLmHead) {
  EXPECT_THAT(OpenError(WriteModel("hf_no_head", TinyConfig("LlamaForCausalLM", false), TinyLayout(2, false, false, false))),
              HasSubstr("1 of the 21 tensors of the LlamaForCausalLM layout are missing: lm_head.weight [16, 8] ("));
  // A tied model may still carry the head.
  EXPECT_TRUE(OpenHfModel(WriteModel("hf_tied_head", TinyConfig("LlamaForCausalLM", true), TinyLayout(2, false, false, true))
                              .string())
                  .ok());
}

TEST(HfModel, Qwen2WithoutBiases) {
  EXPECT_THAT(OpenError(WriteModel("hf_qwen_nobias", TinyConfig("Qwen2ForCausalLM", true), TinyLayout(2, false, false, false))),
              HasSubstr("6 of the 26 tensors of the Qwen2ForCausalLM layout are missing: "
                        "model.layers.0.self_attn.q_proj.bias [8], model.layers.0.self_attn.k_proj.bias [4], "));
}

TEST(HfModel, WrongShapes) {
  std::vector<Tensor> layout = TinyLayout(2, false, false, true);
  for (Tensor& t : layout) {
    if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {8, 8};  // as if no GQA
    if (t.name == "model.norm.weight") t.shape = {1, 8};
  }
  const std::filesystem::path dir = WriteModel("hf_shapes", TinyConfig("LlamaForCausalLM", false), layout);
  EXPECT_EQ(OpenError(dir), (dir / "model.safetensors").string() +
                                ": 2 tensors have the wrong shape for the LlamaForCausalLM layout: "
                                "model.layers.0.self_attn.k_proj.weight is [8, 8], expected [4, 8], "
                                "model.norm.weight is [1, 8], expected [8]");
}

TEST(HfModel, MissingFiles) {
  const std::filesystem::path no_config = testing::ScratchDir("hf_no_config");
  absl::StatusOr<HfModel> model = OpenHfModel(no_config.string());
  EXPECT_TRUE(absl::IsNotFound(model.status()));
  EXPECT_THAT(model.status().message(), HasSubstr("config.json: cannot open"));

  const std::filesystem::path no_weights = testing::ScratchDir("hf_no_weights");
  testing::WriteBinaryFile(no_weights / "config.json", TinyConfig("LlamaForCausalLM", false));
  EXPECT_EQ(OpenError(no_weights),
            no_weights.string() + ": no model.safetensors or model.safetensors.index.json in this folder");

  const std::filesystem::path bad_config =
      WriteModel("hf_bad_config", SmallConfig("GPT2LMHeadModel"), TinyLayout(2, false, false, true));
  EXPECT_THAT(OpenError(bad_config), HasSubstr("config.json: architecture 'GPT2LMHeadModel' is not supported"));
}

}  // namespace
}  // namespace kiln

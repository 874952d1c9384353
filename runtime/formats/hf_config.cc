#include "runtime/formats/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "runtime/util/json.h"
#include "runtime/util/mapped_file.h"

namespace kiln {
namespace {

constexpr std::string_view kLlama = "LlamaForCausalLM";
constexpr std::string_view kMistral = "MistralForCausalLM";
constexpr std::string_view kQwen2 = "Qwen2ForCausalLM";

// Bounds that keep a hostile config from overflowing shape arithmetic (a
// product of two sizes stays within int64) or listing absurd layer counts.
constexpr int64_t kMaxSize = int64_t{1} << 31;
constexpr int64_t kMaxLayers = 65536;

// "string \"64\"": a value's type and (shortened) text, for type errors.
std::string DescribeValue(const JsonValue& value) {
  std::string text = ToJson(value);
  if (text.size() > 40) {
    size_t cut = 37;
    while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    text = absl::StrCat(text.substr(0, cut), "...");
  }
  return absl::StrCat(std::string(JsonTypeName(value.type())), " ", text);
}

// Typed reads of the keys of one JSON object. Problems go to a status shared
// by all readers of one file, which keeps the first (later reads return
// defaults), so a caller reads every field and checks the status once. A key
// whose value is null counts as absent, as in transformers.
class ConfigFields {
 public:
  // `prefix` qualifies keys of a nested object in errors: "rope_scaling.".
  ConfigFields(std::string_view file, const JsonValue& object, std::string_view prefix, absl::Status& status)
      : file_(file), object_(object), prefix_(prefix), status_(status) {}

  void Fail(std::string_view problem) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(file_, ": ", std::string(problem)));
  }

  // The value of `key`, or null when it is absent or null.
  const JsonValue* Get(std::string_view key) const {
    const JsonValue* value = object_.Find(key);
    return value == nullptr || value->is_null() ? nullptr : value;
  }

  std::optional<int64_t> OptionalInt(std::string_view key) {
    const JsonValue* value = Get(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_integer()) {
      WrongType(key, "an integer", *value);
      return std::nullopt;
    }
    return *value->int_value();
  }
  int64_t Int(std::string_view key) { return Required(key, OptionalInt(key)).value_or(0); }
  int64_t Int(std::string_view key, int64_t default_value) {
    return OptionalInt(key).value_or(default_value);
  }

  std::optional<double> OptionalNumber(std::string_view key) {
    const JsonValue* value = Get(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number()) {
      WrongType(key, "a number", *value);
      return std::nullopt;
    }
    return value->number();
  }
  double Number(std::string_view key) { return Required(key, OptionalNumber(key)).value_or(0); }
  double Number(std::string_view key, double default_value) {
    return OptionalNumber(key).value_or(default_value);
  }

  bool Bool(std::string_view key, bool default_value) {
    const JsonValue* value = Get(key);
    if (value == nullptr) return default_value;
    if (!value->is_bool()) {
      WrongType(key, "true or false", *value);
      return default_value;
    }
    return value->bool_value();
  }

  std::optional<std::string> OptionalString(std::string_view key) {
    const JsonValue* value = Get(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) {
      WrongType(key, "a string", *value);
      return std::nullopt;
    }
    return value->string_value();
  }

  // An integer or a list of integers (eos_token_id may be either).
  std::vector<int64_t> IntOrIntList(std::string_view key) {
    const JsonValue* value = Get(key);
    if (value == nullptr) return {};
    if (value->is_integer()) return {*value->int_value()};
    std::vector<int64_t> ids;
    const bool all_integers = value->is_array() && std::all_of(value->array().begin(), value->array().end(),
                                                               [](const JsonValue& v) { return v.is_integer(); });
    if (!all_integers) {
      WrongType(key, "an integer or a list of integers", *value);
      return {};
    }
    for (const JsonValue& id : value->array()) ids.push_back(*id.int_value());
    return ids;
  }

  // Values that must be > 0 (sizes, eps, theta, factors).
  template <typename T>
  void RequirePositive(std::string_view key, T value) {
    if (!(value > 0)) Fail(absl::StrCat("'", Qualified(key), "' must be positive, got ", value));
  }
  void RequireAtMost(std::string_view key, int64_t value, int64_t limit) {
    if (value > limit) Fail(absl::StrCat("'", Qualified(key), "' is ", value, ", beyond kiln's limit of ", limit));
  }

  std::string Qualified(std::string_view key) const { return absl::StrCat(prefix_, std::string(key)); }

 private:
  template <typename T>
  std::optional<T> Required(std::string_view key, std::optional<T> value) {
    if (!value.has_value() && Get(key) == nullptr) {
      Fail(object_.Find(key) == nullptr ? absl::StrCat("missing required key '", Qualified(key), "'")
                                        : absl::StrCat("required key '", Qualified(key), "' is null"));
    }
    return value;
  }

  void WrongType(std::string_view key, std::string_view expected, const JsonValue& value) {
    Fail(absl::StrCat("'", Qualified(key), "' must be ", std::string(expected), ", got ", DescribeValue(value)));
  }

  std::string file_;
  const JsonValue& object_;
  std::string prefix_;
  absl::Status& status_;
};

// Reads the "rope_scaling" (or "rope_parameters") object `key` into `scaling`.
void ReadRopeScaling(std::string_view file, const JsonValue& object, std::string_view key,
                     absl::Status& status, HfRopeScaling& scaling) {
  ConfigFields rope(file, object, absl::StrCat(std::string(key), "."), status);
  std::optional<std::string> type = rope.OptionalString("rope_type");
  if (!type.has_value()) type = rope.OptionalString("type");
  if (!status.ok()) return;
  if (!type.has_value()) {
    rope.Fail(absl::StrCat("'", std::string(key), "' has neither 'rope_type' nor 'type'"));
    return;
  }
  if (*type == "default") return;  // transformers' name for unscaled rope
  if (*type == "linear") {
    scaling.type = HfRopeScalingType::kLinear;
  } else if (*type == "dynamic") {
    scaling.type = HfRopeScalingType::kDynamic;
  } else if (*type == "yarn") {
    scaling.type = HfRopeScalingType::kYarn;
  } else if (*type == "llama3") {
    scaling.type = HfRopeScalingType::kLlama3;
  } else {
    rope.Fail(absl::StrFormat("%s type '%s' is not supported (supported: default, linear, dynamic, yarn, "
                                "llama3)",
                                key, *type));
    return;
  }
  scaling.factor = rope.Number("factor");
  rope.RequirePositive("factor", scaling.factor);
  switch (scaling.type) {
    case HfRopeScalingType::kLlama3:
      scaling.low_freq_factor = rope.Number("low_freq_factor");
      scaling.high_freq_factor = rope.Number("high_freq_factor");
      scaling.original_max_position_embeddings = rope.Int("original_max_position_embeddings");
      rope.RequirePositive("low_freq_factor", scaling.low_freq_factor);
      rope.RequirePositive("original_max_position_embeddings", scaling.original_max_position_embeddings);
      // The smoothing between the two bands divides by their difference.
      if (status.ok() && !(scaling.high_freq_factor > scaling.low_freq_factor)) {
        rope.Fail(absl::StrCat("'", rope.Qualified("high_freq_factor"), "' (", scaling.high_freq_factor,
                               ") must exceed 'low_freq_factor' (", scaling.low_freq_factor, ")"));
      }
      break;
    case HfRopeScalingType::kYarn:
      scaling.original_max_position_embeddings = rope.Int("original_max_position_embeddings", 0);
      scaling.beta_fast = rope.Number("beta_fast", 32.0);
      scaling.beta_slow = rope.Number("beta_slow", 1.0);
      scaling.attention_factor = rope.OptionalNumber("attention_factor");
      break;
    case HfRopeScalingType::kDynamic:
      scaling.original_max_position_embeddings = rope.Int("original_max_position_embeddings", 0);
      break;
    default:
      break;
  }
}

absl::Status ReadArchitecture(const std::string& file, const JsonValue& root, std::string& architecture) {
  const JsonValue* list = root.Find("architectures");
  if (list == nullptr) return absl::InvalidArgumentError(absl::StrCat(file, ": missing required key 'architectures'"));
  if (!list->is_array() || list->array().empty() || !list->array()[0].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": 'architectures' must be a non-empty list of strings, got ", DescribeValue(*list)));
  }
  architecture = list->array()[0].string_value();
  const std::vector<std::string>& supported = SupportedHfArchitectures();
  if (std::find(supported.begin(), supported.end(), architecture) == supported.end()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: architecture '%s' is not supported (supported: %s)",
                                                      file, architecture, absl::StrJoin(supported, ", ")));
  }
  return absl::OkStatus();
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// What the layout expects, compactly: the global tensors, then each layer's
// tensors once with N for the layer index.
std::string DescribeLayout(const HfLlamaConfig& config, const std::vector<HfExpectedTensor>& expected) {
  std::vector<std::string> global, per_layer;
  for (const HfExpectedTensor& tensor : expected) {
    const std::string entry = absl::StrCat(tensor.name, " ", ShapeString(tensor.shape));
    if (tensor.name.starts_with("model.layers.0.")) {
      per_layer.push_back(absl::StrReplaceAll(entry, {{"model.layers.0.", "model.layers.N."}}));
    } else if (!tensor.name.starts_with("model.layers.")) {
      global.push_back(entry);
    }
  }
  return absl::StrFormat("%s; and for each layer N in 0..%d: %s", absl::StrJoin(global, ", "),
                         config.num_hidden_layers - 1, absl::StrJoin(per_layer, ", "));
}

// At most `limit` entries, then how many more.
std::string JoinCapped(const std::vector<std::string>& items, size_t limit) {
  if (items.size() <= limit) return absl::StrJoin(items, ", ");
  return absl::StrCat(absl::StrJoin(items.begin(), items.begin() + static_cast<ptrdiff_t>(limit), ", "),
                      " and ", items.size() - limit, " more");
}

}  // namespace

std::string_view HfRopeScalingTypeName(HfRopeScalingType type) {
  switch (type) {
    case HfRopeScalingType::kNone: return "none";
    case HfRopeScalingType::kLinear: return "linear";
    case HfRopeScalingType::kDynamic: return "dynamic";
    case HfRopeScalingType::kYarn: return "yarn";
    case HfRopeScalingType::kLlama3: return "llama3";
  }
  return "unknown";
}

const std::vector<std::string>& SupportedHfArchitectures() {
  static const std::vector<std::string> kSupported = {std::string(kLlama), std::string(kMistral),
                                                      std::string(kQwen2)};
  return kSupported;
}

absl::StatusOr<HfLlamaConfig> ParseHfConfig(std::string_view json_text, std::string_view name) {
  const std::string file(name);
  absl::StatusOr<JsonValue> root = ParseJson(json_text);
  if (!root.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": not valid JSON: ", root.status().message()));
  if (!root->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": is a JSON ", std::string(JsonTypeName(root->type())), ", not an object"));
  }
  HfLlamaConfig config;
  if (absl::Status status = ReadArchitecture(file, *root, config.architecture); !status.ok()) return status;

  absl::Status status;
  ConfigFields fields(file, *root, "", status);
  config.hidden_size = fields.Int("hidden_size");
  config.intermediate_size = fields.Int("intermediate_size");
  config.num_hidden_layers = fields.Int("num_hidden_layers");
  config.num_attention_heads = fields.Int("num_attention_heads");
  config.num_key_value_heads = fields.Int("num_key_value_heads", config.num_attention_heads);
  const std::optional<int64_t> head_dim = fields.OptionalInt("head_dim");
  config.vocab_size = fields.Int("vocab_size");
  config.max_position_embeddings = fields.Int("max_position_embeddings");
  config.rms_norm_eps = fields.Number("rms_norm_eps");
  config.tie_word_embeddings = fields.Bool("tie_word_embeddings", false);
  config.bos_token_ids = fields.IntOrIntList("bos_token_id");
  config.eos_token_ids = fields.IntOrIntList("eos_token_id");
  // transformers >= 4.56 writes "dtype" where older versions wrote "torch_dtype".
  std::optional<std::string> dtype = fields.OptionalString("torch_dtype");
  if (!dtype.has_value()) dtype = fields.OptionalString("dtype");
  config.torch_dtype = dtype.value_or("");

  // Newer transformers fold rope_theta and the scaling into rope_parameters.
  const JsonValue* rope_parameters = fields.Get("rope_parameters");
  const JsonValue* rope_scaling = fields.Get("rope_scaling");
  if (rope_parameters != nullptr && !rope_parameters->is_object()) {
    fields.Fail(absl::StrCat("'rope_parameters' must be an object, got ", DescribeValue(*rope_parameters)));
  }
  if (rope_scaling != nullptr && !rope_scaling->is_object()) {
    fields.Fail(absl::StrCat("'rope_scaling' must be null or an object, got ", DescribeValue(*rope_scaling)));
  }
  if (status.ok() && rope_scaling != nullptr) {
    ReadRopeScaling(file, *rope_scaling, "rope_scaling", status, config.rope_scaling);
  } else if (status.ok() && rope_parameters != nullptr) {
    ReadRopeScaling(file, *rope_parameters, "rope_parameters", status, config.rope_scaling);
  }
  config.rope_theta = fields.Number("rope_theta", 10000.0);
  if (status.ok() && fields.Get("rope_theta") == nullptr && rope_parameters != nullptr) {
    config.rope_theta = ConfigFields(file, *rope_parameters, "rope_parameters.", status).Number("rope_theta", 10000.0);
  }

  // kiln's layout is a SiLU-gated MLP without biases.
  const std::string activation = fields.OptionalString("hidden_act").value_or("silu");
  if (activation != "silu") {
    fields.Fail(absl::StrCat("hidden_act '", activation, "' is not supported (the Llama layout uses 'silu')"));
  }
  if (config.architecture == kLlama) {
    config.qkv_bias = config.o_proj_bias = fields.Bool("attention_bias", false);
    if (fields.Bool("mlp_bias", false)) fields.Fail("mlp_bias true is not supported (the Llama layout has none)");
  } else if (config.architecture == kQwen2) {
    config.qkv_bias = true;  // Qwen2 always has q/k/v biases, and no key for them
    // Qwen2's window applies only to some layers (max_window_layers), which
    // kiln does not model.
    if (fields.Bool("use_sliding_window", false)) fields.Fail("use_sliding_window true is not supported");
  } else if (config.architecture == kMistral) {
    // An absent key means transformers' default of 4096; null means none.
    config.sliding_window = root->Find("sliding_window") == nullptr
                                ? std::optional<int64_t>(4096)
                                : fields.OptionalInt("sliding_window");
    if (config.sliding_window.has_value()) fields.RequirePositive("sliding_window", *config.sliding_window);
  }
  if (!status.ok()) return status;

  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"hidden_size", config.hidden_size},
                                   {"intermediate_size", config.intermediate_size},
                                   {"num_hidden_layers", config.num_hidden_layers},
                                   {"num_attention_heads", config.num_attention_heads},
                                   {"num_key_value_heads", config.num_key_value_heads},
                                   {"vocab_size", config.vocab_size},
                                   {"max_position_embeddings", config.max_position_embeddings}}) {
    fields.RequirePositive(key, value);
    fields.RequireAtMost(key, value, std::string_view(key) == "num_hidden_layers" ? kMaxLayers : kMaxSize);
  }
  fields.RequirePositive("rms_norm_eps", config.rms_norm_eps);
  fields.RequirePositive("rope_theta", config.rope_theta);
  if (head_dim.has_value()) {
    fields.RequirePositive("head_dim", *head_dim);
    fields.RequireAtMost("head_dim", *head_dim, kMaxSize);
  }
  if (!status.ok()) return status;

  if (head_dim.has_value()) {
    config.head_dim = *head_dim;  // explicit head_dim need not be hidden_size / heads
  } else if (config.hidden_size % config.num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: num_attention_heads %d does not divide hidden_size %d (and no head_dim is given)", file,
        config.num_attention_heads, config.hidden_size));
  } else {
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: num_key_value_heads %d does not divide num_attention_heads %d",
                                                      file, config.num_key_value_heads, config.num_attention_heads));
  }
  if (config.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: head_dim %d is odd; rotary embeddings rotate pairs", file, config.head_dim));
  }
  return config;
}

absl::StatusOr<HfLlamaConfig> ReadHfConfig(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const std::span<const uint8_t> bytes = (*file)->bytes();
  return ParseHfConfig(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

std::vector<HfExpectedTensor> ExpectedLlamaTensors(const HfLlamaConfig& c) {
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  std::vector<HfExpectedTensor> expected;
  expected.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string prefix = absl::StrCat("model.layers.", layer, ".");
    const auto add = [&](std::string_view suffix, std::vector<int64_t> shape) {
      expected.push_back({absl::StrCat(prefix, std::string(suffix)), std::move(shape)});
    };
    add("input_layernorm.weight", {c.hidden_size});
    add("self_attn.q_proj.weight", {q_width, c.hidden_size});
    add("self_attn.k_proj.weight", {kv_width, c.hidden_size});
    add("self_attn.v_proj.weight", {kv_width, c.hidden_size});
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", {q_width});
      add("self_attn.k_proj.bias", {kv_width});
      add("self_attn.v_proj.bias", {kv_width});
    }
    add("self_attn.o_proj.weight", {c.hidden_size, q_width});
    if (c.o_proj_bias) add("self_attn.o_proj.bias", {c.hidden_size});
    add("post_attention_layernorm.weight", {c.hidden_size});
    add("mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size});
    add("mlp.up_proj.weight", {c.intermediate_size, c.hidden_size});
    add("mlp.down_proj.weight", {c.hidden_size, c.intermediate_size});
  }
  expected.push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) expected.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return expected;
}

absl::Status CheckLlamaTensors(const HfLlamaConfig& config, const SafetensorsCheckpoint& weights) {
  const std::vector<HfExpectedTensor> expected = ExpectedLlamaTensors(config);
  std::vector<std::string> missing, misshapen;
  for (const HfExpectedTensor& tensor : expected) {
    const SafetensorsTensor* found = weights.Find(tensor.name);
    if (found == nullptr) {
      missing.push_back(absl::StrCat(tensor.name, " ", ShapeString(tensor.shape)));
    } else if (found->shape != tensor.shape) {
      misshapen.push_back(absl::StrFormat("%s is %s, expected %s", tensor.name, ShapeString(found->shape),
                                          ShapeString(tensor.shape)));
    }
  }
  constexpr size_t kListed = 8;
  if (!missing.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "%s: %d of the %d tensors of the %s layout are missing: %s (the layout expects: %s)", weights.path(),
        missing.size(), expected.size(), config.architecture, JoinCapped(missing, kListed),
        DescribeLayout(config, expected)));
  }
  if (!misshapen.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d tensors have the wrong shape for the %s layout: %s",
                                                      weights.path(), misshapen.size(), config.architecture,
                                                      JoinCapped(misshapen, kListed)));
  }
  return absl::OkStatus();
}

absl::StatusOr<HfModel> OpenHfModel(const std::string& dir) {
  HfModel model;
  absl::StatusOr<HfLlamaConfig> config = ReadHfConfig((std::filesystem::path(dir) / "config.json").string());
  if (!config.ok()) return config.status();
  model.config = *std::move(config);
  absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> weights = SafetensorsCheckpoint::OpenFolder(dir);
  if (!weights.ok()) return weights.status();
  model.weights = *std::move(weights);
  if (absl::Status status = CheckLlamaTensors(model.config, *model.weights); !status.ok()) return status;
  return model;
}

}  // namespace kiln

// Synthesises Llama-family GGUF models with random weights of a realistic
// scale and a small valid SentencePiece-style vocabulary: test inputs for
// every part of kiln, and stand-ins for big checkpoints on machines that
// cannot download them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/formats/ggml_types.h"

namespace kiln {

struct SynthPreset {
  std::string name;
  std::string architecture;  // llama | qwen2
  int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
  double rope_theta, norm_eps;
  bool tied_embeddings, qkv_bias;
};

const std::vector<SynthPreset>& SynthPresets();
absl::StatusOr<SynthPreset> FindSynthPreset(const std::string& name);

struct SynthOptions {
  SynthPreset preset;
  GgmlType type = GgmlType::kF16;  // storage of the 2-D weights; norms and biases stay f32
  uint64_t seed = 1;
  int threads = 0;                  // 0: all cores
};

struct SynthReport {
  size_t tensors = 0;
  uint64_t tensor_bytes = 0;
  uint64_t parameters = 0;
  // Tensors whose rows are not whole blocks of the requested type, and the
  // type used instead (as llama-quantize falls back).
  std::vector<std::pair<std::string, GgmlType>> fallbacks;
};

// Writes the model to `path`; `progress(done, total)` is called per tensor.
absl::StatusOr<SynthReport> SynthesizeModel(const SynthOptions& options, const std::string& path,
                                            const std::function<void(size_t, size_t)>& progress = nullptr);

// The synthetic vocabulary alone: <unk> <s> </s>, the 256 byte tokens, then
// pieces built by joining earlier pieces, so SentencePiece merging can reach
// every one of them.
struct SynthVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};
SynthVocab MakeSynthVocab(int64_t n_vocab, uint64_t seed);

}  // namespace kiln

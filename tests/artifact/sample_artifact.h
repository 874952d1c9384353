// The sample artifact of the artifact tests and the fuzz seed writer: every
// section kind with real content, and weights in every family of storage
// type, quantised from known values.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/artifact/artifact_writer.h"
#include "runtime/formats/quant.h"

namespace kiln::testing {

// Deterministic values in [-1, 1) with some spread, for weights.
inline std::vector<float> SampleValues(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

inline std::vector<uint8_t> F32Bytes(std::span<const float> values) {
  std::vector<uint8_t> out(values.size() * sizeof(float));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

struct SampleWeight {
  std::string name;
  std::string storage;
  std::vector<int64_t> shape;
  std::vector<float> values;  // what was quantised into `bytes`
  std::vector<uint8_t> bytes;
};

// A small model's worth of tensors in every family of storage type: plain
// f32, ggml block formats (q8_0, q4_K) and kiln's group-wise int4 / int2.
inline std::vector<SampleWeight> SampleWeights() {
  std::vector<SampleWeight> weights;
  auto add_ggml = [&](std::string name, GgmlType type, std::string storage, std::vector<int64_t> shape, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    SampleWeight w{std::move(name), std::move(storage), std::move(shape), SampleValues(n, seed), {}};
    w.bytes.resize(*GgmlRowBytes(type, n));
    if (!Quantize(type, w.values, w.bytes).ok()) std::abort();
    weights.push_back(std::move(w));
  };
  auto add_grouped = [&](std::string name, GroupedKind kind, int64_t group, std::string storage,
                         std::vector<int64_t> shape, uint32_t seed) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    SampleWeight w{std::move(name), std::move(storage), std::move(shape), SampleValues(n, seed), {}};
    w.bytes.resize(*GroupedRowBytes(kind, group, n));
    if (!QuantizeGrouped(kind, group, w.values, w.bytes).ok()) std::abort();
    weights.push_back(std::move(w));
  };
  {
    const std::vector<float> norm = SampleValues(64, 1);
    weights.push_back({"blk.0.attn_norm.weight", "f32", {64}, norm, F32Bytes(norm)});
  }
  add_ggml("token_embd.weight", GgmlType::kQ8_0, "q8_0", {16, 64}, 2);
  add_ggml("blk.0.ffn_up.weight", GgmlType::kQ4_K, "q4_k", {3, 256}, 3);
  add_grouped("blk.0.attn_q.weight", GroupedKind::kInt4, 32, "int4:g32", {8, 64}, 4);
  add_grouped("blk.0.attn_k.weight", GroupedKind::kInt2, 64, "int2:g64", {4, 128}, 5);
  return weights;
}

inline const char kSampleMetadata[] =
    R"({"kiln_version":"0.1","architecture":"llama","source":"stories260K.gguf","buckets":[1,8,32]})";
inline const char kSampleIr[] =
    "module {\n  func.func @step(%tokens: tensor<?xi32> {kiln.role = \"tokens\"}) {\n    return\n  }\n}\n";
inline const char kSamplePlan[] = R"({"launches":[{"kernel":"rmsnorm_f32","grid":[1,1,1],"bindings":[0,1]}]})";
inline const char kSampleTokenizer[] = R"({"model":"llama","tokens":["<unk>","<s>","</s>","a"]})";
inline const char kSamplePtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry rmsnorm_f32() { ret; }\n";
// SPIR-V begins with the magic word 0x07230203, little-endian.
inline const std::vector<uint8_t> kSampleSpirv = {0x03, 0x02, 0x23, 0x07, 0x00, 0x06, 0x01, 0x00,
                                                  0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00};

// Every section kind: metadata, ir_text, plan, tokenizer, two kernels
// sections, and (unless `with_weights` is false: a program-only artifact)
// the sample weights.
inline absl::Status AddSampleContent(ArtifactWriter& w, bool with_weights = true) {
  for (absl::Status s : {w.AddSection(SectionKind::kMetadata, "", std::string(kSampleMetadata)),
                         w.AddSection(SectionKind::kIrText, "", std::string(kSampleIr)),
                         w.AddSection(SectionKind::kPlan, "", std::string(kSamplePlan)),
                         w.AddSection(SectionKind::kTokenizer, "", std::string(kSampleTokenizer)),
                         w.AddSection(SectionKind::kKernels, "cuda:sm_90", std::string(kSamplePtx)),
                         w.AddSection(SectionKind::kKernels, "vulkan:spirv1.3", kSampleSpirv)}) {
    if (!s.ok()) return s;
  }
  if (!with_weights) return absl::OkStatus();
  for (SampleWeight& sw : SampleWeights()) {
    if (absl::Status s = w.AddWeight(sw.name, sw.storage, sw.shape, sw.bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kiln::testing

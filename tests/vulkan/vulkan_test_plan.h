// Small hand-built plans for the Vulkan kernel tests: a few launches over
// random weights, run on the CPU executor (the reference) and on the Vulkan
// executor with its kernels compiled in memory, outputs compared.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/spirv/spirv_codegen.h"
#include "gtest/gtest.h"
#include "runtime/executor/cpu_executor.h"
#include "runtime/executor/repack.h"
#include "runtime/vulkan/vulkan_executor.h"
#include "tests/test_support.h"

namespace kiln::testing {

class TestPlan {
 public:
  explicit TestPlan(std::vector<int64_t> buckets = {1, 2, 8}) : buckets_(std::move(buckets)) {}

  // A weight of `storage` with random values in [-scale, scale].
  std::string Weight(const std::string& name, const std::string& storage, std::vector<int64_t> shape,
                     float scale = 1.0f) {
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    std::vector<float> v(rows * cols);
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (float& x : v) x = dist(rng_);
    return Weight(name, storage, std::move(shape), v);
  }
  // The same with the values given (rows x cols, row-major).
  std::string Weight(const std::string& name, const std::string& storage, std::vector<int64_t> shape,
                     const std::vector<float>& v) {
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    EXPECT_EQ(static_cast<int64_t>(v.size()), rows * cols) << name;
    absl::StatusOr<cpu::WeightStorage> s = cpu::ParseWeightStorage(shape.size() == 1 ? "f32" : storage);
    EXPECT_TRUE(s.ok()) << s.status();
    absl::StatusOr<std::vector<uint8_t>> bytes =
        RepackWeight(cpu::WeightStorage::Ggml(GgmlType::kF32), *s, rows, cols,
                     {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4});
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    weights_[name] = {*s, *bytes};
    weights_json_.push_back(absl::StrCat("{\"name\":\"", name, "\",\"storage\":\"", s->Name(), "\",\"shape\":[",
                                         absl::StrJoin(shape, ","), "]}"));
    return name;
  }

  // An arena region of `width` floats per token row; returns its binding text for `role`.
  int64_t Region(int64_t width) {
    regions_.push_back(next_);
    next_ += width;
    return static_cast<int64_t>(regions_.size()) - 1;
  }
  std::string ArenaBinding(const std::string& role, int64_t region) const {
    std::vector<int64_t> offsets;
    for (int64_t b : buckets_) offsets.push_back(regions_[region] * b * 4);
    return absl::StrCat("{\"role\":\"", role, "\",\"arena\":[", absl::StrJoin(offsets, ","), "]}");
  }
  static std::string WeightBinding(const std::string& role, const std::string& name) {
    return absl::StrCat("{\"role\":\"", role, "\",\"weight\":\"", name, "\"}");
  }
  static std::string InputBinding(const std::string& role) {
    return absl::StrCat("{\"role\":\"", role, "\",\"input\":\"", role, "\"}");
  }
  void Launch(const std::string& kernel, const std::vector<std::string>& bindings, const std::string& constants) {
    launches_.push_back(absl::StrCat("{\"kernel\":\"", kernel, "\",\"bindings\":[", absl::StrJoin(bindings, ","),
                                     "],\"constants\":{", constants, "}}"));
  }
  // An f32 embedding table of `width` columns (random, or `values`) and its
  // lookup into a new region.
  int64_t Embed(const std::string& table, int64_t vocab, int64_t width, const std::vector<float>& values = {}) {
    if (values.empty()) {
      Weight(table, "f32", {vocab, width});
    } else {
      Weight(table, "f32", {vocab, width}, values);
    }
    const int64_t r = Region(width);
    Launch("embedding.f32", {WeightBinding("table", table), InputBinding("tokens"), ArenaBinding("result", r)},
           absl::StrCat("\"vocab\":", vocab, ",\"width\":", width));
    return r;
  }

  void SetPool(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t page_size, int64_t max_tokens,
               bool f16 = false) {
    pool_ = absl::StrCat("\"layers\":", layers, ",\"kv_heads\":", kv_heads, ",\"head_dim\":", head_dim,
                         ",\"page_size\":", page_size, ",\"max_tokens\":", max_tokens, ",\"kv_type\":\"",
                         f16 ? "f16" : "f32", "\"");
  }

  // The plan whose result (the step's "logits", `width` floats a row) is `region`.
  absl::StatusOr<Plan> Build(int64_t result_region, int64_t width) const {
    std::vector<int64_t> arena;
    for (int64_t b : buckets_) arena.push_back(std::max<int64_t>(next_ * b * 4, 4));
    const std::string json = absl::StrCat(
        "{\"format\":\"kiln-plan-v1\",\"function\":\"step\",\"model\":{\"n_vocab\":", width, "},\"buckets\":[",
        absl::StrJoin(buckets_, ","), "],\"arena_bytes\":[", absl::StrJoin(arena, ","), "],\"results\":[",
        ArenaBinding("result0", result_region),
        "],\"inputs\":[{\"role\":\"tokens\",\"kind\":\"tensor\",\"rank\":1},{\"role\":\"positions\",\"kind\":"
        "\"tensor\",\"rank\":1},{\"role\":\"query_starts\",\"kind\":\"tensor\",\"rank\":1},{\"role\":\"context_"
        "lens\",\"kind\":\"tensor\",\"rank\":1},{\"role\":\"block_tables\",\"kind\":\"tensor\",\"rank\":2},{"
        "\"role\":\"logit_rows\",\"kind\":\"tensor\",\"rank\":1},{\"role\":\"kv\",\"kind\":\"page_pool\",",
        pool_, "}],\"weights\":[", absl::StrJoin(weights_json_, ","), "],\"launches\":[",
        absl::StrJoin(launches_, ","), "]}");
    return ParsePlan(json);
  }

  WeightSource Source() const {
    return [this](const std::string& name) -> absl::StatusOr<WeightBytes> {
      auto it = weights_.find(name);
      if (it == weights_.end()) return absl::NotFoundError(name);
      return WeightBytes{it->second.first, it->second.second};
    };
  }
  std::mt19937& rng() { return rng_; }

 private:
  std::vector<int64_t> buckets_;
  std::mt19937 rng_{1234};
  std::map<std::string, std::pair<cpu::WeightStorage, std::vector<uint8_t>>> weights_;
  std::vector<std::string> weights_json_, launches_;
  std::vector<int64_t> regions_;
  int64_t next_ = 0;
  std::string pool_ = "\"layers\":1,\"kv_heads\":1,\"head_dim\":4,\"page_size\":4,\"max_tokens\":64";
};

// One sequence of a step: `fresh` new tokens after `cached` earlier ones;
// `id` (default: its index in the step) picks its pages.
struct SeqStep {
  int32_t cached = 0, fresh = 1, id = -1;
};

// A ragged batch; sequence `id` owns pages id * pages_per_seq onwards, in
// reverse order (so block tables matter). Every row's logits are requested
// unless `rows` is given.
inline StepBatch MakeBatch(const std::vector<SeqStep>& seqs, int32_t pages_per_seq, int32_t vocab, std::mt19937& rng,
                           std::vector<int32_t> rows = {}) {
  StepBatch b;
  b.pages_per_seq = pages_per_seq;
  b.query_starts.push_back(0);
  const int32_t n = static_cast<int32_t>(seqs.size());
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t i = 0; i < seqs[s].fresh; ++i) {
      b.tokens.push_back(static_cast<int32_t>(rng() % vocab));
      b.positions.push_back(seqs[s].cached + i);
    }
    b.query_starts.push_back(static_cast<int32_t>(b.tokens.size()));
    b.context_lens.push_back(seqs[s].cached + seqs[s].fresh);
    const int32_t id = seqs[s].id >= 0 ? seqs[s].id : s;
    for (int32_t p = 0; p < pages_per_seq; ++p) b.block_tables.push_back((id + 1) * pages_per_seq - 1 - p);
  }
  if (rows.empty()) {
    for (size_t i = 0; i < b.tokens.size(); ++i) rows.push_back(static_cast<int32_t>(i));
  }
  b.logit_rows = rows;
  return b;
}

// The Vulkan executor for `plan` (kernels compiled here), null when the
// machine has no Vulkan device (the caller skips).
inline std::unique_ptr<Executor> MakeVulkan(const Plan& plan, const WeightSource& weights, int64_t num_pages,
                                            std::string* skip, int64_t max_attention_splits = 0) {
  absl::StatusOr<std::vector<uint8_t>> bundle = codegen::spirv::GenerateVulkanKernels(plan);
  EXPECT_TRUE(bundle.ok()) << bundle.status();
  if (!bundle.ok()) return nullptr;
  vulkan::VulkanExecutorOptions options;
  options.num_pages = num_pages;
  options.poison_arena = true;
  options.max_attention_splits = max_attention_splits;
  absl::StatusOr<std::unique_ptr<Executor>> ex = vulkan::CreateVulkanExecutor(plan, weights, *bundle, options);
  if (!ex.ok() && absl::IsUnavailable(ex.status())) {
    *skip = std::string(ex.status().message());
    return nullptr;
  }
  EXPECT_TRUE(ex.ok()) << ex.status();
  return ex.ok() ? *std::move(ex) : nullptr;
}

}  // namespace kiln::testing

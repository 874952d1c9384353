// Small hand-written plans for checking CUDA kernels one op at a time
// against the CPU executor: activations come from embedding launches over
// random f32 tables (exact on both backends), weights are random values
// quantised to the storage under test, and any arena region can be made the
// plan's result, so one compiled kernels section serves every region.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/executor/executor.h"
#include "tests/test_support.h"
#include "runtime/executor/plan.h"
#include "runtime/formats/quant.h"

namespace kiln::testing {

class SingleOpPlan {
 public:
  SingleOpPlan(std::vector<int64_t> buckets, PlanPagePool pool, uint32_t seed)
      : buckets_(std::move(buckets)), pool_(pool), rng_(seed) {}

  // A region of max-bucket rows of `width` floats; its offset in every bucket.
  int64_t Region(int64_t width) {
    const int64_t at = arena_;
    arena_ += (buckets_.back() * width * 4 + 255) / 256 * 256;
    return at;
  }
  // A random weight of `shape` stored as `storage` (values N(0, scale)).
  // With `one_row`, only row 0 is drawn and every row repeats it (large
  // weights for timing, where values do not matter and quantising all rows
  // on the host would take minutes).
  void Weight(const std::string& name, const std::string& storage, std::vector<int64_t> shape, float scale = 0.5f,
              bool one_row = false, float mean = 0.0f) {
    const cpu::WeightStorage s = *cpu::ParseWeightStorage(shape.size() == 1 ? "f32" : storage);
    const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
    std::normal_distribution<float> normal(mean, scale);
    const int64_t drawn = one_row ? 1 : rows;
    std::vector<float> values(drawn * cols);
    for (float& v : values) v = normal(rng_);
    if (shape.size() == 1) {
      for (float& v : values) v += 1.0f;  // norm gains near 1
    }
    const uint64_t row_bytes = *s.RowBytes(cols);
    std::vector<uint8_t> bytes(row_bytes * rows);
    for (int64_t r = 0; r < drawn; ++r) {
      std::span<const float> src(values.data() + r * cols, cols);
      std::span<uint8_t> dst(bytes.data() + r * row_bytes, row_bytes);
      const absl::Status st = s.grouped ? QuantizeGrouped(*s.grouped, s.group, src, dst) : Quantize(s.ggml, src, dst);
      if (!st.ok()) std::abort();
    }
    for (int64_t r = drawn; r < rows; ++r) std::copy_n(bytes.begin(), row_bytes, bytes.begin() + r * row_bytes);
    weights_[name] = {s, std::move(bytes)};
    weight_json_.push_back(absl::StrCat(R"({"name": ")", name, R"(", "storage": ")", s.Name(), R"(", "shape": [)",
                                        absl::StrJoin(shape, ", "), "]}"));
  }
  // A weight in the plan only (for compiling kernels, which need no data).
  void DeclareWeight(const std::string& name, const std::string& storage, std::vector<int64_t> shape) {
    weight_json_.push_back(absl::StrCat(R"({"name": ")", name, R"(", "storage": ")", storage, R"(", "shape": [)",
                                        absl::StrJoin(shape, ", "), "]}"));
  }
  // An embedding launch writing rows of `width` random f32 values to a new region.
  int64_t Activation(int64_t width, int64_t vocab = 64, float scale = 1.0f) {
    const std::string table = absl::StrCat("act", activations_++);
    Weight(table, "f32", {vocab, width}, scale);
    const int64_t at = Region(width);
    Launch("embedding.f32", {WeightBinding("table", table), InputBinding("tokens", "tokens"), Arena("result", at)},
           absl::StrCat(R"({"vocab": )", vocab, R"(, "width": )", width, "}"));
    return at;
  }
  std::string Arena(const std::string& role, int64_t at) const {
    std::vector<int64_t> offsets(buckets_.size(), at);
    return absl::StrCat(R"({"role": ")", role, R"(", "arena": [)", absl::StrJoin(offsets, ", "), "]}");
  }
  static std::string WeightBinding(const std::string& role, const std::string& name) {
    return absl::StrCat(R"({"role": ")", role, R"(", "weight": ")", name, R"("})");
  }
  static std::string InputBinding(const std::string& role, const std::string& input) {
    return absl::StrCat(R"({"role": ")", role, R"(", "input": ")", input, R"("})");
  }
  void Launch(const std::string& kernel, const std::vector<std::string>& bindings, const std::string& constants) {
    launch_json_.push_back(absl::StrCat(R"({"kernel": ")", kernel, R"(", "bindings": [)", absl::StrJoin(bindings, ", "),
                                        R"(], "constants": )", constants, "}"));
  }

  // The plan whose result is `width` floats per row at `at`.
  Plan PlanWithResult(int64_t at, int64_t width) const {
    std::vector<int64_t> arena(buckets_.size(), std::max<int64_t>(arena_, 256));
    const std::string json = absl::StrCat(
        R"({"format": "kiln-plan-v1", "function": "step", "model": {"n_vocab": )", width, R"(}, "buckets": [)",
        absl::StrJoin(buckets_, ", "), R"(], "arena_bytes": [)", absl::StrJoin(arena, ", "), R"(], "results": [)",
        Arena("result0", at),
        R"(], "inputs": [{"role": "tokens", "kind": "tensor", "rank": 1}, {"role": "positions", "kind": "tensor", "rank": 1},)"
        R"( {"role": "query_starts", "kind": "tensor", "rank": 1}, {"role": "context_lens", "kind": "tensor", "rank": 1},)"
        R"( {"role": "block_tables", "kind": "tensor", "rank": 2}, {"role": "logit_rows", "kind": "tensor", "rank": 1},)"
        R"( {"role": "kv", "kind": "page_pool", "layers": )",
        pool_.layers, R"(, "kv_heads": )", pool_.kv_heads, R"(, "head_dim": )", pool_.head_dim, R"(, "page_size": )",
        pool_.page_size, R"(, "max_tokens": )", pool_.max_tokens, R"(, "kv_type": ")", pool_.f16 ? "f16" : "f32",
        R"("}], "weights": [)", absl::StrJoin(weight_json_, ", "), R"(], "launches": [)",
        absl::StrJoin(launch_json_, ", "), "]}");
    absl::StatusOr<Plan> plan = ParsePlan(json);
    if (!plan.ok()) {
      ADD_FAILURE() << plan.status() << "\n" << json;
      return Plan();
    }
    return *std::move(plan);
  }

  WeightSource Source() const {
    return [this](const std::string& name) -> absl::StatusOr<WeightBytes> {
      auto it = weights_.find(name);
      if (it == weights_.end()) return absl::NotFoundError(name);
      return WeightBytes{it->second.first, it->second.second};
    };
  }

 private:
  std::vector<int64_t> buckets_;
  PlanPagePool pool_;
  std::mt19937 rng_;
  int64_t arena_ = 0;
  int activations_ = 0;
  std::map<std::string, std::pair<cpu::WeightStorage, std::vector<uint8_t>>> weights_;
  std::vector<std::string> weight_json_, launch_json_;
};

// One sequence per entry of `lengths`, each a run of new tokens starting at
// `starts[s]`, pages given by `tables` (pages_per_seq columns).
inline StepBatch RaggedBatch(const std::vector<int32_t>& starts, const std::vector<int32_t>& lengths,
                             const std::vector<std::vector<int32_t>>& tables, int32_t vocab, uint32_t seed) {
  StepBatch b;
  std::mt19937 rng(seed);
  b.query_starts.push_back(0);
  b.pages_per_seq = static_cast<int32_t>(tables[0].size());
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int32_t i = 0; i < lengths[s]; ++i) {
      b.tokens.push_back(static_cast<int32_t>(rng() % vocab));
      b.positions.push_back(starts[s] + i);
    }
    b.query_starts.push_back(static_cast<int32_t>(b.tokens.size()));
    b.context_lens.push_back(starts[s] + lengths[s]);
    b.block_tables.insert(b.block_tables.end(), tables[s].begin(), tables[s].end());
  }
  for (int32_t r = 0; r < static_cast<int32_t>(b.tokens.size()); ++r) b.logit_rows.push_back(r);
  return b;
}

}  // namespace kiln::testing

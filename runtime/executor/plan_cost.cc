#include "runtime/executor/plan_cost.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "runtime/cpu/weight_storage.h"

namespace kiln {

double PlanCost::DecodeBytes(int64_t batch, int64_t context) const {
  return static_cast<double>(streamed_weight_bytes) +
         static_cast<double>(batch) * static_cast<double>(context) * static_cast<double>(kv_bytes_per_position);
}

double PlanCost::PrefillFlopsPerToken(int64_t position) const {
  // QK^T and PV: 2 FLOPs per multiply-add each, over `position` keys.
  return 2.0 * static_cast<double>(matmul_params) +
         4.0 * static_cast<double>(attention_width) * static_cast<double>(position);
}

absl::StatusOr<PlanCost> CostOfPlan(const Plan& plan) {
  // Weights that only an embedding launch reads are looked up, not streamed.
  std::set<std::string> lookup_only, matmul_read;
  for (const PlanLaunch& l : plan.launches) {
    for (const PlanBinding& b : l.bindings) {
      if (b.kind != PlanBinding::Kind::kWeight) continue;
      (l.op == "embedding" ? lookup_only : matmul_read).insert(b.name);
    }
  }
  PlanCost cost;
  std::map<std::string, int64_t> bytes_by_storage;
  for (const PlanWeight& w : plan.weights) {
    absl::StatusOr<cpu::WeightStorage> storage = cpu::ParseWeightStorage(w.storage);
    if (!storage.ok()) return absl::InvalidArgumentError(absl::StrCat("weight '", w.name, "': ", storage.status().message()));
    const int64_t rows = w.shape.size() == 2 ? w.shape[0] : 1;
    const int64_t cols = w.shape.back();
    const std::optional<uint64_t> row_bytes = storage->RowBytes(cols);
    if (!row_bytes) return absl::InvalidArgumentError(absl::StrCat("weight '", w.name, "': bad row size"));
    const int64_t bytes = static_cast<int64_t>(*row_bytes) * rows;
    cost.params += rows * cols;
    cost.weight_bytes += bytes;
    const bool streamed = matmul_read.count(w.name) > 0 || lookup_only.count(w.name) == 0;
    cost.streamed_weight_bytes += streamed ? bytes : static_cast<int64_t>(*row_bytes);
    if (matmul_read.count(w.name) > 0 && w.shape.size() == 2) {
      cost.matmul_params += rows * cols;
      bytes_by_storage[w.storage] += bytes;
    }
  }
  int64_t best = -1;
  for (const auto& [storage, bytes] : bytes_by_storage) {
    if (bytes > best) best = bytes, cost.dominant_storage = storage;
  }
  for (const PlanLaunch& l : plan.launches) {
    if (l.op != "paged_attention") continue;
    absl::StatusOr<int64_t> heads = l.Int("num_heads");
    absl::StatusOr<int64_t> dim = l.Int("head_dim");
    if (!heads.ok()) return heads.status();
    if (!dim.ok()) return dim.status();
    cost.attention_width += *heads * *dim;
  }
  cost.kv_bytes_per_position = plan.pool.bytes_per_token();
  return cost;
}

}  // namespace kiln

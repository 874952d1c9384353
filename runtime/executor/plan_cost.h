// What one step of a plan must move and compute, for rooflines: decode is
// bound by bytes (every weight once per step, plus the KV cache read), prefill
// by FLOPs (2 per parameter per token, plus causal attention).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/executor/plan.h"

namespace kiln {

struct PlanCost {
  int64_t params = 0;                // every weight element
  int64_t matmul_params = 0;         // weights that matmuls read (not the embedding table's lookup)
  int64_t weight_bytes = 0;          // every weight in its plan storage
  int64_t streamed_weight_bytes = 0; // read per decode step: all but the embedding table (one row of it)
  int64_t kv_bytes_per_position = 0; // K and V of every layer for one position (f32 pages)
  int64_t attention_width = 0;       // sum over attention launches of heads x head_dim
  std::string dominant_storage;      // the storage holding the most matmul weight bytes: "q4_k"

  // Bytes one decode step reads for `batch` sequences whose contexts hold
  // `context` positions each.
  double DecodeBytes(int64_t batch, int64_t context) const;
  // FLOPs of one prefill token at position `position` (attention over the positions before it).
  double PrefillFlopsPerToken(int64_t position) const;
};

absl::StatusOr<PlanCost> CostOfPlan(const Plan& plan);

}  // namespace kiln

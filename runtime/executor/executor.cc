#include "runtime/executor/executor.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace kiln {

int64_t Executor::n_vocab() const {
  const JsonValue* vocab = plan().model.Find("n_vocab");
  return vocab != nullptr && vocab->int_value() ? *vocab->int_value() : 0;
}

absl::StatusOr<std::span<const int32_t>> Executor::StepGreedy(const StepBatch& batch) {
  absl::StatusOr<std::span<const float>> logits = Step(batch);
  if (!logits.ok()) return logits.status();
  const int64_t vocab = n_vocab();
  greedy_.resize(batch.logit_rows.size());
  for (size_t r = 0; r < greedy_.size(); ++r) {
    const float* row = logits->data() + r * vocab;
    greedy_[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
  return std::span<const int32_t>(greedy_);
}

absl::StatusOr<std::vector<KernelTime>> Executor::ProfileStep(const StepBatch&) {
  return absl::UnimplementedError(absl::StrFormat(
      "%s has no per-kernel step profile (the cpu and vulkan backends have; profile the cuda backend with ncu)",
      Describe()));
}

absl::StatusOr<int64_t> KvPagesForFreeMemory(uint64_t free_bytes, double fraction, uint64_t page_bytes,
                                             int64_t max_pages, std::string_view memory) {
  if (!(fraction > 0 && fraction <= 1) || page_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("KV pool: fraction %g of %s is not in (0, 1]", fraction, memory));
  }
  int64_t pages = static_cast<int64_t>(static_cast<double>(free_bytes) * fraction / static_cast<double>(page_bytes));
  if (max_pages > 0) pages = std::min(pages, max_pages);
  if (pages < 1) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV pool: %.0f%% of the %.1f MiB of %s is less than one page (%.2f MiB); give the pool a size "
        "(--kv-memory MIB) or free memory",
        fraction * 100, free_bytes / 1048576.0, memory, page_bytes / 1048576.0));
  }
  return pages;
}

std::string Executor::BackendName() const {
  const std::string d = Describe();
  return d.substr(0, d.find(' '));
}

absl::StatusOr<size_t> ValidateStepBatch(const Plan& plan, int64_t num_pages, const StepBatch& batch) {
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  const int64_t S = static_cast<int64_t>(batch.context_lens.size());
  if (T == 0) return absl::InvalidArgumentError("step: no tokens");
  const std::optional<size_t> bucket = plan.BucketFor(T);
  if (!bucket) {
    return absl::InvalidArgumentError(absl::StrFormat("step: %d tokens exceed the largest planned batch of %d", T,
                                                      plan.buckets.back()));
  }
  if (static_cast<int64_t>(batch.positions.size()) != T || static_cast<int64_t>(batch.query_starts.size()) != S + 1 ||
      static_cast<int64_t>(batch.block_tables.size()) != S * batch.pages_per_seq || batch.logit_rows.empty() ||
      static_cast<int64_t>(batch.logit_rows.size()) > T || batch.query_starts.front() != 0 ||
      batch.query_starts.back() != T) {
    return absl::InvalidArgumentError("step: the batch's arrays disagree in size");
  }
  for (int64_t s = 0; s < S; ++s) {
    if (batch.query_starts[s + 1] < batch.query_starts[s] ||
        batch.context_lens[s] > batch.pages_per_seq * plan.pool.page_size ||
        batch.context_lens[s] > plan.pool.max_tokens) {
      return absl::OutOfRangeError(absl::StrFormat("step: sequence %d needs %d positions; its block table holds %d",
                                                   s, batch.context_lens[s], batch.pages_per_seq * plan.pool.page_size));
    }
    for (int32_t t = batch.query_starts[s]; t < batch.query_starts[s + 1]; ++t) {
      if (batch.positions[t] < 0 || batch.positions[t] >= batch.context_lens[s]) {
        return absl::OutOfRangeError(absl::StrFormat("step: token %d at position %d outside sequence %d's %d positions",
                                                     t, batch.positions[t], s, batch.context_lens[s]));
      }
      // The GPU attention kernels find a sequence's rows of this step by
      // position (the first token's position onwards).
      if (t > batch.query_starts[s] && batch.positions[t] != batch.positions[t - 1] + 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("step: sequence %d's tokens %d and %d are at positions %d and %d; a sequence's tokens in "
                            "a step take consecutive positions",
                            s, t - 1, t, batch.positions[t - 1], batch.positions[t]));
      }
    }
  }
  for (int32_t page : batch.block_tables) {
    if (page < 0 || page >= num_pages) {
      return absl::OutOfRangeError(absl::StrFormat("step: page %d outside the pool of %d pages", page, num_pages));
    }
  }
  for (int32_t r : batch.logit_rows) {
    if (r < 0 || r >= T) return absl::OutOfRangeError(absl::StrFormat("step: logit row %d outside %d tokens", r, T));
  }
  return *bucket;
}

}  // namespace kiln

#include "runtime/serving/verify_budget.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kiln {

absl::StatusOr<VerifyBudget> MeasureVerifyBudget(Executor& executor, KvPageManager& pages, int64_t max_tokens,
                                                 double tolerance, int repeats) {
  max_tokens = std::min(max_tokens, executor.max_step_tokens());
  max_tokens = std::min(max_tokens, executor.plan().pool.max_tokens);
  if (max_tokens < 1) return absl::InvalidArgumentError("verify budget: no step size to measure");
  const int64_t vocab = std::max<int64_t>(executor.n_vocab(), 1);
  // An id no request gets (the scheduler counts from 1).
  constexpr KvPageManager::SeqId kScratch = std::numeric_limits<KvPageManager::SeqId>::min();
  VerifyBudget out;
  int64_t largest = 1;
  while (largest * 2 <= max_tokens) largest *= 2;
  if (absl::Status s = pages.Allocate(kScratch, largest); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("verify budget: no pages to measure with: ", s.message()));
  }
  const std::span<const int32_t> table = pages.BlockTable(kScratch);
  absl::Status failed;
  for (int64_t t = 1; t <= largest && failed.ok(); t *= 2) {
    StepBatch batch;
    for (int64_t i = 0; i < t; ++i) {
      batch.tokens.push_back(static_cast<int32_t>((i * 7 + 1) % vocab));
      batch.positions.push_back(static_cast<int32_t>(i));
    }
    batch.query_starts = {0, static_cast<int32_t>(t)};
    batch.context_lens = {static_cast<int32_t>(t)};
    batch.block_tables.assign(table.begin(), table.end());
    batch.pages_per_seq = static_cast<int32_t>(table.size());
    batch.logit_rows.resize(t);  // a verify step wants every row
    for (int64_t i = 0; i < t; ++i) batch.logit_rows[i] = static_cast<int32_t>(i);
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r <= repeats; ++r) {  // the first run warms up
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::span<const float>> logits = executor.Step(batch);
      if (!logits.ok()) {
        failed = logits.status();
        break;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (r > 0) best = std::min(best, s);
    }
    if (failed.ok()) out.timings.push_back({t, best});
  }
  (void)pages.Free(kScratch);
  if (!failed.ok()) return absl::Status(failed.code(), absl::StrCat("verify budget: ", failed.message()));
  for (const StepTiming& timing : out.timings) {
    if (timing.seconds <= tolerance * out.timings.front().seconds) out.tokens = timing.tokens;
    else break;
  }
  return out;
}

}  // namespace kiln

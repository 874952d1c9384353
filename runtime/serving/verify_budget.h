// Measures how many tokens one step can take before it stops costing the same
// as a one-token step: the scheduler's verify budget (SchedulerOptions::
// verify_budget), below which drafted tokens are verified about for free.
// Decode steps are memory-bound (their time is reading the weights) up to some
// token count and compute-bound past it; where that knee lies depends on the
// device and the model (on the 2-core CPU of the dev box it is ~4 tokens for
// SmolLM2-135M), so `kiln serve` measures it at startup.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/executor.h"
#include "runtime/serving/kv_page_manager.h"

namespace kiln {

struct StepTiming {
  int64_t tokens = 0;
  double seconds = 0;  // fastest of the repeats
};

struct VerifyBudget {
  int64_t tokens = 1;  // the largest step size within the tolerance
  std::vector<StepTiming> timings;
};

// Times steps of 1, 2, 4, ... tokens (up to `max_tokens`) of one scratch
// sequence on pages borrowed from `pages` (and given back; call it before
// serving starts), the fastest of `repeats` each, and returns the largest
// size whose step takes at most `tolerance` times a one-token step.
absl::StatusOr<VerifyBudget> MeasureVerifyBudget(Executor& executor, KvPageManager& pages, int64_t max_tokens,
                                                 double tolerance = 1.3, int repeats = 3);

}  // namespace kiln

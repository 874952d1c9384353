// Where the scheduler's speculative sequences get their drafts: once per
// step, for all of them together, so a draft model runs its k steps for the
// whole batch at once instead of once per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/speculative.h"
#include "runtime/sampler/sampler.h"

namespace kiln {

// One sequence's request for a draft: up to `k` tokens to follow `tokens`
// (prompt and generated so far; the last one is not in the target's KV yet).
struct DraftWant {
  int64_t seq = 0;  // the scheduler's id
  std::span<const int32_t> tokens;
  int k = 0;
  // The request's sampling: temperature 0 drafts greedily, otherwise the
  // draft samples and reports q for the rejection rule.
  const SamplingParams* sampling = nullptr;
};

class StepDrafter {
 public:
  virtual ~StepDrafter() = default;
  // One draft per want, in order; a draft may be shorter than asked (empty:
  // nothing to propose this step).
  virtual absl::StatusOr<std::vector<Draft>> Propose(std::span<const DraftWant> wants) = 0;
  // After verification: the sequence's first `kept` tokens are final (the
  // tokens it was last proposed on plus the accepted drafts); a drafter with
  // a KV cache truncates its copy to them.
  virtual void Commit(int64_t seq, int64_t kept) {}
  // The sequence finished or was preempted: drop what is held for it.
  virtual void Release(int64_t seq) {}
  // "ngram-lookup" or "draft-model", for messages and /metrics.
  virtual std::string name() const = 0;
};

// Prompt lookup (NgramLookupDraft) for every sequence: no model, no state.
class LookupStepDrafter : public StepDrafter {
 public:
  absl::StatusOr<std::vector<Draft>> Propose(std::span<const DraftWant> wants) override;
  std::string name() const override { return "ngram-lookup"; }

 private:
  NgramLookupDraft lookup_;
};

}  // namespace kiln

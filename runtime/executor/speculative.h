// Speculative decoding for one sequence: a draft source proposes k tokens,
// the target verifies them all in one step over k+1 tokens, and the
// accepted prefix plus the target's own next token are kept. Greedy output
// is exactly plain greedy decoding; sampled output follows the target's
// distribution exactly (the standard rejection rule: accept a drafted x with
// probability min(1, p(x)/q(x)), else draw from the normalised max(0, p - q)).
// Rejected positions need no copy: the next step writes over them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/generator.h"
#include "runtime/sampler/sampler.h"

namespace kiln {

// A proposal: the drafted tokens and, per token, the distribution it was
// drawn from (q), as [k][n_vocab] probabilities; a deterministic source
// leaves `q` empty (a point mass on each drafted token).
struct Draft {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> q;
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Up to `k` tokens to follow `seq` (the sequence so far, prompt included).
  virtual absl::StatusOr<Draft> Propose(std::span<const int32_t> seq, int k) = 0;
  // The first `kept` tokens of `seq` as last proposed on are final: a source
  // with state rolls back to them.
  virtual void Commit(int64_t kept) {}
};

// Prompt lookup decoding: the continuation of the latest earlier occurrence
// of the longest suffix (up to max_ngram tokens) of the sequence.
class NgramLookupDraft : public DraftSource {
 public:
  explicit NgramLookupDraft(int max_ngram = 3, int min_ngram = 1) : max_ngram_(max_ngram), min_ngram_(min_ngram) {}
  absl::StatusOr<Draft> Propose(std::span<const int32_t> seq, int k) override;

 private:
  int max_ngram_, min_ngram_;
};

// A smaller model with the same vocabulary, run autoregressively on its own
// executor (its own paged KV cache). Greedy when `sampling.temperature` is
// 0, else it samples and reports q.
class DraftModel : public DraftSource {
 public:
  DraftModel(Executor& executor, const SamplingParams& sampling) : executor_(executor), sampling_(sampling) {}
  absl::StatusOr<Draft> Propose(std::span<const int32_t> seq, int k) override;
  void Commit(int64_t kept) override;

 private:
  Executor& executor_;
  SamplingParams sampling_;
  uint64_t draws_ = 0;
  int64_t cached_ = 0;  // tokens of the sequence in the draft's KV cache
  std::vector<int32_t> fed_;  // what the cache holds
};

struct SpeculativeOptions {
  GenerateOptions generate;
  int draft_max = 8;  // k adapts between 1 and this from the recent acceptance
};

struct SpeculativeStats {
  int64_t steps = 0;     // target verification steps
  int64_t drafted = 0;   // tokens proposed
  int64_t accepted = 0;  // proposed tokens kept
  double mean_accepted_length() const { return steps ? double(accepted) / steps : 0; }
  double acceptance_rate() const { return drafted ? double(accepted) / drafted : 0; }
};

struct SpeculativeResult {
  GenerateResult result;
  SpeculativeStats stats;
};

absl::StatusOr<SpeculativeResult> GenerateSpeculative(Executor& target, DraftSource& draft,
                                                      std::span<const int32_t> prompt,
                                                      const SpeculativeOptions& options,
                                                      const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace kiln

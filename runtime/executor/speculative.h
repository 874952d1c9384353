// Speculative decoding for one sequence: a draft source proposes k tokens,
// the target verifies them all in one step over k+1 tokens, and the
// accepted prefix plus the target's own next token are kept. Greedy output
// is exactly plain greedy decoding; sampled output follows the target's
// distribution exactly (the standard rejection rule: accept a drafted x with
// probability min(1, p(x)/q(x)), else draw from the normalised max(0, p - q)).
// Rejected positions need no copy: the next step writes over them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
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

// A draft source's choice of its next token from its own logits: the greedy
// token for temperature 0, else a draw whose distribution is appended to `q`
// (what the rejection rule needs). `sampler` accepts the token.
absl::StatusOr<int32_t> ChooseDraftToken(Sampler& sampler, std::span<const float> logits, std::mt19937_64& rng,
                                         std::vector<std::vector<float>>& q);

// The target's verdict on one draft: the drafted tokens it keeps, then its
// own token after them (the correction where it rejected one, else the
// bonus token after a fully accepted draft).
struct Verdict {
  int accepted = 0;
  std::vector<SampledToken> tokens;  // accepted + 1 of them
};

// Judges `draft` with the target's logits `rows`, [draft.tokens.size() + 1,
// vocab]: row i is the target's distribution of the token after the i-th
// drafted one (row 0: after the sequence so far). With temperature 0 a
// drafted token is kept when it is the target's own greedy choice (so the
// output is exactly plain greedy decoding); otherwise the rejection rule
// above, with `rng` for its coins and residual draws. `sampler` has seen the
// sequence so far and accepts every kept token. Logprobs (`top_logprobs`
// other than kNoLogprobs) are reported for greedy sampling only; a sampled
// request that asks for them is an InvalidArgument error (callers do not
// speculate for it).
absl::StatusOr<Verdict> VerifyDraft(Sampler& sampler, const Draft& draft, std::span<const float> rows,
                                    int64_t vocab, std::mt19937_64& rng,
                                    int top_logprobs = Sampler::kNoLogprobs);

// The adaptive draft length: one longer after a fully accepted draft (up to
// `draft_max`), else one past what was accepted, so k follows the recent
// acceptance run length.
inline int NextDraftLength(int k, int drafted, int accepted, int draft_max) {
  return accepted == drafted ? std::min(k + 1, draft_max) : std::max(1, accepted + 1);
}

// Whether drafting still pays, from measured wall time: the tokens per
// second of recent drafted cycles (the draft's proposal and the verify step,
// accepted + 1 tokens each) against recent plain steps. A draft whose steps
// cost nearly a target step (two latency-bound models on a GPU) makes
// speculation slower than plain decoding; then plain steps run, with a
// drafted probe after kProbeEvery of them in case the text turns
// predictable (the interval doubling, up to kMaxProbeEvery, after each probe
// that does not pay: a probe costs about as much as it saves). The first
// drafted cycle after plain steps is not measured: the draft model catches
// up on the tokens it missed (the prompt, the first time), a cost steady
// drafting does not pay. Only greedy decoding consults the gate: its output
// does not depend on when it drafts; a seeded sampled output would then
// depend on timing.
class DraftGate {
 public:
  static constexpr int kWarmup = 3, kProbeEvery = 16, kMaxProbeEvery = 256;
  static constexpr double kMargin = 0.95;
  static constexpr int kMeasureLength = 2;
  // A plain step (no draft) took `seconds`.
  void ObservePlain(double seconds);
  // A drafted cycle gave `tokens` in `seconds`.
  void ObserveDrafted(int tokens, double seconds);
  // Whether the next cycle drafts: never before a plain step is measured;
  // until kWarmup drafted cycles are measured; after an unmeasured one (so a
  // probe measures one); while drafting gives at least kMargin of plain
  // steps' tokens per second; else after the probe interval of plain steps.
  bool DraftNext() const;
  // The longest draft worth its cost now: kMeasureLength while the gate is
  // only measuring (warm-up, a probe), so measuring a draft that does not
  // pay costs little; else unbounded (the acceptance rule chooses).
  int MaxDraftLength() const;

 private:
  // Drafted cycles give at least kMargin of plain steps' tokens per second
  // (tokens / drafted seconds >= kMargin / plain seconds): one slow cycle on
  // a loaded machine does not switch drafting off.
  bool Pays() const;
  // Moving averages with weight 1/4 for the newest observation.
  double plain_seconds_ = 0, drafted_tokens_ = 0, drafted_seconds_ = 0;
  int plain_seen_ = 0, drafted_seen_ = 0, plain_since_probe_ = 0, drafted_since_plain_ = 0;
  int probe_every_ = kProbeEvery;
};

struct SpeculativeOptions {
  GenerateOptions generate;
  int draft_max = 8;  // k adapts between 1 and this from the recent acceptance
};

struct SpeculativeStats {
  int64_t steps = 0;        // target steps after the first token
  int64_t plain_steps = 0;  // of them, undrafted because drafting did not pay (DraftGate)
  int64_t drafted = 0;      // tokens proposed
  int64_t accepted = 0;     // proposed tokens kept
  // Accepted tokens per drafted verification.
  double mean_accepted_length() const {
    return steps > plain_steps ? double(accepted) / static_cast<double>(steps - plain_steps) : 0;
  }
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

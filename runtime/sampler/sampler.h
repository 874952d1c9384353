// Picks the next token of one sequence from one row of logits.
//
//   absl::StatusOr<Sampler> sampler = Sampler::Create({.temperature = 0.7f, .seed = 42});
//   sampler->Accept(prompt_ids);                       // penalties see the prompt
//   absl::StatusOr<SampledToken> next = sampler->Sample(logits_row);
//
// One Sampler per sequence: it owns the sequence's token history and its
// random generator, so sequences of a batch sample independently and a
// sequence replays identically from the same seed.
//
// The chain is llama.cpp's default order:
//   penalties -> top-k -> top-p -> min-p -> temperature -> draw.
// Truncation therefore looks at the temperature-1 distribution and
// temperature only reshapes what survives; that is what llama.cpp (the
// oracle of the goldens) and its users expect. Temperature 0 is greedy: the
// argmax of the penalised logits (the filters always keep the argmax, so they
// are skipped), lowest id first on exact ties.
//
// Non-finite logits, handled the same way everywhere: NaN counts as -inf; a
// -inf token is never picked; if any logit is +inf, only the +inf tokens
// stay, with equal weight (greedy: the lowest such id). A row with no finite
// logit and no +inf is an InvalidArgument error.
//
// Determinism: the generator is std::mt19937_64 (its output is fixed by the
// C++ standard) and uniform doubles are taken from its top 53 bits, so the
// same seed, history and logits give the same tokens on every platform;
// the weights come from kiln's own float exp (sampler.cc), so not even the
// math library can move a draw (a compiler contracting its multiply-adds
// into FMAs, which the baseline x86-64 build does not, could near a boundary).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

// Defaults are llama.cpp's (common_params_sampling), with penalties off.
struct SamplingParams {
  // 0 = greedy. Must be >= 0.
  float temperature = 0.8f;
  // Keep the k most likely tokens; 0 = off. Must be >= 0.
  int32_t top_k = 40;
  // Keep the smallest most-likely set whose probability reaches top_p; 1 = off.
  // Must be in (0, 1].
  float top_p = 0.95f;
  // Drop tokens whose probability is below min_p times the top probability;
  // 0 = off. Must be in [0, 1].
  float min_p = 0.05f;
  // Each truncating filter keeps at least this many tokens (and always >= 1).
  int32_t min_keep = 0;

  // Over the last penalty_last_n tokens of the history (-1 = all of it,
  // 0 = none), a token seen `count` times gets: logit > 0 ? logit / repetition
  // : logit * repetition; then logit -= count * frequency + presence.
  float repetition_penalty = 1.0f;  // must be > 0; 1 = off
  float frequency_penalty = 0.0f;   // must be finite; 0 = off
  float presence_penalty = 0.0f;    // must be finite; 0 = off
  int32_t penalty_last_n = 64;      // must be >= -1

  uint64_t seed = 0;
};

// OK, or InvalidArgument naming the first bad parameter and its value.
absl::Status ValidateSamplingParams(const SamplingParams& params);

struct TokenProbability {
  int32_t token;
  float probability;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampledToken {
  int32_t token = -1;
  // Probability of `token` in the distribution it was drawn from (after
  // penalties, filters and temperature); 1 for greedy.
  float probability = 0.0f;
  // Present when logprobs were asked for. They are the log-softmax of the
  // logits as given (the model's own distribution, before penalties, filters
  // and temperature), which is what OpenAI's `logprobs` and llama.cpp's server
  // report.
  std::optional<float> logprob;
  // The most likely tokens under that same distribution, most likely first,
  // lowest id first on ties.
  std::vector<TokenLogprob> top_logprobs;
};

class Sampler {
 public:
  // Sample() without logprobs.
  static constexpr int kNoLogprobs = -1;

  static absl::StatusOr<Sampler> Create(const SamplingParams& params);

  const SamplingParams& params() const { return params_; }
  // Every accepted token, oldest first.
  const std::vector<int32_t>& history() const { return history_; }

  // Appends to the history the penalties look at: the prompt, then each
  // token the sequence keeps. Sample() accepts its own token; ids outside
  // the logits row are kept but never penalised.
  void Accept(int32_t token) { history_.push_back(token); }
  void Accept(std::span<const int32_t> tokens) {
    history_.insert(history_.end(), tokens.begin(), tokens.end());
  }

  // True when Sample() picks the argmax of the logits as given (greedy, no
  // penalty): a backend may then pick the token itself (Executor::StepGreedy).
  bool IsPlainArgmax() const {
    return params_.temperature == 0.0f && params_.repetition_penalty == 1.0f && params_.frequency_penalty == 0.0f &&
           params_.presence_penalty == 0.0f;
  }
  // Accepts `token`, picked as that argmax elsewhere, as Sample() would have.
  SampledToken AcceptArgmax(int32_t token) {
    Accept(token);
    SampledToken t;
    t.token = token;
    t.probability = 1.0f;
    return t;
  }

  // The distribution the next token would be drawn from: every token with a
  // non-zero probability, in unspecified order. Neither draws nor accepts
  // (speculative verification compares such distributions).
  absl::StatusOr<std::vector<TokenProbability>> Distribution(std::span<const float> logits);

  // Draws the next token and accepts it. `top_logprobs`: kNoLogprobs, or how
  // many most-likely tokens to list besides the chosen token's logprob
  // (0 = only the chosen token's).
  absl::StatusOr<SampledToken> Sample(std::span<const float> logits,
                                      int top_logprobs = kNoLogprobs);

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };
  // Larger logit first; lowest id first on exact ties, so every ordering (and
  // hence every truncation) is the same on every run.
  struct BetterFirst {
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    }
  };

  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

  // Runs the chain up to (not including) the draw: fills candidates_ with
  // the surviving tokens (or, with no filter, sets dense_: every token in id
  // order) and weights_ with their unnormalised probabilities; returns the
  // sum of weights_.
  absl::StatusOr<double> BuildDistribution(std::span<const float> logits);
  // weights_[i] = exp((logit_at(i) - max_logit) / temperature) for i < n;
  // returns their sum.
  template <class LogitAt>
  double Weigh(LogitAt logit_at, size_t n, float max_logit);
  size_t NumCandidates() const { return dense_ ? weights_.size() : candidates_.size(); }
  int32_t CandidateId(size_t i) const { return dense_ ? static_cast<int32_t>(i) : candidates_[i].id; }
  // working_logits_ = logits with NaN -> -inf, penalties applied, and the
  // +inf rule applied.
  void LoadWorkingLogits(std::span<const float> logits);
  // Applies the penalties to working_logits_; returns whether that
  // overflowed a logit to +inf.
  bool ApplyPenalties();
  // candidates_ = the best k tokens of `logits`, best first.
  void SelectBest(const std::vector<float>& logits, size_t k);
  // Both take the largest logit among the candidates.
  void ApplyTopP(size_t keep_floor, float max_logit);
  void ApplyMinP(size_t keep_floor, float max_logit);
  // Ensures candidates_[0, n) hold the n best candidates in order.
  void SortPrefix(size_t n);
  double DrawUniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;

  // Scratch reused across calls, so a decode step allocates nothing.
  std::vector<float> working_logits_;
  std::vector<int32_t> window_counts_;  // all zero between calls
  std::vector<Candidate> candidates_;
  size_t sorted_prefix_ = 0;  // candidates_[0, sorted_prefix_) are the best, in order
  bool dense_ = false;        // the candidates are all tokens in id order (candidates_ unused)
  std::vector<float> weights_;  // float: ExpNonPositive's precision; sums are in double
};

}  // namespace kiln

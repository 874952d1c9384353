#include "runtime/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// out = in with NaN -> -inf; returns whether any value is +inf. One pass
// the compiler can vectorise.
bool CopySanitized(std::span<const float> in, std::vector<float>& out) {
  out.resize(in.size());
  bool any_positive_inf = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const float logit = in[i];
    out[i] = std::isnan(logit) ? -kInf : logit;
    any_positive_inf |= logit == kInf;
  }
  return any_positive_inf;
}

// The +inf rule: +inf tokens share all the mass equally, the rest get none.
void KeepOnlyPositiveInf(std::vector<float>& logits) {
  for (float& logit : logits) logit = logit == kInf ? 0.0f : -kInf;
}

// Index of the largest value (no NaN inside), the lowest index among exact
// ties. A max reduction, then a search: eight independent running maxima
// let the compiler vectorise the reduction, which a single one (a
// loop-carried dependency on a non-associative float select) would not.
size_t ArgMax(const std::vector<float>& logits) {
  constexpr size_t kLanes = 8;
  float lane_best[kLanes];
  std::fill(lane_best, lane_best + kLanes, -kInf);
  size_t i = 0;
  for (; i + kLanes <= logits.size(); i += kLanes) {
    for (size_t lane = 0; lane < kLanes; ++lane) {
      const float logit = logits[i + lane];
      lane_best[lane] = logit > lane_best[lane] ? logit : lane_best[lane];
    }
  }
  float best = -kInf;
  for (; i < logits.size(); ++i) best = std::max(best, logits[i]);
  for (float lane : lane_best) best = std::max(best, lane);
  return static_cast<size_t>(std::find(logits.begin(), logits.end(), best) - logits.begin());
}

// exp(x) for x <= 0 to about float precision, 0 below -87 (weights under
// 1e-38 of the best token's, never drawn). Plain float arithmetic the
// compiler vectorises: std::exp in double made a 128256-logit row cost 0.91
// ms to sample on the build machine and 1.9 ms on the H200's host, half a
// GPU decode step (with this: 0.57 and 1.0 ms; with float weights and no
// candidate copy when nothing is filtered, 0.26 ms on the build machine).
// exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2.
inline float ExpNonPositive(float x) {
  const float clamped = x < -87.0f ? -87.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (clamped * 1.44269504088896341f + kRound) - kRound;
  // r = x - n ln 2 with ln 2 in two parts, so n * ln2_hi is exact.
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.0f ? 0.0f : p * scale;
}

absl::Status BadParam(const char* name, const char* rule, double value) {
  return absl::InvalidArgumentError(absl::StrCat("sampling parameter ", name, " must be ", rule,
                                                 ", got ", value));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  // Written as !(good) so that NaN fails every check.
  if (!(p.temperature >= 0.0f && std::isfinite(p.temperature))) {
    return BadParam("temperature", "finite and >= 0", p.temperature);
  }
  if (p.top_k < 0) return BadParam("top_k", ">= 0", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return BadParam("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return BadParam("min_p", "in [0, 1]", p.min_p);
  if (p.min_keep < 0) return BadParam("min_keep", ">= 0", p.min_keep);
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return BadParam("repetition_penalty", "finite and > 0", p.repetition_penalty);
  }
  if (!std::isfinite(p.frequency_penalty)) {
    return BadParam("frequency_penalty", "finite", p.frequency_penalty);
  }
  if (!std::isfinite(p.presence_penalty)) {
    return BadParam("presence_penalty", "finite", p.presence_penalty);
  }
  if (p.penalty_last_n < -1) return BadParam("penalty_last_n", ">= -1", p.penalty_last_n);
  return absl::OkStatus();
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params) {
  if (absl::Status status = ValidateSamplingParams(params); !status.ok()) return status;
  return Sampler(params);
}

bool Sampler::ApplyPenalties() {
  const SamplingParams& p = params_;
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) {
    return false;
  }
  const size_t window = p.penalty_last_n < 0
                            ? history_.size()
                            : std::min(history_.size(), static_cast<size_t>(p.penalty_last_n));
  if (window == 0) return false;
  const std::span<const int32_t> recent(history_.data() + history_.size() - window, window);
  const int64_t n_vocab = static_cast<int64_t>(working_logits_.size());
  // Counting in a vocabulary-sized table (zeroed again below) keeps this
  // O(window) with no sort and no hashing.
  window_counts_.resize(working_logits_.size(), 0);
  for (int32_t token : recent) {
    if (token >= 0 && token < n_vocab) ++window_counts_[token];
  }
  bool made_positive_inf = false;
  for (int32_t token : recent) {
    if (token < 0 || token >= n_vocab || window_counts_[token] == 0) continue;
    const int32_t count = window_counts_[token];
    window_counts_[token] = 0;
    float& logit = working_logits_[token];
    // llama.cpp's rule: dividing a negative logit would raise it.
    if (logit <= 0.0f) {
      logit *= p.repetition_penalty;
    } else {
      logit /= p.repetition_penalty;
    }
    logit -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
    // A huge finite logit can overflow here.
    made_positive_inf |= logit == kInf;
  }
  return made_positive_inf;
}

void Sampler::LoadWorkingLogits(std::span<const float> logits) {
  bool any_positive_inf = CopySanitized(logits, working_logits_);
  any_positive_inf |= ApplyPenalties();
  if (any_positive_inf) KeepOnlyPositiveInf(working_logits_);
}

void Sampler::SortPrefix(size_t n) {
  n = std::min(n, candidates_.size());
  if (n <= sorted_prefix_) return;
  // The prefix already holds the best, so the next ones come from the rest.
  const auto first = candidates_.begin() + static_cast<ptrdiff_t>(sorted_prefix_);
  const auto nth = candidates_.begin() + static_cast<ptrdiff_t>(n);
  std::nth_element(first, nth, candidates_.end(), BetterFirst());
  std::sort(first, nth, BetterFirst());
  sorted_prefix_ = n;
}

void Sampler::SelectBest(const std::vector<float>& logits, size_t k) {
  const BetterFirst better;
  // A heap of the best k so far with the worst of them on top: almost every
  // token loses to it in one comparison, so this is one pass for small k.
  candidates_.clear();
  const size_t n = logits.size();
  size_t i = 0;
  for (; i < n && candidates_.size() < k; ++i) {
    candidates_.push_back({logits[i], static_cast<int32_t>(i)});
    std::push_heap(candidates_.begin(), candidates_.end(), better);
  }
  for (; i < n; ++i) {
    const Candidate candidate{logits[i], static_cast<int32_t>(i)};
    if (!better(candidate, candidates_.front())) continue;
    std::pop_heap(candidates_.begin(), candidates_.end(), better);
    candidates_.back() = candidate;
    std::push_heap(candidates_.begin(), candidates_.end(), better);
  }
  std::sort_heap(candidates_.begin(), candidates_.end(), better);
  sorted_prefix_ = candidates_.size();
}

void Sampler::ApplyTopP(size_t keep_floor, float max_logit) {
  double total = 0.0;
  for (const Candidate& c : candidates_) total += std::exp(static_cast<double>(c.logit) - max_logit);
  const double target = static_cast<double>(params_.top_p) * total;

  // Sorts only as far as the nucleus reaches, in doubling chunks: a peaked
  // distribution over 150k tokens never pays for a full sort.
  double cumulative = 0.0;
  size_t i = 0;
  for (size_t chunk = 64; i < candidates_.size(); chunk *= 2) {
    SortPrefix(i + chunk);
    for (; i < sorted_prefix_; ++i) {
      cumulative += std::exp(static_cast<double>(candidates_[i].logit) - max_logit);
      if (cumulative >= target && i + 1 >= keep_floor) {
        candidates_.resize(i + 1);
        return;
      }
    }
  }
}

void Sampler::ApplyMinP(size_t keep_floor, float max_logit) {
  // p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p), as llama.cpp compares.
  const float min_logit = max_logit + std::log(params_.min_p);
  const auto below = [min_logit](const Candidate& c) { return c.logit < min_logit; };
  const size_t kept = candidates_.size() -
                      static_cast<size_t>(std::count_if(candidates_.begin(), candidates_.end(), below));
  if (kept >= keep_floor) {
    // remove_if keeps the order, and the dropped tokens are the worst ones,
    // so the sorted prefix stays sorted.
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(), below),
                      candidates_.end());
    sorted_prefix_ = std::min(sorted_prefix_, candidates_.size());
  } else {
    SortPrefix(keep_floor);
    candidates_.resize(std::min(keep_floor, candidates_.size()));
  }
}

absl::StatusOr<double> Sampler::BuildDistribution(std::span<const float> logits) {
  if (logits.empty()) return absl::InvalidArgumentError("sampler: the logits row is empty");
  LoadWorkingLogits(logits);
  candidates_.clear();
  dense_ = false;
  sorted_prefix_ = 0;  // weights_ is sized below (not cleared: its values are all rewritten)

  const size_t best = ArgMax(working_logits_);
  if (working_logits_[best] == -kInf) {
    return absl::InvalidArgumentError("sampler: every logit is NaN or -inf");
  }
  if (params_.temperature == 0.0f) {
    candidates_.push_back({working_logits_[best], static_cast<int32_t>(best)});
    weights_.assign(1, 1.0);
    return 1.0;
  }

  const size_t keep_floor = static_cast<size_t>(std::max(params_.min_keep, 1));
  const size_t top_k = std::max(static_cast<size_t>(params_.top_k), keep_floor);
  const bool takes_top_k = params_.top_k > 0 && top_k < working_logits_.size();
  // Every filter keeps the best token, so its logit stays the maximum.
  const float max_logit = working_logits_[best];
  if (!takes_top_k && params_.top_p >= 1.0f && params_.min_p <= 0.0f) {
    // No filter: every token is a candidate, in id order, weighed straight
    // from the logits (-inf ones weigh 0 and are never drawn), the same
    // draws as the candidate list gives without its copy.
    dense_ = true;
    return Weigh([&](size_t i) { return working_logits_[i]; }, working_logits_.size(), max_logit);
  }
  if (takes_top_k) {
    SelectBest(working_logits_, top_k);
  } else {
    // -inf tokens (masked, or NaN) could never be drawn.
    for (size_t i = 0; i < working_logits_.size(); ++i) {
      if (working_logits_[i] != -kInf) {
        candidates_.push_back({working_logits_[i], static_cast<int32_t>(i)});
      }
    }
  }
  if (params_.top_p < 1.0f) ApplyTopP(keep_floor, max_logit);
  if (params_.min_p > 0.0f) ApplyMinP(keep_floor, max_logit);
  return Weigh([&](size_t i) { return candidates_[i].logit; }, candidates_.size(), max_logit);
}

template <class LogitAt>
double Sampler::Weigh(LogitAt logit_at, size_t n, float max_logit) {
  // Far-below-max tokens underflow to weight 0; they are then never drawn.
  // A division, not a product with 1 / temperature: that overflows for a
  // tiny temperature and gives the best token 0 * inf = NaN.
  const float temperature = params_.temperature;
  weights_.resize(n);
  for (size_t i = 0; i < n; ++i) weights_[i] = ExpNonPositive((logit_at(i) - max_logit) / temperature);
  // Eight running sums (in double) so the compiler can vectorise the total.
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) lanes[l] += weights_[i + l];
  }
  double total = 0.0;
  for (; i < n; ++i) total += weights_[i];
  for (double lane : lanes) total += lane;
  return total;
}

double Sampler::DrawUniform() {
  // 53 random bits -> a double in [0, 1), exactly and identically everywhere
  // (std::uniform_real_distribution's algorithm is left to the library).
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

absl::StatusOr<std::vector<TokenProbability>> Sampler::Distribution(std::span<const float> logits) {
  absl::StatusOr<double> total = BuildDistribution(logits);
  if (!total.ok()) return total.status();
  std::vector<TokenProbability> distribution;
  for (size_t i = 0; i < NumCandidates(); ++i) {
    if (weights_[i] > 0.0) {
      distribution.push_back({CandidateId(i), static_cast<float>(weights_[i] / *total)});
    }
  }
  return distribution;
}

absl::StatusOr<SampledToken> Sampler::Sample(std::span<const float> logits, int top_logprobs) {
  if (top_logprobs < kNoLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: top_logprobs must be >= 0 (or kNoLogprobs), got ", top_logprobs));
  }
  absl::StatusOr<double> total = BuildDistribution(logits);
  if (!total.ok()) return total.status();

  size_t chosen = 0;
  const size_t candidates = NumCandidates();
  if (candidates > 1) {
    const double target = DrawUniform() * *total;
    double cumulative = 0.0;
    chosen = candidates;
    for (size_t i = 0; i < candidates; ++i) {
      cumulative += weights_[i];
      if (target < cumulative) {
        chosen = i;
        break;
      }
    }
    // Rounding can leave the target just past the last sum: take the last
    // token that can be drawn at all.
    if (chosen == candidates) {
      do {
        --chosen;
      } while (weights_[chosen] == 0.0);
    }
  }

  SampledToken result;
  result.token = CandidateId(chosen);
  result.probability = static_cast<float>(weights_[chosen] / *total);
  Accept(result.token);
  if (top_logprobs == kNoLogprobs) return result;

  // The model's own distribution: log-softmax of the logits as given, with
  // the same non-finite rules as sampling (NaN -> -inf; +inf tokens share
  // all the mass). working_logits_ is free again and holds them.
  double log_normaliser;
  if (CopySanitized(logits, working_logits_)) {
    KeepOnlyPositiveInf(working_logits_);
    const auto n_positive_inf = std::count(working_logits_.begin(), working_logits_.end(), 0.0f);
    log_normaliser = std::log(static_cast<double>(n_positive_inf));
  } else {
    const float max_logit = working_logits_[ArgMax(working_logits_)];
    double sum = 0.0;
    for (float logit : working_logits_) sum += std::exp(static_cast<double>(logit) - max_logit);
    log_normaliser = max_logit + std::log(sum);
  }
  const auto logprob_of = [&](float logit) {
    return static_cast<float>(static_cast<double>(logit) - log_normaliser);
  };
  result.logprob = logprob_of(working_logits_[result.token]);

  const size_t listed = std::min(static_cast<size_t>(top_logprobs), working_logits_.size());
  candidates_.clear();
  if (listed > 0) SelectBest(working_logits_, listed);
  result.top_logprobs.reserve(listed);
  for (size_t i = 0; i < listed; ++i) {
    result.top_logprobs.push_back({candidates_[i].id, logprob_of(candidates_[i].logit)});
  }
  return result;
}

}  // namespace kiln

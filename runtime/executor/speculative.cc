#include "runtime/executor/speculative.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>

#include "absl/strings/str_format.h"

namespace kiln {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Uniform in [0, 1) from the top 53 bits, the same on every platform.
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

int32_t DrawFrom(const std::vector<float>& p, std::mt19937_64& rng) {
  double total = 0;
  for (float x : p) total += x;
  double u = Uniform(rng) * total;
  int32_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    if (u < p[i]) return last;
    u -= p[i];
  }
  return last;  // rounding left u a hair above the total
}

absl::StatusOr<std::vector<float>> Dense(Sampler& sampler, std::span<const float> logits) {
  absl::StatusOr<std::vector<TokenProbability>> d = sampler.Distribution(logits);
  if (!d.ok()) return d.status();
  std::vector<float> p(logits.size(), 0.0f);
  for (const TokenProbability& t : *d) p[t.token] = t.probability;
  return p;
}

}  // namespace

absl::StatusOr<Draft> NgramLookupDraft::Propose(std::span<const int32_t> seq, int k) {
  Draft draft;
  const int64_t len = static_cast<int64_t>(seq.size());
  for (int n = max_ngram_; n >= min_ngram_ && k > 0; --n) {
    if (len <= n) continue;
    const std::span<const int32_t> suffix = seq.subspan(len - n, n);
    // The latest earlier occurrence that has something after it.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), seq.begin() + i)) continue;
      for (int64_t j = i + n; j < len && static_cast<int>(draft.tokens.size()) < k; ++j) {
        draft.tokens.push_back(seq[j]);
      }
      return draft;
    }
  }
  return draft;
}

absl::StatusOr<Draft> DraftModel::Propose(std::span<const int32_t> seq, int k) {
  Draft draft;
  if (k <= 0) return draft;
  const int64_t n = static_cast<int64_t>(seq.size());
  // Keep to the draft's own context.
  const int64_t room = std::min(executor_.num_pages() * executor_.page_size(), executor_.plan().pool.max_tokens) - n;
  k = static_cast<int>(std::min<int64_t>(k, room));
  if (k <= 0) return draft;
  SamplingParams params = sampling_;
  params.seed = sampling_.seed + 0x9e3779b97f4a7c15ull * ++draws_;
  absl::StatusOr<Sampler> sampler = Sampler::Create(params);
  if (!sampler.ok()) return sampler.status();
  sampler->Accept(seq);
  std::mt19937_64 rng(params.seed);

  std::vector<int32_t> ext(seq.begin(), seq.end());
  // Catch up on what the cache lacks (at least the sequence's last token),
  // then one token at a time.
  int64_t begin = std::min(cached_, n - 1);
  for (int j = 0; j < k; ++j) {
    const int64_t end = static_cast<int64_t>(ext.size());
    const int64_t chunk = executor_.max_step_tokens();
    absl::StatusOr<std::span<const float>> logits;
    for (int64_t b = begin; b < end; b += chunk) {
      const int64_t e = std::min(b + chunk, end);
      logits = StepSequence(executor_, ext, b, e, {static_cast<int32_t>(e - b - 1)});
      if (!logits.ok()) return logits.status();
    }
    absl::StatusOr<int32_t> token = ChooseDraftToken(*sampler, *logits, rng, draft.q);
    if (!token.ok()) return token.status();
    draft.tokens.push_back(*token);
    begin = end;
    ext.push_back(draft.tokens.back());
  }
  fed_.assign(ext.begin(), ext.end() - 1);  // the last draft token was never run
  cached_ = static_cast<int64_t>(fed_.size());
  return draft;
}

void DraftModel::Commit(int64_t kept) { cached_ = std::min(cached_, kept); }

absl::StatusOr<int32_t> ChooseDraftToken(Sampler& sampler, std::span<const float> logits, std::mt19937_64& rng,
                                         std::vector<std::vector<float>>& q) {
  if (sampler.params().temperature == 0) {
    absl::StatusOr<SampledToken> next = sampler.Sample(logits);
    if (!next.ok()) return next.status();
    return next->token;
  }
  // Draw from exactly the q that is reported to the verifier.
  absl::StatusOr<std::vector<float>> dense = Dense(sampler, logits);
  if (!dense.ok()) return dense.status();
  q.push_back(*std::move(dense));
  const int32_t token = DrawFrom(q.back(), rng);
  sampler.Accept(token);
  return token;
}

absl::StatusOr<Verdict> VerifyDraft(Sampler& sampler, const Draft& draft, std::span<const float> rows,
                                    int64_t vocab, std::mt19937_64& rng, int top_logprobs) {
  const int kd = static_cast<int>(draft.tokens.size());
  if (vocab <= 0 || rows.size() != static_cast<size_t>(kd + 1) * static_cast<size_t>(vocab)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "verify: %d logits for %d drafted tokens need %d rows of %d", rows.size(), kd, kd + 1, vocab));
  }
  if (!draft.q.empty() && static_cast<int>(draft.q.size()) != kd) {
    return absl::InvalidArgumentError(
        absl::StrFormat("verify: %d draft distributions for %d drafted tokens", draft.q.size(), kd));
  }
  const bool greedy = sampler.params().temperature == 0;
  if (!greedy && top_logprobs != Sampler::kNoLogprobs) {
    return absl::InvalidArgumentError("verify: logprobs are reported for greedy sampling only");
  }
  auto row = [&](int i) { return rows.subspan(static_cast<size_t>(i) * vocab, static_cast<size_t>(vocab)); };
  Verdict verdict;
  for (int i = 0; i < kd; ++i) {
    const int32_t x = draft.tokens[i];
    if (x < 0 || x >= vocab) {
      return absl::InvalidArgumentError(absl::StrFormat("verify: drafted token %d outside the vocabulary of %d", x, vocab));
    }
    Sampler probe = sampler;  // the penalties see the tokens accepted so far
    if (greedy) {
      absl::StatusOr<SampledToken> t = probe.Sample(row(i), top_logprobs);
      if (!t.ok()) return t.status();
      // Either way the probe has accepted exactly the token kept next.
      sampler = std::move(probe);
      verdict.tokens.push_back(*t);
      if (t->token != x) return verdict;
      ++verdict.accepted;
      continue;
    }
    absl::StatusOr<std::vector<float>> p = Dense(probe, row(i));
    if (!p.ok()) return p.status();
    const double qx = draft.q.empty() ? 1.0 : draft.q[i][x];
    if (qx > 0 && Uniform(rng) < std::min(1.0, (*p)[x] / qx)) {
      sampler.Accept(x);
      verdict.tokens.push_back({.token = x, .probability = (*p)[x], .logprob = std::nullopt, .top_logprobs = {}});
      ++verdict.accepted;
      continue;
    }
    std::vector<float> residual(vocab);
    for (int64_t t = 0; t < vocab; ++t) {
      const float q = draft.q.empty() ? (t == x ? 1.0f : 0.0f) : draft.q[i][t];
      residual[t] = std::max(0.0f, (*p)[t] - q);
    }
    const int32_t next = DrawFrom(residual, rng);
    sampler.Accept(next);
    verdict.tokens.push_back({.token = next, .probability = (*p)[next], .logprob = std::nullopt, .top_logprobs = {}});
    return verdict;
  }
  // Every draft kept: the target's own token after them.
  absl::StatusOr<SampledToken> bonus = sampler.Sample(row(kd), top_logprobs);
  if (!bonus.ok()) return bonus.status();
  verdict.tokens.push_back(*bonus);
  return verdict;
}

void DraftGate::ObservePlain(double seconds) {
  plain_seconds_ = plain_seen_++ == 0 ? seconds : 0.75 * plain_seconds_ + 0.25 * seconds;
  ++plain_since_probe_;
  drafted_since_plain_ = 0;
}

void DraftGate::ObserveDrafted(int tokens, double seconds) {
  if (drafted_since_plain_++ == 0) return;  // the draft caught up on the plain steps' tokens
  if (drafted_seen_++ == 0) {
    drafted_tokens_ = tokens;
    drafted_seconds_ = seconds;
  } else {
    drafted_tokens_ = 0.75 * drafted_tokens_ + 0.25 * tokens;
    drafted_seconds_ = 0.75 * drafted_seconds_ + 0.25 * seconds;
  }
  // A probe (a measured cycle after plain steps, past the warm-up) that did
  // not pay waits twice as long next time.
  if (drafted_seen_ > kWarmup && plain_since_probe_ > 0) {
    probe_every_ = Pays() ? kProbeEvery : std::min(2 * probe_every_, kMaxProbeEvery);
  }
  plain_since_probe_ = 0;
}

bool DraftGate::Pays() const { return drafted_tokens_ * plain_seconds_ >= kMargin * drafted_seconds_; }

int DraftGate::MaxDraftLength() const {
  const bool measuring = drafted_seen_ < kWarmup || drafted_since_plain_ <= 1;
  return measuring ? kMeasureLength : std::numeric_limits<int>::max();
}

bool DraftGate::DraftNext() const {
  if (plain_seen_ == 0) return false;
  if (drafted_seen_ < kWarmup || drafted_since_plain_ == 1) return true;
  if (Pays()) return true;
  return plain_since_probe_ >= probe_every_;
}

absl::StatusOr<SpeculativeResult> GenerateSpeculative(Executor& target, DraftSource& draft,
                                                      std::span<const int32_t> prompt,
                                                      const SpeculativeOptions& options,
                                                      const std::function<void(int32_t)>& on_token) {
  const GenerateOptions& gen = options.generate;
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  const int64_t capacity = std::min(target.num_pages() * target.page_size(), target.plan().pool.max_tokens);
  if (static_cast<int64_t>(prompt.size()) + gen.max_new_tokens > capacity) {
    return absl::OutOfRangeError(absl::StrFormat("%d tokens (prompt plus new tokens) exceed the context of %d tokens",
                                                 prompt.size() + gen.max_new_tokens, capacity));
  }
  absl::StatusOr<Sampler> sampler = Sampler::Create(gen.sampling);
  if (!sampler.ok()) return sampler.status();
  sampler->Accept(prompt);
  std::mt19937_64 rng(gen.sampling.seed ^ 0x5bd1e9955bd1e995ull);

  SpeculativeResult out;
  GenerateResult& result = out.result;
  result.prompt_ids.assign(prompt.begin(), prompt.end());
  result.stop_reason = "length";
  std::vector<int32_t> seq(prompt.begin(), prompt.end());

  // Prefill, then the first token as plain generation picks it.
  const auto prefill_start = std::chrono::steady_clock::now();
  std::span<const float> logits;
  for (int64_t b = 0; b < static_cast<int64_t>(seq.size()); b += target.max_step_tokens()) {
    const int64_t e = std::min<int64_t>(b + target.max_step_tokens(), seq.size());
    absl::StatusOr<std::span<const float>> l = StepSequence(target, seq, b, e, {static_cast<int32_t>(e - b - 1)});
    if (!l.ok()) return l.status();
    logits = *l;
  }
  result.last_prompt_logits.assign(logits.begin(), logits.end());
  result.prompt_seconds = Since(prefill_start);

  const auto decode_start = std::chrono::steady_clock::now();
  auto emit = [&](int32_t token) -> bool {  // false once generation must stop
    result.ids.push_back(token);
    seq.push_back(token);
    if (on_token) on_token(token);
    if (gen.is_end_of_generation && gen.is_end_of_generation(token)) {
      result.stop_reason = "eog";
      return false;
    }
    return static_cast<int64_t>(result.ids.size()) < gen.max_new_tokens;
  };
  absl::StatusOr<SampledToken> first = sampler->Sample(logits);
  if (!first.ok()) return first.status();
  bool going = emit(first->token);

  const size_t vocab = target.n_vocab();
  const bool greedy = gen.sampling.temperature == 0;
  DraftGate gate;
  int k = std::max(1, options.draft_max / 2);
  while (going) {
    // The last token of `seq` is not in the target's cache yet; the verify
    // step runs it with the drafts after it.
    const int64_t n = static_cast<int64_t>(seq.size());
    const int64_t remaining = gen.max_new_tokens - static_cast<int64_t>(result.ids.size());
    const bool drafting = !greedy || gate.DraftNext();
    const auto cycle_start = std::chrono::steady_clock::now();
    absl::StatusOr<Draft> d = Draft{};
    if (drafting) {
      const int limit = greedy ? gate.MaxDraftLength() : k;
      const int want = static_cast<int>(std::min<int64_t>({k, limit, remaining - 1, capacity - n}));
      d = draft.Propose(seq, std::max(want, 0));
      if (!d.ok()) return d.status();
    } else {
      ++out.stats.plain_steps;
    }
    const int kd = static_cast<int>(d->tokens.size());
    // The drafts ride on `seq` for the verify step only (no copy of the
    // sequence per step); its logits are read before the target steps again.
    seq.insert(seq.end(), d->tokens.begin(), d->tokens.end());
    std::vector<int32_t> rows(kd + 1);
    for (int r = 0; r <= kd; ++r) rows[r] = r;
    absl::StatusOr<std::span<const float>> verify = StepSequence(target, seq, n - 1, n + kd, rows);
    seq.resize(n);
    if (!verify.ok()) return verify.status();
    ++out.stats.steps;
    out.stats.drafted += kd;

    absl::StatusOr<Verdict> verdict = VerifyDraft(*sampler, *d, *verify, static_cast<int64_t>(vocab), rng);
    if (!verdict.ok()) return verdict.status();
    out.stats.accepted += verdict->accepted;
    if (greedy) {
      // A draft that proposed nothing (lookup without a match) cost a plain step.
      if (kd > 0) {
        gate.ObserveDrafted(verdict->accepted + 1, Since(cycle_start));
      } else {
        gate.ObservePlain(Since(cycle_start));
      }
    }
    for (size_t i = 0; i < verdict->tokens.size() && going; ++i) going = emit(verdict->tokens[i].token);
    if (!drafting) continue;
    draft.Commit(n + verdict->accepted);
    k = NextDraftLength(k, kd, verdict->accepted, options.draft_max);
  }
  result.generate_seconds = Since(decode_start);
  return out;
}

}  // namespace kiln

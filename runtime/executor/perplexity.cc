#include "runtime/executor/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_format.h"
#include "runtime/executor/generator.h"

namespace kiln {

std::vector<int32_t> PerplexityTokens(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.Encode(text, {.add_special = true, .parse_special = false});
}

int32_t PerplexityChunkBos(const Tokenizer& tokenizer) { return tokenizer.add_bos() ? tokenizer.bos_id() : -1; }

void LogSoftmax(std::span<const float> logits, std::span<double> out) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  const double log_sum = std::log(sum);
  // The same operations as LogSoftmaxAt: a token's log-probability has the same bits either way.
  for (size_t v = 0; v < logits.size(); ++v) out[v] = static_cast<double>(logits[v] - max) - log_sum;
}

double LogSoftmaxAt(std::span<const float> logits, int32_t token) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  return static_cast<double>(logits[token] - max) - std::log(sum);
}

namespace {

// The chunks `options` cuts `ids` into, after checking that `executor` can
// run them.
absl::StatusOr<int64_t> CountChunks(const Executor& executor, std::span<const int32_t> ids,
                                    const PerplexityOptions& options) {
  const int64_t n_tokens = static_cast<int64_t>(ids.size());
  const int64_t model_context = executor.plan().pool.max_tokens;
  const int64_t context = options.whole ? n_tokens : options.context;
  if (options.whole && n_tokens < 2) return absl::InvalidArgumentError("the text has fewer than 2 tokens");
  if (!options.whole && context < 4) {
    return absl::InvalidArgumentError(absl::StrFormat("a context of %d tokens is too short to score", context));
  }
  if (context > model_context) {
    return absl::OutOfRangeError(absl::StrFormat("%s of %d tokens exceeds the model's context of %d tokens",
                                                 options.whole ? "the text" : "the chunk context", context,
                                                 model_context));
  }
  if (context > executor.num_pages() * executor.page_size()) {
    return absl::OutOfRangeError(absl::StrFormat("the KV pool holds %d tokens, fewer than the context of %d",
                                                 executor.num_pages() * executor.page_size(), context));
  }
  const int64_t vocab = executor.n_vocab();
  for (int64_t i = 0; i < n_tokens; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token %d at %d is outside the model's vocabulary of %d", ids[i], i, vocab));
    }
  }
  int64_t chunks = options.whole ? 1 : n_tokens / context;
  if (chunks == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the text has %d tokens, fewer than one chunk of %d: give a longer text or a smaller context",
                        n_tokens, context));
  }
  if (options.max_chunks > 0) chunks = std::min(chunks, options.max_chunks);
  return chunks;
}

// Runs `chunks` chunks of `ids` on every executor, step by step in turn; after
// each step with scored rows, on_rows gets each executor's logits of those
// rows ([rows, vocab], valid during the call) and the ids they predict;
// after each chunk, on_chunk its index.
using RowsFn = std::function<void(std::span<const std::span<const float>>, std::span<const int32_t>)>;
absl::Status RunScoredChunks(std::span<Executor* const> executors, std::span<const int32_t> ids,
                             const PerplexityOptions& options, int64_t chunks, const RowsFn& on_rows,
                             const std::function<void(int64_t)>& on_chunk) {
  const int64_t context = options.whole ? static_cast<int64_t>(ids.size()) : options.context;
  // llama-perplexity scores a chunk's second half only: its first positions
  // see too little context to say much about the model.
  const int64_t first = options.whole ? 0 : context / 2;
  int64_t step_tokens = context;
  for (const Executor* e : executors) step_tokens = std::min(step_tokens, e->max_step_tokens());
  std::vector<int32_t> chunk(static_cast<size_t>(context));
  std::vector<std::span<const float>> logits(executors.size());
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy(ids.begin() + c * context, ids.begin() + (c + 1) * context, chunk.begin());
    if (!options.whole && options.bos >= 0) chunk[0] = options.bos;
    for (int64_t begin = 0; begin < context; begin += step_tokens) {
      const int64_t end = std::min(begin + step_tokens, context);
      // Rows predicting a scored token: positions first .. context-2.
      std::vector<int32_t> rows, targets;
      for (int64_t p = std::max(begin, first); p < std::min(end, context - 1); ++p) {
        rows.push_back(static_cast<int32_t>(p - begin));
        targets.push_back(chunk[p + 1]);
      }
      // A step with no scored row still fills the cache; it asks for its last row.
      if (rows.empty()) rows.push_back(static_cast<int32_t>(end - begin - 1));
      for (size_t e = 0; e < executors.size(); ++e) {
        absl::StatusOr<std::span<const float>> out = StepSequence(*executors[e], chunk, begin, end, rows);
        if (!out.ok()) return out.status();
        logits[e] = *out;
      }
      if (!targets.empty()) on_rows(logits, targets);
    }
    on_chunk(c);
  }
  return absl::OkStatus();
}

// A model's negative log-likelihoods, summed as they come.
struct NllSums {
  double nll = 0, nll2 = 0;
  PerplexityResult result;
  void Add(double lp) {
    result.token_logprobs.push_back(lp);
    nll -= lp;
    nll2 += lp * lp;
  }
  double Running() const { return std::exp(nll / static_cast<double>(result.token_logprobs.size())); }
  PerplexityResult Finish(int64_t tokens, int64_t chunks, double seconds) {
    result.tokens = tokens;
    result.chunks = chunks;
    result.seconds = seconds;
    result.scored = static_cast<int64_t>(result.token_logprobs.size());
    const double count = static_cast<double>(result.scored);
    result.mean_nll = nll / count;
    result.ppl = std::exp(result.mean_nll);
    // The standard error of the mean NLL, carried to the perplexity (d ppl = ppl d nll).
    const double variance = nll2 / count - result.mean_nll * result.mean_nll;
    if (variance > 0 && count > 1) result.ppl_error = result.ppl * std::sqrt(variance / (count - 1));
    return std::move(result);
  }
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<PerplexityResult> Perplexity(Executor& executor, std::span<const int32_t> ids,
                                            const PerplexityOptions& options,
                                            const std::function<void(int64_t, double)>& on_chunk) {
  absl::StatusOr<int64_t> chunks = CountChunks(executor, ids, options);
  if (!chunks.ok()) return chunks.status();
  const auto start = std::chrono::steady_clock::now();
  const int64_t vocab = executor.n_vocab();
  NllSums sums;
  Executor* const one[] = {&executor};
  absl::Status s = RunScoredChunks(
      one, ids, options, *chunks,
      [&](std::span<const std::span<const float>> logits, std::span<const int32_t> targets) {
        for (size_t i = 0; i < targets.size(); ++i)
          sums.Add(LogSoftmaxAt(logits[0].subspan(i * vocab, vocab), targets[i]));
      },
      [&](int64_t c) {
        sums.result.running_ppl.push_back(sums.Running());
        if (on_chunk) on_chunk(c, sums.result.running_ppl.back());
      });
  if (!s.ok()) return s;
  return sums.Finish(static_cast<int64_t>(ids.size()), *chunks, Seconds(start));
}

absl::StatusOr<KlDivergenceResult> KlDivergence(Executor& reference, Executor& test, std::span<const int32_t> ids,
                                                const PerplexityOptions& options,
                                                const std::function<void(int64_t, double)>& on_chunk) {
  if (reference.n_vocab() != test.n_vocab()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the reference's vocabulary (%d tokens) differs from the "
                        "model's (%d tokens)",
                        reference.n_vocab(), test.n_vocab()));
  }
  absl::StatusOr<int64_t> chunks = CountChunks(reference, ids, options);
  if (!chunks.ok()) return chunks.status();
  if (absl::StatusOr<int64_t> t = CountChunks(test, ids, options); !t.ok()) return t.status();
  const auto start = std::chrono::steady_clock::now();
  const int64_t vocab = test.n_vocab();
  NllSums ref_sums, test_sums;
  double kl = 0, kl2 = 0;
  int64_t same_top = 0;
  std::vector<double> ref_lp(static_cast<size_t>(vocab)), test_lp(static_cast<size_t>(vocab));
  Executor* const both[] = {&reference, &test};
  absl::Status s = RunScoredChunks(
      both, ids, options, *chunks,
      [&](std::span<const std::span<const float>> logits, std::span<const int32_t> targets) {
        for (size_t i = 0; i < targets.size(); ++i) {
          const std::span<const float> r = logits[0].subspan(i * vocab, vocab), t = logits[1].subspan(i * vocab, vocab);
          LogSoftmax(r, ref_lp);
          LogSoftmax(t, test_lp);
          // KL(reference || test) = sum_v p_ref(v) (ln p_ref(v) - ln p_test(v)).
          double d = 0;
          for (int64_t v = 0; v < vocab; ++v) d += std::exp(ref_lp[v]) * (ref_lp[v] - test_lp[v]);
          kl += d;
          kl2 += d * d;
          same_top +=
              std::max_element(r.begin(), r.end()) - r.begin() == std::max_element(t.begin(), t.end()) - t.begin();
          ref_sums.Add(ref_lp[targets[i]]);
          test_sums.Add(test_lp[targets[i]]);
        }
      },
      [&](int64_t c) {
        test_sums.result.running_ppl.push_back(test_sums.Running());
        ref_sums.result.running_ppl.push_back(ref_sums.Running());
        if (on_chunk) on_chunk(c, test_sums.result.running_ppl.back());
      });
  if (!s.ok()) return s;
  KlDivergenceResult out;
  const double seconds = Seconds(start);
  out.reference = ref_sums.Finish(static_cast<int64_t>(ids.size()), *chunks, seconds);
  out.test = test_sums.Finish(static_cast<int64_t>(ids.size()), *chunks, seconds);
  const double count = static_cast<double>(out.test.scored);
  out.mean_kld = kl / count;
  const double variance = kl2 / count - out.mean_kld * out.mean_kld;
  if (variance > 0 && count > 1) out.kld_error = std::sqrt(variance / (count - 1));
  out.same_top = static_cast<double>(same_top) / count;
  return out;
}

}  // namespace kiln

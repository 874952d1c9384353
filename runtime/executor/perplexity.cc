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

double LogSoftmaxAt(std::span<const float> logits, int32_t token) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  return static_cast<double>(logits[token] - max) - std::log(sum);
}

absl::StatusOr<PerplexityResult> Perplexity(Executor& executor, std::span<const int32_t> ids,
                                            const PerplexityOptions& options,
                                            const std::function<void(int64_t, double)>& on_chunk) {
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
  // llama-perplexity scores a chunk's second half only: its first positions
  // see too little context to say much about the model.
  const int64_t first = options.whole ? 0 : context / 2;
  const int64_t step_tokens = executor.max_step_tokens();
  const auto start = std::chrono::steady_clock::now();

  PerplexityResult result;
  result.tokens = n_tokens;
  double nll = 0, nll2 = 0;
  std::vector<int32_t> chunk(static_cast<size_t>(context));
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy(ids.begin() + c * context, ids.begin() + (c + 1) * context, chunk.begin());
    if (!options.whole && options.bos >= 0) chunk[0] = options.bos;
    for (int64_t begin = 0; begin < context; begin += step_tokens) {
      const int64_t end = std::min(begin + step_tokens, context);
      // Rows predicting a scored token: positions first .. context-2.
      std::vector<int32_t> rows;
      for (int64_t p = std::max(begin, first); p < std::min(end, context - 1); ++p) {
        rows.push_back(static_cast<int32_t>(p - begin));
      }
      // A step with no scored row still fills the cache; it asks for its last row.
      const bool scored = !rows.empty();
      if (!scored) rows.push_back(static_cast<int32_t>(end - begin - 1));
      absl::StatusOr<std::span<const float>> logits = StepSequence(executor, chunk, begin, end, rows);
      if (!logits.ok()) return logits.status();
      if (!scored) continue;
      for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t p = begin + rows[i];
        const double lp = LogSoftmaxAt(logits->subspan(i * vocab, vocab), chunk[p + 1]);
        result.token_logprobs.push_back(lp);
        nll -= lp;
        nll2 += lp * lp;
      }
    }
    ++result.chunks;
    result.scored = static_cast<int64_t>(result.token_logprobs.size());
    const double running = std::exp(nll / result.scored);
    result.running_ppl.push_back(running);
    if (on_chunk) on_chunk(c, running);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double count = static_cast<double>(result.scored);
  result.mean_nll = nll / count;
  result.ppl = std::exp(result.mean_nll);
  // The standard error of the mean NLL, carried to the perplexity (d ppl = ppl d nll).
  const double variance = nll2 / count - result.mean_nll * result.mean_nll;
  if (variance > 0 && count > 1) result.ppl_error = result.ppl * std::sqrt(variance / (count - 1));
  return result;
}

}  // namespace kiln

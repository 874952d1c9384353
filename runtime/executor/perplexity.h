// Perplexity of a model on a text, as llama.cpp's llama-perplexity measures
// it (so that the figures of the two compare): the text's tokens (with BOS)
// cut into chunks of `context` tokens, each chunk's first token replaced by
// BOS and run from an empty cache, the second half of each chunk scored
// (positions context/2 .. context-2, each the log-probability of the next
// token). Or the whole text as one sequence with every position scored.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/executor.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {

struct PerplexityOptions {
  int64_t context = 512;   // tokens a chunk (llama-perplexity's -c)
  int64_t max_chunks = 0;  // 0: every whole chunk of the text
  int32_t bos = -1;        // each chunk's first token becomes this id (-1: kept as it is)
  // The whole text as one sequence from position 0, every position scored
  // (no chunks; the text must fit the model's context).
  bool whole = false;
};

struct PerplexityResult {
  int64_t tokens = 0;               // of the text
  int64_t chunks = 0;               // evaluated (1 with `whole`)
  int64_t scored = 0;               // predictions scored
  std::vector<double> running_ppl;  // after each chunk: exp(mean NLL so far)
  double mean_nll = 0;
  double ppl = 0;        // exp(mean_nll)
  double ppl_error = 0;  // llama-perplexity's estimate: ppl x the NLL's standard error
  // ln p(next token) of each scored prediction, in order.
  std::vector<double> token_logprobs;
  double seconds = 0;  // evaluating (steps and scoring)
};

// The executor's KV pool must hold `context` tokens (the text's tokens with
// `whole`). Errors name what does not fit: a text with fewer tokens than
// one chunk, a context past the model's or the pool's, a context under 4
// tokens, an id outside the vocabulary.
// `on_chunk` sees each chunk's index and the running perplexity after it.
absl::StatusOr<PerplexityResult> Perplexity(Executor& executor, std::span<const int32_t> ids,
                                            const PerplexityOptions& options,
                                            const std::function<void(int64_t, double)>& on_chunk = nullptr);

// The reference model's and the tested model's perplexities over the same
// chunks, and how far the tested model's next-token distributions are from
// the reference's at each scored position (as llama-perplexity's
// --kl-divergence): a finer measure of what quantisation costs than the
// perplexities' difference.
struct KlDivergenceResult {
  PerplexityResult reference, test;
  double mean_kld = 0;   // mean over scored positions of KL(reference || test), nats
  double kld_error = 0;  // its standard error
  double same_top = 0;   // fraction of scored positions whose most likely token the two share
};

// Both executors run every chunk (same options and checks as Perplexity);
// their vocabularies must have the same size. `on_chunk` sees each chunk's
// index and the tested model's running perplexity.
absl::StatusOr<KlDivergenceResult> KlDivergence(Executor& reference, Executor& test, std::span<const int32_t> ids,
                                                const PerplexityOptions& options,
                                                const std::function<void(int64_t, double)>& on_chunk = nullptr);

// A text's tokens as llama-perplexity takes them: the vocabulary's BOS first
// where it adds one, control-token text read as plain text.
std::vector<int32_t> PerplexityTokens(const Tokenizer& tokenizer, std::string_view text);

// What each chunk's first token becomes (PerplexityOptions::bos): BOS where
// the vocabulary adds one, else -1 (kept; Qwen's vocabularies add none).
int32_t PerplexityChunkBos(const Tokenizer& tokenizer);

// ln softmax(logits) into out (same size), in double.
void LogSoftmax(std::span<const float> logits, std::span<double> out);

// ln softmax(logits)[token] over n logits: the largest subtracted first, the
// exponentials summed in double.
double LogSoftmaxAt(std::span<const float> logits, int32_t token);

}  // namespace kiln

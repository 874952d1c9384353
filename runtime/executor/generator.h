// Text generation for one sequence on an executor: chunked prefill of the
// prompt, then one decode step per token, sampling each from the logits.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/executor/executor.h"
#include "runtime/sampler/sampler.h"

namespace kiln {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  // Stop at the first end-of-generation token (it is kept as the last id).
  std::function<bool(int32_t)> is_end_of_generation;
  // Positions [0, cached_prefix) of the prompt already in the executor's
  // cache, as an earlier Generate of the lone sequence left them (its
  // GenerateResult::CachedIds()): the prefill starts after them. The
  // prompt's last token always runs (its logits pick the first id).
  int64_t cached_prefix = 0;
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;  // generated
  std::string stop_reason;   // "length" or "eog"
  double prompt_seconds = 0;
  double generate_seconds = 0;
  std::vector<float> last_prompt_logits;  // the distribution the first token came from
  int64_t reused_prompt_tokens = 0;       // the prompt's positions not run again (cached_prefix, capped)

  // The ids whose positions the executor's cache holds after this run: the
  // prompt and every generated id but the last (never run).
  std::vector<int32_t> CachedIds() const;
};

// Generates after `prompt`; `on_token` sees each token as it is chosen. The
// prompt plus max_new_tokens must fit the executor's KV pool and the model's
// context: otherwise an error says by how much it does not.
absl::StatusOr<GenerateResult> Generate(Executor& executor, std::span<const int32_t> prompt,
                                        const GenerateOptions& options,
                                        const std::function<void(int32_t)>& on_token = nullptr);

// One step of a lone sequence that owns pages 0, 1, ... of the pool: runs
// ids[begin, end) at positions begin..end-1 (the cache must already hold
// positions 0..begin-1) and returns the logits of `logit_rows` (relative to
// begin), [rows, n_vocab]. Positions past `end` left in the cache by an
// earlier step are simply overwritten later: rolling a sequence back is
// running it from a smaller `begin`.
absl::StatusOr<std::span<const float>> StepSequence(Executor& executor, std::span<const int32_t> ids,
                                                    int64_t begin, int64_t end, std::vector<int32_t> logit_rows);

// Teacher forcing: the logits after every position of `ids`, [ids.size(), n_vocab].
absl::StatusOr<std::vector<float>> ForwardAllPositions(Executor& executor, std::span<const int32_t> ids);

}  // namespace kiln

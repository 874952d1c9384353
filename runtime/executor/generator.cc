#include "runtime/executor/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"

namespace kiln {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One sequence owns pages 0, 1, 2, ... of the pool in order.
absl::Status CheckCapacity(const Executor& executor, int64_t total_tokens) {
  const int64_t pool_tokens = executor.num_pages() * executor.page_size();
  const int64_t context = executor.plan().pool.max_tokens;
  const int64_t limit = std::min(pool_tokens, context);
  if (total_tokens > limit) {
    return absl::OutOfRangeError(absl::StrFormat(
        "%d tokens (prompt plus new tokens) exceed the context of %d tokens%s", total_tokens, limit,
        limit == context ? "" : " that the KV pool holds"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Positions [begin, end) of the one sequence that owns pages 0, 1, 2, ...
StepBatch SequenceBatch(const Executor& executor, std::span<const int32_t> ids, int64_t begin, int64_t end,
                        std::vector<int32_t> logit_rows) {
  StepBatch batch;
  batch.tokens.assign(ids.begin() + begin, ids.begin() + end);
  for (int64_t p = begin; p < end; ++p) batch.positions.push_back(static_cast<int32_t>(p));
  batch.query_starts = {0, static_cast<int32_t>(end - begin)};
  batch.context_lens = {static_cast<int32_t>(end)};
  const int64_t pages = (end + executor.page_size() - 1) / executor.page_size();
  batch.pages_per_seq = static_cast<int32_t>(pages);
  for (int32_t p = 0; p < pages; ++p) batch.block_tables.push_back(p);
  batch.logit_rows = std::move(logit_rows);
  return batch;
}

}  // namespace

absl::StatusOr<std::span<const float>> StepSequence(Executor& executor, std::span<const int32_t> ids,
                                                    int64_t begin, int64_t end, std::vector<int32_t> logit_rows) {
  return executor.Step(SequenceBatch(executor, ids, begin, end, std::move(logit_rows)));
}

absl::StatusOr<GenerateResult> Generate(Executor& executor, std::span<const int32_t> prompt,
                                        const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (absl::Status s = CheckCapacity(executor, static_cast<int64_t>(prompt.size()) + options.max_new_tokens); !s.ok()) {
    return s;
  }
  absl::StatusOr<Sampler> sampler = Sampler::Create(options.sampling);
  if (!sampler.ok()) return sampler.status();
  sampler->Accept(prompt);

  GenerateResult result;
  result.prompt_ids.assign(prompt.begin(), prompt.end());
  result.stop_reason = "length";
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  const int64_t chunk = executor.max_step_tokens();

  const auto prefill_start = std::chrono::steady_clock::now();
  std::span<const float> logits;
  result.reused_prompt_tokens = std::clamp<int64_t>(options.cached_prefix, 0, static_cast<int64_t>(seq.size()) - 1);
  for (int64_t begin = result.reused_prompt_tokens; begin < static_cast<int64_t>(seq.size()); begin += chunk) {
    const int64_t end = std::min<int64_t>(begin + chunk, seq.size());
    absl::StatusOr<std::span<const float>> out =
        StepSequence(executor, seq, begin, end, {static_cast<int32_t>(end - begin - 1)});
    if (!out.ok()) return out.status();
    logits = *out;
  }
  result.last_prompt_logits.assign(logits.begin(), logits.end());
  result.prompt_seconds = Since(prefill_start);

  // Greedy without penalties: after the prompt, the backend picks each id
  // (on a GPU, one id comes back per step instead of a row of logits).
  const bool backend_argmax = sampler->IsPlainArgmax();
  int32_t picked = -1;
  const auto decode_start = std::chrono::steady_clock::now();
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    absl::StatusOr<SampledToken> next = picked >= 0 ? sampler->AcceptArgmax(picked) : sampler->Sample(logits);
    if (!next.ok()) return next.status();
    result.ids.push_back(next->token);
    if (on_token) on_token(next->token);
    if (options.is_end_of_generation && options.is_end_of_generation(next->token)) {
      result.stop_reason = "eog";
      break;
    }
    if (n + 1 == options.max_new_tokens) break;
    seq.push_back(next->token);
    const int64_t pos = static_cast<int64_t>(seq.size()) - 1;
    if (backend_argmax) {
      absl::StatusOr<std::span<const int32_t>> id = executor.StepGreedy(SequenceBatch(executor, seq, pos, pos + 1, {0}));
      if (!id.ok()) return id.status();
      picked = (*id)[0];
      continue;
    }
    absl::StatusOr<std::span<const float>> out = StepSequence(executor, seq, pos, pos + 1, {0});
    if (!out.ok()) return out.status();
    logits = *out;
  }
  result.generate_seconds = Since(decode_start);
  return result;
}

std::vector<int32_t> GenerateResult::CachedIds() const {
  std::vector<int32_t> cached = prompt_ids;
  if (!ids.empty()) cached.insert(cached.end(), ids.begin(), ids.end() - 1);
  return cached;
}

absl::StatusOr<std::vector<float>> ForwardAllPositions(Executor& executor, std::span<const int32_t> ids) {
  if (ids.empty()) return absl::InvalidArgumentError("no tokens to run");
  if (absl::Status s = CheckCapacity(executor, static_cast<int64_t>(ids.size())); !s.ok()) return s;
  std::vector<float> all;
  const int64_t chunk = executor.max_step_tokens();
  for (int64_t begin = 0; begin < static_cast<int64_t>(ids.size()); begin += chunk) {
    const int64_t end = std::min<int64_t>(begin + chunk, ids.size());
    std::vector<int32_t> rows;
    for (int64_t r = 0; r < end - begin; ++r) rows.push_back(static_cast<int32_t>(r));
    absl::StatusOr<std::span<const float>> out = StepSequence(executor, ids, begin, end, std::move(rows));
    if (!out.ok()) return out.status();
    all.insert(all.end(), out->begin(), out->end());
  }
  return all;
}

}  // namespace kiln

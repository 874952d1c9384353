// Continuous batching is exact on any executor: 32 concurrent greedy requests
// over stories260K, prefill chunked by a 24-token budget and preemption forced
// by a 24-page pool, each get exactly the ids they get alone (and llama.cpp's
// goldens for the four golden prompts).
#pragma once

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/serving/scheduler.h"
#include "tests/e2e/golden_cases.h"

namespace kiln::testing {

// Pages of the executor that serves the 32 requests together.
constexpr int64_t kBatchedCheckPages = 24;

// `solo` runs each request alone; `shared` (kBatchedCheckPages pages) runs
// them together under the scheduler (with SchedulerOptions::
// decoding_step_budget as given).
inline void ExpectBatchedGreedyEqualsSolo(const Program& program, Executor& solo, Executor& shared,
                                          int64_t decoding_step_budget = 0) {
  const Tokenizer& tok = *program.tokenizer;
  // The four golden prompts, then variants of different lengths.
  std::vector<std::string> prompts = {"Once upon a time", "The little girl", "One day, a cat",
                                      "Lily saw a café 🐶 and said: ¡Hola!"};
  const char* starts[] = {"Tom had a", "The sun was", "Once there was a big dog who", "Mom said", "A bird"};
  for (int k = 0; prompts.size() < 32; ++k) {
    prompts.push_back(std::string(starts[k % 5]) + (k % 3 == 0 ? " very" : "") + (k % 4 == 0 ? " happy and" : ""));
  }
  constexpr int64_t kNew = 40;

  std::vector<std::vector<int32_t>> alone;
  for (const std::string& p : prompts) {
    GenerateOptions g;
    g.max_new_tokens = kNew;
    g.sampling.temperature = 0;
    absl::StatusOr<GenerateResult> r = Generate(solo, tok.Encode(p, {.add_special = true}), g);
    ASSERT_TRUE(r.ok()) << r.status();
    alone.push_back(r->ids);
  }
  // The goldens agree with the solo runs on their first kNew tokens (the
  // golden files sort in the order of the first four prompts).
  const std::vector<GoldenCase> goldens = GoldenCases("stories260K");
  for (size_t k = 0; k < goldens.size() && k < 4; ++k) {
    std::vector<int32_t> want(goldens[k].generated.begin(),
                              goldens[k].generated.begin() + std::min<size_t>(kNew, goldens[k].generated.size()));
    EXPECT_EQ(alone[k], want) << goldens[k].name;
  }

  KvPageManager pages(kBatchedCheckPages, shared.page_size());
  SchedulerOptions options{.token_budget = 24, .max_running = 32};
  options.decoding_step_budget = decoding_step_budget;
  Scheduler scheduler(shared, pages, options);
  std::vector<std::vector<int32_t>> together(prompts.size());
  std::vector<std::string> reasons(prompts.size());
  for (size_t k = 0; k < prompts.size(); ++k) {
    ScheduledRequest req;
    req.prompt = tok.Encode(prompts[k], {.add_special = true});
    req.sampling.temperature = 0;
    req.max_tokens = kNew;
    req.on_token = [&together, k](int32_t t, const SampledToken&) {
      together[k].push_back(t);
      return true;
    };
    req.on_finish = [&reasons, k](const std::string& why, const SpeculativeStats&) { reasons[k] = why; };
    ASSERT_TRUE(scheduler.Submit(std::move(req)).ok());
  }
  int steps = 0;
  while (true) {
    absl::StatusOr<bool> more = scheduler.Step();
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ASSERT_LT(++steps, 100000);
  }
  for (size_t k = 0; k < prompts.size(); ++k) {
    EXPECT_EQ(reasons[k], "length") << prompts[k];
    EXPECT_EQ(together[k], alone[k]) << prompts[k];
  }
  const SchedulerStats s = scheduler.stats();
  std::printf("%s: 32 requests x %lld tokens: %lld steps, %lld prefill and %lld decode tokens, %lld preemptions; all "
              "equal their solo runs\n",
              shared.Describe().c_str(), (long long)kNew, (long long)s.steps, (long long)s.prefill_tokens,
              (long long)s.decode_tokens, (long long)s.preemptions);
  EXPECT_GT(s.preemptions, 0);  // the tiny pool forced recomputation
  // Every step ran the executor, inside the step's wall time.
  EXPECT_GT(s.executor_seconds, 0.0);
  EXPECT_LE(s.executor_seconds, s.step_seconds);
  EXPECT_TRUE(pages.CheckInvariants().ok());
}

}  // namespace kiln::testing

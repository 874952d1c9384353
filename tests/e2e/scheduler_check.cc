// Continuous batching is exact: many concurrent greedy requests, with prefill
// chunked by a small token budget and preemption forced by a tiny page pool,
// each get exactly the ids they get alone (and llama.cpp's goldens where one
// exists).
#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/serving/scheduler.h"
#include "runtime/util/json.h"
#include "tests/e2e/batched_check.h"
#include "tests/e2e/compiled_model.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

// A greedy request for `max_tokens` tokens that appends them to `*out`.
ScheduledRequest GreedyRequest(std::vector<int32_t> prompt, int64_t max_tokens, std::vector<int32_t>* out) {
  ScheduledRequest req;
  req.prompt = std::move(prompt);
  req.sampling.temperature = 0;
  req.max_tokens = max_tokens;
  req.on_token = [out](int32_t t, const SampledToken&) {
    out->push_back(t);
    return true;
  };
  return req;
}

// The CPU executor of `program` with a pool of `pages` pages (null, and a
// failure, if it cannot be made).
std::unique_ptr<CpuExecutor> CpuExecutorWithPages(const Program& program, int64_t pages) {
  CpuExecutorOptions options;
  options.num_pages = pages;
  absl::StatusOr<std::unique_ptr<CpuExecutor>> ex = CpuExecutor::Create(program.plan, program.weights, options);
  EXPECT_TRUE(ex.ok()) << ex.status();
  return ex.ok() ? *std::move(ex) : nullptr;
}

// Steps until nothing is waiting or running.
void Drain(Scheduler& scheduler) {
  for (absl::StatusOr<bool> more = scheduler.Step(); more.ok() && *more; more = scheduler.Step()) {
  }
}

// With the KV cache in f32 and in f16 (kiln compile --kv-type f16; the four
// goldens' ids hold there too, as llama.cpp recorded for its own f16 cache).
TEST(SchedulerCheck, ThirtyTwoConcurrentGreedyRequestsMatchTheirSoloRuns) {
  for (const std::string kv_type : {"f32", "f16"}) {
    SCOPED_TRACE(kv_type);
    std::unique_ptr<Program> program = testing::CompileTestModel("stories260K", "", kv_type);
    if (program == nullptr) GTEST_SKIP() << "stories260K.gguf not found under " << testing::TestDataDir();
    ASSERT_EQ(program->plan.pool.f16, kv_type == "f16");
    // Alone: a roomy executor. Together: 24 pages of 16 tokens, about a third of
    // what the 32 requests need at once.
    std::unique_ptr<CpuExecutor> solo = CpuExecutorWithPages(*program, 16);
    std::unique_ptr<CpuExecutor> shared = CpuExecutorWithPages(*program, testing::kBatchedCheckPages);
    ASSERT_TRUE(solo && shared);
    testing::ExpectBatchedGreedyEqualsSolo(*program, *solo, *shared);
    // The same with steps kept to 12 tokens while sequences decode.
    testing::ExpectBatchedGreedyEqualsSolo(*program, *solo, *shared, 12);
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(SchedulerCheck, SixteenRequestsShareA200TokenPrefix) {
  const std::filesystem::path model = testing::TestDataFile("models/stories260K.gguf");
  if (model.empty()) GTEST_SKIP() << "stories260K.gguf not found under " << testing::TestDataDir();
  std::unique_ptr<Program> program = testing::CompileTestModel("stories260K");
  ASSERT_NE(program, nullptr);
  const Tokenizer& tok = *program->tokenizer;

  std::string common;
  while (tok.Encode(common, {.add_special = true}).size() < 200) common += "Tim and Sue went to the big park to play. ";
  std::vector<std::vector<int32_t>> prompts;
  const char* ends[] = {"Then Tim", "Sue said", "They saw", "A dog", "The sun", "Mom called", "It was", "Later"};
  for (int k = 0; k < 16; ++k) {
    prompts.push_back(tok.Encode(common + ends[k % 8] + (k >= 8 ? " quickly" : ""), {.add_special = true}));
  }
  ASSERT_GE(prompts[0].size(), 200u);
  constexpr int64_t kNew = 24;

  auto run_all = [&](bool share, KvPageStats* stats) {
    std::unique_ptr<CpuExecutor> ex = CpuExecutorWithPages(*program, 256);
    KvPageManager pages(256, ex->page_size());
    Scheduler scheduler(*ex, pages, SchedulerOptions{.token_budget = 256, .max_running = 16});
    std::vector<std::vector<int32_t>> out(prompts.size());
    auto submit = [&](size_t k) { EXPECT_TRUE(scheduler.Submit(GreedyRequest(prompts[k], kNew, &out[k])).ok()); };
    if (share) {
      // The first request fills and registers the prefix pages; the other
      // fifteen, batched together, find them.
      submit(0);
      Drain(scheduler);
      for (size_t k = 1; k < prompts.size(); ++k) submit(k);
      Drain(scheduler);
    } else {
      for (size_t k = 0; k < prompts.size(); ++k) {  // one at a time, each on a fresh pool
        KvPageManager fresh(256, ex->page_size());
        Scheduler solo(*ex, fresh, SchedulerOptions{.token_budget = 256, .max_running = 1});
        EXPECT_TRUE(solo.Submit(GreedyRequest(prompts[k], kNew, &out[k])).ok());
        Drain(solo);
      }
    }
    *stats = pages.Stats();
    EXPECT_TRUE(pages.CheckInvariants().ok());
    return out;
  };
  KvPageStats shared_stats, alone_stats;
  const auto shared = run_all(true, &shared_stats);
  const auto alone = run_all(false, &alone_stats);
  for (size_t k = 0; k < prompts.size(); ++k) EXPECT_EQ(shared[k], alone[k]) << k;
  std::printf("16 requests, %zu-token common prefix: prefix hit rate %.3f (%lld of %lld prompt tokens reused), "
              "ids equal to the unshared runs\n",
              prompts[0].size(), shared_stats.prefix_hit_rate, (long long)shared_stats.hit_tokens,
              (long long)shared_stats.lookup_tokens);
  // 15 requests each reuse the 12 whole pages (192 tokens) of the prefix.
  EXPECT_GE(shared_stats.hit_tokens, 15 * 192);
  EXPECT_EQ(shared_stats.used_pages, 0);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// --decoding-step-budget: while a sequence decodes, a new long prompt is
// prefilled in chunks that keep every step within the budget (the decode
// counted first), and the ids are those of each request alone; without it
// the prompt joins as one large step.
TEST(SchedulerCheck, DecodingStepBudgetKeepsStepsSmallWhileSequencesDecode) {
  std::unique_ptr<Program> program = testing::CompileTestModel("stories260K");
  if (program == nullptr) GTEST_SKIP() << "stories260K.gguf not found under " << testing::TestDataDir();
  const Tokenizer& tok = *program->tokenizer;
  const std::vector<int32_t> short_prompt = tok.Encode("Once upon a time", {.add_special = true});
  std::string long_text;
  while (tok.Encode(long_text, {.add_special = true}).size() < 60) long_text += "The little dog ran to the park. ";
  const std::vector<int32_t> long_prompt = tok.Encode(long_text, {.add_special = true});
  constexpr int64_t kDecoderTokens = 40, kJoinerTokens = 8;

  // Runs the short request, and the long one once the short one decodes;
  // returns both outputs and the largest step while the short one decoded.
  auto run = [&](int64_t decoding_step_budget, int64_t* largest_step_while_decoding) {
    std::unique_ptr<CpuExecutor> ex = CpuExecutorWithPages(*program, 64);
    KvPageManager pages(64, ex->page_size());
    SchedulerOptions options{.token_budget = 64, .max_running = 8};
    options.decoding_step_budget = decoding_step_budget;
    Scheduler scheduler(*ex, pages, options);
    std::vector<std::vector<int32_t>> out(2);
    EXPECT_TRUE(scheduler.Submit(GreedyRequest(short_prompt, kDecoderTokens, &out[0])).ok());
    while (out[0].empty()) EXPECT_TRUE(scheduler.Step().ok());
    EXPECT_TRUE(scheduler.Submit(GreedyRequest(long_prompt, kJoinerTokens, &out[1])).ok());
    *largest_step_while_decoding = 0;
    for (absl::StatusOr<bool> more = scheduler.Step(); more.ok() && *more; more = scheduler.Step()) {
      if (static_cast<int64_t>(out[0].size()) < kDecoderTokens) {
        *largest_step_while_decoding = std::max(*largest_step_while_decoding, scheduler.stats().last_step_tokens);
      }
    }
    EXPECT_TRUE(pages.CheckInvariants().ok());
    return out;
  };
  int64_t capped = 0, uncapped = 0;
  const auto with_budget = run(8, &capped);
  const auto without = run(0, &uncapped);
  EXPECT_LE(capped, 8);
  EXPECT_GT(uncapped, 8) << "without the budget the long prompt joins in one step";
  ASSERT_EQ(with_budget[0].size(), static_cast<size_t>(kDecoderTokens));
  ASSERT_EQ(with_budget[1].size(), static_cast<size_t>(kJoinerTokens));
  EXPECT_EQ(with_budget, without);
  // And each equals its request run alone.
  std::unique_ptr<CpuExecutor> ex = CpuExecutorWithPages(*program, 64);
  ASSERT_NE(ex, nullptr);
  for (int k = 0; k < 2; ++k) {
    KvPageManager pages(64, ex->page_size());
    Scheduler solo(*ex, pages, SchedulerOptions{.token_budget = 64, .max_running = 1});
    std::vector<int32_t> ids;
    ASSERT_TRUE(solo.Submit(GreedyRequest(k == 0 ? short_prompt : long_prompt, k == 0 ? kDecoderTokens : kJoinerTokens,
                                          &ids))
                    .ok());
    Drain(solo);
    EXPECT_EQ(with_budget[k], ids) << k;
  }
  std::printf("a 60-token prompt joining a decoding sequence: largest step %lld tokens with --decoding-step-budget 8, "
              "%lld without\n",
              static_cast<long long>(capped), static_cast<long long>(uncapped));
}

// The choices of an n > 1 completion (prompt_shared_with the first): the
// other three wait for the first's prompt pages and find them in the prefix
// cache, so the ~200-token prompt is computed once plus three tails of under
// a page, not four times; each choice's ids (greedy, and sampled with its own
// seed) are those it gets alone.
TEST(SchedulerCheck, ChoicesOfOnePromptComputeItOnce) {
  std::unique_ptr<Program> program = testing::CompileTestModel("stories260K");
  if (program == nullptr) GTEST_SKIP() << "stories260K.gguf not found under " << testing::TestDataDir();
  const Tokenizer& tok = *program->tokenizer;
  std::string text;
  while (tok.Encode(text, {.add_special = true}).size() < 200) text += "Tim and Sue went to the big park to play. ";
  const std::vector<int32_t> prompt = tok.Encode(text, {.add_special = true});
  const int64_t p = static_cast<int64_t>(prompt.size());
  constexpr int64_t kNew = 16;
  constexpr int kChoices = 4;
  for (const float temperature : {0.0f, 0.8f}) {
    SCOPED_TRACE(temperature);
    auto request = [&](int k, std::vector<int32_t>* out) {
      ScheduledRequest req = GreedyRequest(prompt, kNew, out);
      req.sampling.temperature = temperature;
      req.sampling.seed = 7 + k;
      return req;
    };
    // Together, submitted at once, with and without the link to the first.
    auto together = [&](bool linked, int64_t* prefill_tokens) {
      std::unique_ptr<CpuExecutor> ex = CpuExecutorWithPages(*program, 128);
      KvPageManager pages(128, ex->page_size());
      Scheduler scheduler(*ex, pages, SchedulerOptions{.token_budget = 256, .max_running = 8});
      std::vector<std::vector<int32_t>> out(kChoices);
      int64_t first = 0;
      for (int k = 0; k < kChoices; ++k) {
        ScheduledRequest req = request(k, &out[k]);
        if (linked && k > 0) req.prompt_shared_with = first;
        absl::StatusOr<int64_t> id = scheduler.Submit(std::move(req));
        EXPECT_TRUE(id.ok()) << id.status();
        if (k == 0) first = id.value_or(0);
      }
      Drain(scheduler);
      EXPECT_TRUE(pages.CheckInvariants().ok());
      EXPECT_EQ(pages.Stats().used_pages, 0);
      *prefill_tokens = scheduler.stats().prefill_tokens;
      return out;
    };
    int64_t linked_prefill = 0, unlinked_prefill = 0;
    const auto linked = together(true, &linked_prefill);
    const auto unlinked = together(false, &unlinked_prefill);
    // A choice reuses the whole pages before its prompt's last token and computes the rest.
    const int64_t page = program->plan.pool.page_size;
    EXPECT_EQ(linked_prefill, p + (kChoices - 1) * (p - (p - 1) / page * page));
    // Unlinked, those admitted in the first step (the budget takes two) compute it all.
    EXPECT_GE(unlinked_prefill, 2 * p);
    std::unique_ptr<CpuExecutor> ex = CpuExecutorWithPages(*program, 128);
    ASSERT_NE(ex, nullptr);
    for (int k = 0; k < kChoices; ++k) {
      KvPageManager pages(128, ex->page_size());
      Scheduler solo(*ex, pages, SchedulerOptions{.token_budget = 256, .max_running = 1});
      std::vector<int32_t> ids;
      ASSERT_TRUE(solo.Submit(request(k, &ids)).ok());
      Drain(solo);
      ASSERT_EQ(ids.size(), static_cast<size_t>(kNew));
      EXPECT_EQ(linked[k], ids) << k;
      EXPECT_EQ(unlinked[k], ids) << k;
    }
    std::printf("%d choices of a %lld-token prompt (temperature %.1f): %lld prompt tokens computed linked, %lld not\n",
                kChoices, static_cast<long long>(p), temperature, static_cast<long long>(linked_prefill),
                static_cast<long long>(unlinked_prefill));
  }
}

}  // namespace
}  // namespace kiln

// Continuous batching is exact: many concurrent greedy requests, with prefill
// chunked by a small token budget and preemption forced by a tiny page pool,
// each get exactly the ids they get alone (and llama.cpp's goldens where one
// exists).
#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/serving/scheduler.h"
#include "runtime/util/json.h"
#include "tests/e2e/compiled_model.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

TEST(SchedulerCheck, ThirtyTwoConcurrentGreedyRequestsMatchTheirSoloRuns) {
  const std::filesystem::path model = testing::TestDataFile("models/stories260K.gguf");
  if (model.empty()) GTEST_SKIP() << "stories260K.gguf not found under " << testing::TestDataDir();
  std::unique_ptr<Program> program = testing::CompileTestModel("stories260K");
  ASSERT_NE(program, nullptr);
  const Tokenizer& tok = *program->tokenizer;

  // The four golden prompts, then variants of different lengths.
  std::vector<std::string> prompts = {"Once upon a time", "The little girl", "One day, a cat",
                                      "Lily saw a café 🐶 and said: ¡Hola!"};
  const char* starts[] = {"Tom had a", "The sun was", "Once there was a big dog who", "Mom said", "A bird"};
  for (int k = 0; prompts.size() < 32; ++k) {
    prompts.push_back(std::string(starts[k % 5]) + (k % 3 == 0 ? " very" : "") + (k % 4 == 0 ? " happy and" : ""));
  }
  constexpr int64_t kNew = 40;

  // Alone: a roomy executor, one request at a time.
  CpuExecutorOptions solo_options;
  solo_options.num_pages = 16;
  absl::StatusOr<std::unique_ptr<CpuExecutor>> solo = CpuExecutor::Create(program->plan, program->weights, solo_options);
  ASSERT_TRUE(solo.ok()) << solo.status();
  std::vector<std::vector<int32_t>> alone;
  for (const std::string& p : prompts) {
    GenerateOptions g;
    g.max_new_tokens = kNew;
    g.sampling.temperature = 0;
    absl::StatusOr<GenerateResult> r = Generate(**solo, tok.Encode(p, {.add_special = true}), g);
    ASSERT_TRUE(r.ok()) << r.status();
    alone.push_back(r->ids);
  }
  // The goldens agree with the solo runs on their first kNew tokens.
  for (int k = 0; k < 4; ++k) {
    const char* files[] = {"p01_once_upon_a_time", "p02_the_little_girl", "p03_one_day_a_cat", "p04_unicode_mixed"};
    const std::filesystem::path g = testing::TestDataFile(std::string("golden/stories260K/") + files[k] + ".json");
    if (g.empty()) continue;
    absl::StatusOr<JsonValue> j = ParseJson(testing::ReadFileOrDie(g));
    ASSERT_TRUE(j.ok());
    std::vector<int32_t> want;
    for (const JsonValue& v : j->Find("generated_token_ids")->array()) {
      if (static_cast<int64_t>(want.size()) < kNew) want.push_back(static_cast<int32_t>(*v.int_value()));
    }
    EXPECT_EQ(alone[k], want) << files[k];
  }

  // Together: 24 pages of 16 tokens hold about a third of what the 32
  // requests need at once, and 24 tokens per step chunk every prompt.
  CpuExecutorOptions shared_options;
  shared_options.num_pages = 24;
  absl::StatusOr<std::unique_ptr<CpuExecutor>> shared =
      CpuExecutor::Create(program->plan, program->weights, shared_options);
  ASSERT_TRUE(shared.ok()) << shared.status();
  KvPageManager pages(24, (*shared)->page_size());
  Scheduler scheduler(**shared, pages, SchedulerOptions{.token_budget = 24, .max_running = 32});
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
  std::printf("32 requests x %lld tokens: %lld steps, %lld prefill and %lld decode tokens, %lld preemptions; all equal "
              "their solo runs\n",
              (long long)kNew, (long long)s.steps, (long long)s.prefill_tokens, (long long)s.decode_tokens,
              (long long)s.preemptions);
  EXPECT_GT(s.preemptions, 0);  // the tiny pool forced recomputation
  EXPECT_TRUE(pages.CheckInvariants().ok());
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
    CpuExecutorOptions eo;
    eo.num_pages = 256;
    absl::StatusOr<std::unique_ptr<CpuExecutor>> ex = CpuExecutor::Create(program->plan, program->weights, eo);
    EXPECT_TRUE(ex.ok());
    KvPageManager pages(256, (*ex)->page_size());
    Scheduler scheduler(**ex, pages, SchedulerOptions{.token_budget = 256, .max_running = 16});
    std::vector<std::vector<int32_t>> out(prompts.size());
    auto submit = [&](size_t k) {
      ScheduledRequest req;
      req.prompt = prompts[k];
      req.sampling.temperature = 0;
      req.max_tokens = kNew;
      req.on_token = [&out, k](int32_t t, const SampledToken&) {
        out[k].push_back(t);
        return true;
      };
      EXPECT_TRUE(scheduler.Submit(std::move(req)).ok());
    };
    auto drain = [&] {
      for (absl::StatusOr<bool> more = scheduler.Step(); more.ok() && *more; more = scheduler.Step()) {
      }
    };
    if (share) {
      // The first request fills and registers the prefix pages; the other
      // fifteen, batched together, find them.
      submit(0);
      drain();
      for (size_t k = 1; k < prompts.size(); ++k) submit(k);
      drain();
    } else {
      for (size_t k = 0; k < prompts.size(); ++k) {  // one at a time, each on a fresh pool
        KvPageManager fresh(256, (*ex)->page_size());
        Scheduler solo(**ex, fresh, SchedulerOptions{.token_budget = 256, .max_running = 1});
        ScheduledRequest req;
        req.prompt = prompts[k];
        req.sampling.temperature = 0;
        req.max_tokens = kNew;
        req.on_token = [&out, k](int32_t t, const SampledToken&) {
          out[k].push_back(t);
          return true;
        };
        EXPECT_TRUE(solo.Submit(std::move(req)).ok());
        for (absl::StatusOr<bool> more = solo.Step(); more.ok() && *more; more = solo.Step()) {
        }
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

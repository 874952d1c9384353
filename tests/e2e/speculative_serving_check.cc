// Speculative decoding through the serving scheduler is exact: with the
// stories260K-q4_0-mix draft model or with n-gram lookup, greedy requests get
// llama.cpp's golden ids, alone and in a concurrent batch where speculative
// and plain requests share the steps; a batch that fills the verify budget
// decodes without drafts; and sampled requests keep the target's
// distribution (chi-square against plain sampling through the scheduler).
#include <map>

#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/serving/model_drafter.h"
#include "runtime/serving/scheduler.h"
#include "runtime/serving/step_drafter.h"
#include "runtime/util/json.h"
#include "tests/e2e/chi_square.h"
#include "tests/e2e/compiled_model.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

struct Golden {
  std::string name;
  std::vector<int32_t> prompt, ids;
};

std::vector<Golden> LoadGoldens() {
  std::vector<Golden> out;
  const std::filesystem::path dir = testing::TestDataDir() / "golden" / "stories260K";
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".json") || name.find("activations") != std::string::npos) continue;
    absl::StatusOr<JsonValue> g = ParseJson(testing::ReadFileOrDie(e.path()));
    if (!g.ok()) continue;
    Golden golden{name, {}, {}};
    for (const JsonValue& v : g->Find("prompt_token_ids")->array()) golden.prompt.push_back(*v.int_value());
    for (const JsonValue& v : g->Find("generated_token_ids")->array()) golden.ids.push_back(*v.int_value());
    out.push_back(std::move(golden));
  }
  std::sort(out.begin(), out.end(), [](const Golden& a, const Golden& b) { return a.name < b.name; });
  return out;
}

struct Outcome {
  std::vector<int32_t> ids;
  std::string reason;
  SpeculativeStats spec;
};

ScheduledRequest Greedy(const std::vector<int32_t>& prompt, int64_t max_tokens, Outcome* out, bool speculative) {
  ScheduledRequest req;
  req.prompt = prompt;
  req.max_tokens = max_tokens;
  req.sampling.temperature = 0;
  req.speculative = speculative;
  req.on_token = [out](int32_t t, const SampledToken&) {
    out->ids.push_back(t);
    return true;
  };
  req.on_finish = [out](const std::string& why, const SpeculativeStats& s) {
    out->reason = why;
    out->spec = s;
  };
  return req;
}

// A target executor and page manager, a draft executor and its manager.
struct Rig {
  std::unique_ptr<Program> target, draft;
  std::unique_ptr<CpuExecutor> target_exec, draft_exec;
  std::unique_ptr<KvPageManager> pages, draft_pages;
  std::unique_ptr<ModelDrafter> model;
  LookupStepDrafter lookup;

  bool Make(int64_t tokens) {
    target = testing::CompileTestModel("stories260K");
    draft = testing::CompileTestModel("stories260K-q4_0-mix");
    if (!target || !draft) return false;
    target_exec = testing::MakeExecutor(*target, tokens);
    draft_exec = testing::MakeExecutor(*draft, tokens);
    if (!target_exec || !draft_exec) return false;
    pages = std::make_unique<KvPageManager>(target_exec->num_pages(), target_exec->page_size());
    draft_pages = std::make_unique<KvPageManager>(draft_exec->num_pages(), draft_exec->page_size());
    model = std::make_unique<ModelDrafter>(*draft_exec, *draft_pages);
    return true;
  }
};

absl::Status Drain(Scheduler& scheduler, const std::function<void()>& after_step = nullptr) {
  while (true) {
    absl::StatusOr<bool> more = scheduler.Step();
    if (!more.ok()) return more.status();
    if (after_step) after_step();
    if (!*more) return absl::OkStatus();
  }
}

TEST(SpeculativeServingCheck, GreedyThroughTheSchedulerIsExactlyTheGoldens) {
  const std::vector<Golden> goldens = LoadGoldens();
  if (goldens.empty()) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  Rig rig;
  ASSERT_TRUE(rig.Make(1024));
  for (const bool use_model : {true, false}) {
    for (const Golden& g : goldens) {
      Scheduler scheduler(*rig.target_exec, *rig.pages, SchedulerOptions{.draft_max = 6},
                          use_model ? static_cast<StepDrafter*>(rig.model.get()) : &rig.lookup);
      Outcome out;
      ASSERT_TRUE(scheduler.Submit(Greedy(g.prompt, static_cast<int64_t>(g.ids.size()), &out, true)).ok());
      ASSERT_TRUE(Drain(scheduler).ok());
      EXPECT_EQ(out.ids, g.ids) << g.name << (use_model ? " (draft model)" : " (lookup)");
      EXPECT_EQ(out.reason, "length");
      EXPECT_LE(out.spec.accepted, out.spec.drafted);
      if (use_model) EXPECT_GT(out.spec.accepted, 0) << g.name;
      std::printf("%s, %s: %lld/%lld drafted tokens accepted, %.2f per verification; ids equal the golden\n",
                  g.name.c_str(), use_model ? "draft model" : "lookup", (long long)out.spec.accepted,
                  (long long)out.spec.drafted, out.spec.mean_accepted_length());
    }
  }
  EXPECT_EQ(rig.pages->Stats().used_pages, 0);
  EXPECT_EQ(rig.draft_pages->Stats().used_pages, 0);
}

TEST(SpeculativeServingCheck, SixteenConcurrentMixedRequestsGetTheirSoloIds) {
  const std::vector<Golden> goldens = LoadGoldens();
  Rig rig;
  if (!rig.Make(2048)) GTEST_SKIP() << "stories260K models not found under " << testing::TestDataDir();
  const Tokenizer& tok = *rig.target->tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  for (const Golden& g : goldens) prompts.push_back(g.prompt);
  const char* starts[] = {"Tom had a", "The sun was", "Once there was a big dog who", "Mom said", "A bird"};
  for (int k = 0; prompts.size() < 16; ++k) {
    prompts.push_back(tok.Encode(std::string(starts[k % 5]) + (k % 2 ? " very" : " happy"), {.add_special = true}));
  }
  constexpr int64_t kNew = 48;
  // Alone and plain.
  std::vector<std::vector<int32_t>> solo;
  for (const std::vector<int32_t>& p : prompts) {
    GenerateOptions gen;
    gen.max_new_tokens = kNew;
    gen.sampling.temperature = 0;
    absl::StatusOr<GenerateResult> r = Generate(*rig.target_exec, p, gen);
    ASSERT_TRUE(r.ok()) << r.status();
    solo.push_back(r->ids);
  }
  for (size_t k = 0; k < goldens.size(); ++k) {
    EXPECT_EQ(solo[k], std::vector<int32_t>(goldens[k].ids.begin(), goldens[k].ids.begin() + kNew));
  }
  for (const bool use_model : {true, false}) {
    SCOPED_TRACE(use_model ? "draft model" : "lookup");
    // Together: every fourth request plain, the others speculative; a 64-token
    // budget chunks the prompts next to the verifications.
    Scheduler scheduler(*rig.target_exec, *rig.pages,
                        SchedulerOptions{.token_budget = 64, .max_running = 16, .draft_max = 6, .verify_budget = 64},
                        use_model ? static_cast<StepDrafter*>(rig.model.get()) : &rig.lookup);
    std::vector<Outcome> out(prompts.size());
    for (size_t k = 0; k < prompts.size(); ++k) {
      ASSERT_TRUE(scheduler.Submit(Greedy(prompts[k], kNew, &out[k], k % 4 != 3)).ok());
    }
    int64_t mixed_steps = 0;  // steps verifying drafts next to plain decodes or prefill
    ASSERT_TRUE(Drain(scheduler, [&] {
                  const SchedulerStats s = scheduler.stats();
                  if (s.last_step_drafted > 0 && s.last_step_sequences > 1) ++mixed_steps;
                }).ok());
    int64_t drafted = 0, accepted = 0;
    for (size_t k = 0; k < prompts.size(); ++k) {
      EXPECT_EQ(out[k].ids, solo[k]) << "request " << k;
      if (k % 4 == 3) EXPECT_EQ(out[k].spec.drafted, 0);
      EXPECT_LE(out[k].spec.accepted, out[k].spec.drafted);
      drafted += out[k].spec.drafted;
      accepted += out[k].spec.accepted;
    }
    const SchedulerStats s = scheduler.stats();
    EXPECT_EQ(s.spec_drafted, drafted);
    EXPECT_EQ(s.spec_accepted, accepted);
    EXPECT_GT(mixed_steps, 0);
    if (use_model) EXPECT_GT(accepted, 0);
    std::printf("16 concurrent (12 speculative, %s): %lld steps (%lld mixing drafts with other work), %lld/%lld "
                "drafted accepted; every request equals its solo run\n",
                use_model ? "draft model" : "lookup", (long long)s.steps, (long long)mixed_steps,
                (long long)accepted, (long long)drafted);
  }
  EXPECT_EQ(rig.pages->Stats().used_pages, 0);
  EXPECT_EQ(rig.draft_pages->Stats().used_pages, 0);
}

TEST(SpeculativeServingCheck, AFullBatchDecodesWithoutDrafts) {
  Rig rig;
  if (!rig.Make(2048)) GTEST_SKIP() << "stories260K models not found under " << testing::TestDataDir();
  const Tokenizer& tok = *rig.target->tokenizer;
  // Verify budget 16: twenty decodes already fill it.
  Scheduler scheduler(*rig.target_exec, *rig.pages,
                      SchedulerOptions{.token_budget = 128, .max_running = 32, .draft_max = 6, .verify_budget = 16},
                      rig.model.get());
  std::vector<Outcome> out(20);
  for (int k = 0; k < 20; ++k) {
    ASSERT_TRUE(scheduler.Submit(Greedy(tok.Encode("Once upon a time", {.add_special = true}), 10 + 3 * k, &out[k],
                                        true))
                    .ok());
  }
  std::map<int64_t, int64_t> drafted_at;  // sequences in a step -> drafted tokens in such steps
  ASSERT_TRUE(Drain(scheduler, [&] {
                const SchedulerStats s = scheduler.stats();
                drafted_at[s.last_step_sequences] += s.last_step_drafted;
              }).ok());
  int64_t full = 0, small = 0;
  for (const auto& [n, d] : drafted_at) (n >= 16 ? full : small) += d;
  EXPECT_EQ(full, 0) << "no drafts in steps of 16 or more sequences";
  EXPECT_GT(small, 0) << "drafts once the batch has shrunk";
  // One prompt, different lengths: each output is a prefix of the longest.
  ASSERT_EQ(out[19].ids.size(), 10u + 3 * 19);
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(out[k].ids, std::vector<int32_t>(out[19].ids.begin(), out[19].ids.begin() + 10 + 3 * k)) << k;
  }
}

TEST(SpeculativeServingCheck, SampledTokensThroughTheSchedulerFollowTheTargetDistribution) {
  Rig rig;
  if (!rig.Make(2048)) GTEST_SKIP() << "stories260K models not found under " << testing::TestDataDir();
  // 3,400 independent requests after <s> (a broad distribution), 16 at a
  // time; each generated position is one draw per request and is tested on
  // its own. Drafts start 3 long (draft_max 6), cut to the 2 that leave room
  // for the target's own token: positions 1-2 are drafted and verified, 3
  // is the bonus or the correction after them.
  constexpr int kRuns = 3400;
  constexpr int kPositions = 4;
  auto sample_all = [&](StepDrafter* drafter, uint64_t seed_base, SchedulerStats* stats) {
    std::vector<std::map<int32_t, int>> counts(kPositions);
    Scheduler scheduler(*rig.target_exec, *rig.pages,
                        SchedulerOptions{.token_budget = 64, .max_running = 16, .draft_max = 6, .verify_budget = 64},
                        drafter);
    std::vector<Outcome> out(kRuns);
    for (int run = 0; run < kRuns; ++run) {
      ScheduledRequest req = Greedy({1}, kPositions, &out[run], true);
      req.sampling = SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                                    .seed = seed_base + static_cast<uint64_t>(run)};
      EXPECT_TRUE(scheduler.Submit(std::move(req)).ok());
    }
    EXPECT_TRUE(Drain(scheduler).ok());
    for (const Outcome& o : out) {
      EXPECT_EQ(o.ids.size(), static_cast<size_t>(kPositions));
      for (int k = 0; k < kPositions && k < static_cast<int>(o.ids.size()); ++k) counts[k][o.ids[k]]++;
    }
    *stats = scheduler.stats();
    return counts;
  };
  SchedulerStats plain_stats, spec_stats;
  const auto plain = sample_all(nullptr, 1000, &plain_stats);
  const auto spec = sample_all(rig.model.get(), 900000, &spec_stats);
  EXPECT_EQ(plain_stats.spec_drafted, 0);
  EXPECT_GT(spec_stats.spec_drafted, kRuns);  // most requests verified drafts
  EXPECT_GT(spec_stats.spec_accepted, 0);
  EXPECT_LT(spec_stats.spec_accepted, spec_stats.spec_drafted);  // and the rejection rule ran
  for (int k = 1; k < kPositions; ++k) {
    int bins = 0;
    const double pvalue = testing::HomogeneityP(plain[k], spec[k], &bins);
    std::printf("through the scheduler, generated position %d: %d requests each, %d bins, chi-square homogeneity p = "
                "%.3f\n",
                k, kRuns, bins, pvalue);
    EXPECT_GT(pvalue, 0.01) << "position " << k;
  }
  std::printf("speculative: %lld drafted, %lld accepted\n", (long long)spec_stats.spec_drafted,
              (long long)spec_stats.spec_accepted);
}

}  // namespace
}  // namespace kiln

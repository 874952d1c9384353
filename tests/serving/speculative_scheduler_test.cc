// Speculation inside the continuous-batching scheduler, on toy executors
// whose KV cache is real: each position's page slot holds its token, and a
// logit row is a function of every token the row's position can see through
// its block table. A wrong rollback (a stale drafted token left where a kept
// token belongs, a page released too early, a position skipped) changes the
// ids, so "equal to the solo run" checks the KV bookkeeping too.
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/executor/executor.h"
#include "runtime/serving/kv_page_manager.h"
#include "runtime/serving/model_drafter.h"
#include "runtime/serving/scheduler.h"
#include "runtime/serving/step_drafter.h"

namespace kiln {
namespace {

constexpr int64_t kVocab = 24;
constexpr int64_t kPageSize = 4;
constexpr int64_t kContext = 160;

// A model whose greedy next token is a hash of the visible context. With
// `disagree_every` > 0 it is a "draft" of the `disagree_every == 0` model:
// the same choice except where the hash says otherwise (about one position
// in disagree_every).
class ToyExecutor : public Executor {
 public:
  ToyExecutor(int64_t num_pages, int disagree_every, int64_t vocab = kVocab)
      : kv_(num_pages * kPageSize, -1), disagree_(disagree_every), vocab_(vocab) {
    plan_.model = JsonValue::MakeObject();
    plan_.model.Set("n_vocab", JsonValue::Int(vocab));
    plan_.buckets = {8, 64, 128};
    plan_.pool = {.layers = 1, .kv_heads = 1, .head_dim = 1, .page_size = kPageSize, .max_tokens = kContext};
  }

  absl::StatusOr<std::span<const float>> Step(const StepBatch& batch) override {
    absl::StatusOr<size_t> bucket = ValidateStepBatch(plan_, num_pages(), batch);
    if (!bucket.ok()) return bucket.status();
    ++steps_;
    max_tokens_seen_ = std::max<int64_t>(max_tokens_seen_, static_cast<int64_t>(batch.tokens.size()));
    const size_t seqs = batch.context_lens.size();
    auto slot = [&](size_t s, int32_t pos) {
      return batch.block_tables[s * batch.pages_per_seq + pos / kPageSize] * kPageSize + pos % kPageSize;
    };
    std::vector<size_t> seq_of(batch.tokens.size());
    for (size_t s = 0; s < seqs; ++s) {
      for (int32_t t = batch.query_starts[s]; t < batch.query_starts[s + 1]; ++t) {
        kv_[slot(s, batch.positions[t])] = batch.tokens[t];
        seq_of[t] = s;
      }
    }
    const int64_t kVocab = vocab_;
    logits_.assign(batch.logit_rows.size() * kVocab, 0.0f);
    for (size_t r = 0; r < batch.logit_rows.size(); ++r) {
      const int32_t t = batch.logit_rows[r];
      uint64_t h = 1469598103934665603ull;
      for (int32_t p = 0; p <= batch.positions[t]; ++p) {
        h = (h ^ static_cast<uint64_t>(kv_[slot(seq_of[t], p)] + 7)) * 1099511628211ull;
      }
      int64_t next = static_cast<int64_t>((h >> 20) % kVocab);
      if (disagree_ > 0 && (h >> 40) % disagree_ == 0) next = (next + 1) % kVocab;
      logits_[r * kVocab + next] = 4.0f;
      logits_[r * kVocab + (next + 5) % kVocab] = 2.0f;  // a runner-up, so sampling has a choice
    }
    return std::span<const float>(logits_);
  }
  absl::StatusOr<std::span<const int32_t>> StepGreedy(const StepBatch& batch) override {
    ++greedy_steps_;
    return Executor::StepGreedy(batch);
  }
  std::string Describe() const override { return "toy"; }
  const Plan& plan() const override { return plan_; }
  int64_t num_pages() const override { return static_cast<int64_t>(kv_.size()) / kPageSize; }

  int64_t steps() const { return steps_; }
  int64_t greedy_steps() const { return greedy_steps_; }
  int64_t max_tokens_seen() const { return max_tokens_seen_; }

 private:
  Plan plan_;
  std::vector<int32_t> kv_;
  std::vector<float> logits_;
  int disagree_;
  int64_t vocab_;
  int64_t steps_ = 0, greedy_steps_ = 0, max_tokens_seen_ = 0;
};

struct Outcome {
  std::vector<int32_t> ids;
  std::string reason;
  SpeculativeStats spec;
};

ScheduledRequest Greedy(std::vector<int32_t> prompt, int64_t max_tokens, Outcome* out, bool speculative = true) {
  ScheduledRequest req;
  req.prompt = std::move(prompt);
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

void Drain(Scheduler& scheduler, KvPageManager& pages, const std::function<void()>& after_step = nullptr) {
  for (int steps = 0;; ++steps) {
    absl::StatusOr<bool> more = scheduler.Step();
    ASSERT_TRUE(more.ok()) << more.status();
    ASSERT_TRUE(pages.CheckInvariants().ok()) << pages.CheckInvariants();
    if (after_step) after_step();
    if (!*more) return;
    ASSERT_LT(steps, 100000);
  }
}

std::vector<int32_t> Prompt(int k) {
  std::vector<int32_t> p;
  for (int i = 0; i < 3 + (k * 7) % 13; ++i) p.push_back(static_cast<int32_t>((k * 5 + i * 3) % kVocab));
  return p;
}

// Each prompt alone, without speculation: the reference ids.
std::vector<Outcome> SoloRuns(int n, int64_t max_tokens) {
  std::vector<Outcome> solo(n);
  for (int k = 0; k < n; ++k) {
    ToyExecutor target(64, 0);
    KvPageManager pages(64, kPageSize);
    Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 64, .max_running = 1});
    EXPECT_TRUE(scheduler.Submit(Greedy(Prompt(k), max_tokens + k % 5, &solo[k])).ok());
    Drain(scheduler, pages);
  }
  return solo;
}

TEST(SpeculativeScheduler, MixedSpeculativeAndPlainRequestsMatchTheirSoloRuns) {
  constexpr int kRequests = 16;
  constexpr int64_t kNew = 40;
  const std::vector<Outcome> solo = SoloRuns(kRequests, kNew);
  for (const bool use_model : {true, false}) {
    SCOPED_TRACE(use_model ? "draft model" : "n-gram lookup");
    // 40 pages of 4 tokens: less than the 16 requests need at once, so
    // speculation runs next to preemption and recompute.
    ToyExecutor target(40, 0);
    KvPageManager pages(40, kPageSize);
    ToyExecutor draft(64, 4);
    KvPageManager draft_pages(64, kPageSize);
    ModelDrafter model(draft, draft_pages);
    LookupStepDrafter lookup;
    StepDrafter* drafter = use_model ? static_cast<StepDrafter*>(&model) : &lookup;
    Scheduler scheduler(target, pages,
                        SchedulerOptions{.token_budget = 48, .max_running = 16, .draft_max = 5, .verify_budget = 48},
                        drafter);
    std::vector<Outcome> together(kRequests);
    for (int k = 0; k < kRequests; ++k) {
      // Every third request opts out: plain decodes share the steps.
      ASSERT_TRUE(scheduler.Submit(Greedy(Prompt(k), kNew + k % 5, &together[k], k % 3 != 2)).ok());
    }
    Drain(scheduler, pages);
    int64_t drafted = 0, accepted = 0;
    for (int k = 0; k < kRequests; ++k) {
      EXPECT_EQ(together[k].ids, solo[k].ids) << "request " << k;
      EXPECT_EQ(together[k].reason, "length");
      EXPECT_LE(together[k].spec.accepted, together[k].spec.drafted);
      if (k % 3 == 2) EXPECT_EQ(together[k].spec.drafted, 0) << "request " << k << " opted out";
      drafted += together[k].spec.drafted;
      accepted += together[k].spec.accepted;
    }
    const SchedulerStats s = scheduler.stats();
    EXPECT_EQ(s.spec_drafted, drafted);
    EXPECT_EQ(s.spec_accepted, accepted);
    EXPECT_GT(s.spec_verifications, 0);
    EXPECT_GT(s.preemptions, 0);  // the small pool forced recomputation
    EXPECT_LE(target.max_tokens_seen(), 48);
    if (use_model) {
      // The draft agrees with the target about three times in four.
      EXPECT_GT(accepted, drafted / 3);
      EXPECT_GT(s.spec_drafted, 100);
      EXPECT_EQ(draft_pages.Stats().used_pages, 0);  // every draft KV released
      EXPECT_TRUE(draft_pages.CheckInvariants().ok());
    }
    EXPECT_EQ(pages.Stats().used_pages, 0);
    std::printf("%s: %lld steps, %lld drafted, %lld accepted, %lld preemptions; every request equals its solo run\n",
                use_model ? "draft model" : "lookup", (long long)s.steps, (long long)s.spec_drafted,
                (long long)s.spec_accepted, (long long)s.preemptions);
  }
}

TEST(SpeculativeScheduler, TargetKvIsTruncatedToTheKeptTokensAfterEveryStep) {
  ToyExecutor target(64, 0);
  KvPageManager pages(64, kPageSize);
  ToyExecutor draft(64, 3);
  KvPageManager draft_pages(64, kPageSize);
  ModelDrafter model(draft, draft_pages);
  Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 64, .max_running = 4, .draft_max = 6}, &model);
  Outcome out;
  const std::vector<int32_t> prompt = Prompt(1);
  ASSERT_TRUE(scheduler.Submit(Greedy(prompt, 60, &out)).ok());
  int64_t seq = 1;  // the first id
  int rejected_steps = 0;
  int64_t last_drafted = 0, last_accepted = 0;
  Drain(scheduler, pages, [&] {
    if (!pages.Contains(seq)) return;
    // The KV holds exactly the prompt and the generated tokens but the
    // newest (which the next step feeds): no rejected position survives.
    const int64_t kept = static_cast<int64_t>(prompt.size() + out.ids.size()) - 1;
    EXPECT_EQ(pages.NumTokens(seq), kept);
    EXPECT_EQ(static_cast<int64_t>(pages.BlockTable(seq).size()), (kept + kPageSize - 1) / kPageSize);
    // The draft's KV holds no more than the kept tokens either.
    EXPECT_LE(draft_pages.NumTokens(seq), kept);
    const SchedulerStats s = scheduler.stats();
    if (s.spec_drafted - last_drafted > s.spec_accepted - last_accepted) ++rejected_steps;
    last_drafted = s.spec_drafted;
    last_accepted = s.spec_accepted;
  });
  EXPECT_GT(rejected_steps, 3);  // rollbacks happened
  EXPECT_EQ(out.ids.size(), 60u);
  EXPECT_EQ(out.spec.drafted, scheduler.stats().spec_drafted);
  EXPECT_NEAR(out.spec.mean_accepted_length(), static_cast<double>(out.spec.accepted) / out.spec.steps, 1e-12);
}

TEST(SpeculativeScheduler, DraftLengthFallsToZeroWhenTheBatchFillsTheVerifyBudget) {
  // 24 speculative decodes in a step with a verify budget of 16 tokens: the
  // step is past the memory-bound range, so nobody drafts. As requests
  // finish (their lengths differ) the batch shrinks below the budget and
  // drafting comes back.
  ToyExecutor target(256, 0);
  KvPageManager pages(256, kPageSize);
  LookupStepDrafter lookup;
  Scheduler scheduler(target, pages,
                      SchedulerOptions{.token_budget = 128, .max_running = 32, .draft_max = 4, .verify_budget = 16},
                      &lookup);
  constexpr int kRequests = 24;
  std::vector<Outcome> out(kRequests);
  for (int k = 0; k < kRequests; ++k) {
    // A repeating prompt gives lookup something to propose.
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back(static_cast<int32_t>((k + i % 4) % kVocab));
    ASSERT_TRUE(scheduler.Submit(Greedy(prompt, 8 + 4 * k, &out[k])).ok());
  }
  std::map<int64_t, int64_t> most_drafted_at;  // batch size -> most drafted tokens in a step of it
  int decode_steps_at_full_load = 0;
  Drain(scheduler, pages, [&] {
    const SchedulerStats s = scheduler.stats();
    if (s.last_step_sequences == 0) return;
    auto& most = most_drafted_at[s.last_step_sequences];
    most = std::max(most, s.last_step_drafted);
    if (s.last_step_drafted > 0) {
      EXPECT_LE(s.last_step_tokens, 16) << "drafts may only fill the room below the verify budget";
    }
    if (s.last_step_sequences >= 16 && s.last_step_tokens == s.last_step_sequences) ++decode_steps_at_full_load;
  });
  for (const auto& [batch, drafted] : most_drafted_at) {
    if (batch >= 16) EXPECT_EQ(drafted, 0) << "batch of " << batch;
  }
  EXPECT_GT(decode_steps_at_full_load, 3);
  int64_t small_batch_drafts = 0;
  for (const auto& [batch, drafted] : most_drafted_at) {
    if (batch <= 4) small_batch_drafts += drafted;
  }
  EXPECT_GT(small_batch_drafts, 0) << "drafting resumes once the batch is small";
  for (int k = 0; k < kRequests; ++k) EXPECT_EQ(static_cast<int64_t>(out[k].ids.size()), 8 + 4 * k);
}

TEST(SpeculativeScheduler, SampledRequestsSpeculateWithADraftDistribution) {
  // Sampling with a draft model: the rejection rule runs (q from the draft)
  // and the request still ends with exactly max_tokens tokens in the vocabulary.
  ToyExecutor target(64, 0);
  KvPageManager pages(64, kPageSize);
  ToyExecutor draft(64, 3);
  KvPageManager draft_pages(64, kPageSize);
  ModelDrafter model(draft, draft_pages);
  Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 64, .max_running = 4, .draft_max = 4}, &model);
  Outcome out;
  ScheduledRequest req = Greedy(Prompt(2), 50, &out);
  req.sampling = SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 7};
  ASSERT_TRUE(scheduler.Submit(std::move(req)).ok());
  Drain(scheduler, pages);
  EXPECT_EQ(out.reason, "length");
  ASSERT_EQ(out.ids.size(), 50u);
  for (int32_t t : out.ids) EXPECT_TRUE(t >= 0 && t < kVocab);
  EXPECT_GT(out.spec.drafted, 0);
  EXPECT_GT(out.spec.accepted, 0);
  EXPECT_LE(out.spec.accepted, out.spec.drafted);
  EXPECT_EQ(draft_pages.Stats().used_pages, 0);
}

TEST(SpeculativeScheduler, SampledRequestsAskingForLogprobsDoNotSpeculate) {
  ToyExecutor target(64, 0);
  KvPageManager pages(64, kPageSize);
  LookupStepDrafter lookup;
  Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 64, .max_running = 4}, &lookup);
  Outcome sampled, greedy;
  std::vector<int32_t> repeating = {3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4};
  ScheduledRequest a = Greedy(repeating, 20, &sampled);
  a.sampling = SamplingParams{.temperature = 1.0f, .seed = 3};
  a.logprobs = 2;
  ScheduledRequest b = Greedy(repeating, 20, &greedy);
  b.logprobs = 2;
  ASSERT_TRUE(scheduler.Submit(std::move(a)).ok());
  ASSERT_TRUE(scheduler.Submit(std::move(b)).ok());
  Drain(scheduler, pages);
  EXPECT_EQ(sampled.spec.drafted, 0);
  EXPECT_EQ(sampled.ids.size(), 20u);
  EXPECT_EQ(greedy.ids.size(), 20u);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Steps whose rows are all plain argmax (greedy, no penalty, no logprobs) ask
// the backend for ids (Executor::StepGreedy: on a GPU, R ids instead of R x
// n_vocab logits); a row that needs the distribution (logprobs, a penalty)
// makes its steps return logits. The ids are the same either way.
TEST(Scheduler, PlainGreedyStepsLetTheBackendPickTheIds) {
  constexpr int kRequests = 6;
  constexpr int64_t kNew = 24;
  const std::vector<Outcome> solo = SoloRuns(kRequests, kNew);
  {
    ToyExecutor target(64, 0);
    KvPageManager pages(64, kPageSize);
    Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 64, .max_running = 8});
    std::vector<Outcome> got(kRequests);
    for (int k = 0; k < kRequests; ++k) {
      ASSERT_TRUE(scheduler.Submit(Greedy(Prompt(k), kNew + k % 5, &got[k], /*speculative=*/false)).ok());
    }
    Drain(scheduler, pages);
    for (int k = 0; k < kRequests; ++k) EXPECT_EQ(got[k].ids, solo[k].ids) << k;
    EXPECT_GT(target.steps(), 0);
    EXPECT_EQ(target.greedy_steps(), target.steps());
  }
  for (const bool penalty : {false, true}) {
    ToyExecutor target(64, 0);
    KvPageManager pages(64, kPageSize);
    Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 64, .max_running = 8});
    std::vector<Outcome> got(kRequests);
    std::vector<float> logprobs;
    for (int k = 0; k < kRequests; ++k) {
      ScheduledRequest req = Greedy(Prompt(k), kNew + k % 5, &got[k], /*speculative=*/false);
      if (k == 0) {
        if (penalty) {
          req.sampling.repetition_penalty = 1.3f;
        } else {
          req.logprobs = 0;
          req.on_token = [&](int32_t t, const SampledToken& token) {
            got[0].ids.push_back(t);
            if (token.logprob) logprobs.push_back(*token.logprob);
            return true;
          };
        }
      }
      ASSERT_TRUE(scheduler.Submit(std::move(req)).ok());
    }
    Drain(scheduler, pages);
    for (int k = penalty ? 1 : 0; k < kRequests; ++k) EXPECT_EQ(got[k].ids, solo[k].ids) << k;
    // Request 0 has a row in every step until it finishes: those steps return logits.
    EXPECT_LT(target.greedy_steps(), target.steps() - kNew + 1) << "penalty " << penalty;
    if (!penalty) EXPECT_EQ(logprobs.size(), got[0].ids.size());
  }
}

// Over a large vocabulary the rows of a step are sampled side by side on a
// thread pool (scheduler.cc); each sequence's draws depend only on its own
// row, seed and history, so together they equal their solo runs.
TEST(Scheduler, SampledRowsOfALargeVocabularyDrawnInParallelMatchSoloRuns) {
  constexpr int64_t kLargeVocab = 40000;
  constexpr int kRequests = 12;
  constexpr int64_t kNew = 24;
  auto sampled = [](int k, Outcome* out) {
    ScheduledRequest req = Greedy(Prompt(k), kNew, out, /*speculative=*/false);
    req.sampling = SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                                  .seed = static_cast<uint64_t>(100 + k)};
    return req;
  };
  std::vector<Outcome> solo(kRequests), together(kRequests);
  for (int k = 0; k < kRequests; ++k) {
    ToyExecutor target(64, 0, kLargeVocab);
    KvPageManager pages(64, kPageSize);
    Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 64, .max_running = 1});
    ASSERT_TRUE(scheduler.Submit(sampled(k, &solo[k])).ok());
    Drain(scheduler, pages);
  }
  ToyExecutor target(160, 0, kLargeVocab);
  KvPageManager pages(160, kPageSize);
  Scheduler scheduler(target, pages, SchedulerOptions{.token_budget = 128, .max_running = kRequests});
  for (int k = 0; k < kRequests; ++k) ASSERT_TRUE(scheduler.Submit(sampled(k, &together[k])).ok());
  Drain(scheduler, pages);
  std::set<int32_t> distinct;
  for (int k = 0; k < kRequests; ++k) {
    ASSERT_EQ(solo[k].ids.size(), static_cast<size_t>(kNew)) << "request " << k;
    EXPECT_EQ(together[k].ids, solo[k].ids) << "request " << k;
    distinct.insert(solo[k].ids.begin(), solo[k].ids.end());
  }
  // Sampling, not a disguised argmax: the draws spread over the vocabulary.
  EXPECT_GT(distinct.size(), static_cast<size_t>(kRequests * kNew / 2));
  // Steps carried many sampled rows at once.
  EXPECT_LT(scheduler.stats().steps, kRequests * kNew / 4);
}

}  // namespace
}  // namespace kiln

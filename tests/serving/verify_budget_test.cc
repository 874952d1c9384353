// The verify budget is the knee of step time over step size: measured on an
// executor whose step sleeps 3 ms up to 8 tokens and 1 ms more per token past
// that, it is 8, and the scratch pages go back.
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/serving/verify_budget.h"

namespace kiln {
namespace {

class SleepyExecutor : public Executor {
 public:
  explicit SleepyExecutor(int64_t knee) : knee_(knee) {
    plan_.model = JsonValue::MakeObject();
    plan_.model.Set("n_vocab", JsonValue::Int(16));
    plan_.buckets = {64};
    plan_.pool = {.layers = 1, .kv_heads = 1, .head_dim = 1, .page_size = 16, .max_tokens = 64};
  }
  absl::StatusOr<std::span<const float>> Step(const StepBatch& batch) override {
    absl::StatusOr<size_t> bucket = ValidateStepBatch(plan_, num_pages(), batch);
    if (!bucket.ok()) return bucket.status();
    const int64_t t = static_cast<int64_t>(batch.tokens.size());
    sizes_.push_back(t);
    std::this_thread::sleep_for(std::chrono::microseconds(3000 + 1000 * std::max<int64_t>(0, t - knee_)));
    logits_.assign(batch.logit_rows.size() * 16, 0.0f);
    return std::span<const float>(logits_);
  }
  std::string Describe() const override { return "sleepy"; }
  const Plan& plan() const override { return plan_; }
  int64_t num_pages() const override { return 8; }
  const std::vector<int64_t>& sizes() const { return sizes_; }

 private:
  Plan plan_;
  int64_t knee_;
  std::vector<float> logits_;
  std::vector<int64_t> sizes_;
};

TEST(VerifyBudget, IsTheLargestStepAboutAsFastAsOneToken) {
  SleepyExecutor executor(8);
  KvPageManager pages(8, 16);
  absl::StatusOr<VerifyBudget> budget = MeasureVerifyBudget(executor, pages, 64, 1.3, 3);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->tokens, 8);
  ASSERT_EQ(budget->timings.size(), 7u);  // 1, 2, ..., 64 tokens
  EXPECT_EQ(budget->timings[6].tokens, 64);
  EXPECT_GT(budget->timings[6].seconds, 0.05);  // 3 + 56 ms
  EXPECT_EQ(pages.Stats().used_pages, 0);
  EXPECT_TRUE(pages.CheckInvariants().ok());
  EXPECT_EQ(executor.sizes().front(), 1);
}

TEST(VerifyBudget, StopsAtTheLargestPlannedStepAndNeedsPages) {
  SleepyExecutor executor(100);
  KvPageManager pages(8, 16);
  // Best of 3 per size: with one, a single late wake-up on a loaded CI
  // machine measured the 2-token step past the tolerance (budget 1).
  absl::StatusOr<VerifyBudget> budget = MeasureVerifyBudget(executor, pages, 1000, 1.3, 3);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->tokens, 64);  // the plan's largest bucket and context
  KvPageManager tiny(1, 16);      // 16 tokens of pages for a 64-token probe
  absl::StatusOr<VerifyBudget> starved = MeasureVerifyBudget(executor, tiny, 64);
  EXPECT_FALSE(starved.ok());
  EXPECT_NE(std::string(starved.status().message()).find("no pages to measure with"), std::string::npos);
}

}  // namespace
}  // namespace kiln

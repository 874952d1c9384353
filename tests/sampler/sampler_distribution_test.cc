// Draws follow the distribution they claim: chi-square goodness of fit over
// many seeded draws from a small fixed distribution, at temperature 1 and
// 0.5 and through each truncating filter (renormalised over what it keeps).
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/sampler/sampler.h"

namespace kiln {
namespace {

constexpr int kDraws = 50000;

// Token probabilities at temperature 1; all distinct so no filter meets a tie.
const std::vector<double> kProbabilities = {0.04, 0.08, 0.12, 0.16, 0.26, 0.34};

// Upper 1% points of the chi-square distribution, by degrees of freedom
// (standard tables): a statistic below it passes at p > 0.01.
double ChiSquareCritical01(int degrees_of_freedom) {
  static constexpr double kTable[] = {0.0,    6.635,  9.210,  11.345, 13.277, 15.086,
                                      16.812, 18.475, 20.090, 21.666, 23.209};
  return kTable[degrees_of_freedom];
}

std::vector<float> Logits() {
  std::vector<float> logits;
  for (double p : kProbabilities) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Draws kDraws tokens and checks the counts against `weights` (one per token,
// unnormalised; 0 = must never be drawn).
void ExpectDrawsFit(const SamplingParams& params, const std::vector<double>& weights,
                    const char* label) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(params);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const std::vector<float> logits = Logits();
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    absl::StatusOr<SampledToken> token = sampler->Sample(logits);
    ASSERT_TRUE(token.ok()) << token.status();
    ++counts[token->token];
  }

  double total_weight = 0.0;
  for (double w : weights) total_weight += w;
  double statistic = 0.0;
  int cells = 0;
  for (size_t t = 0; t < weights.size(); ++t) {
    if (weights[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << label << ": token " << t << " was filtered out";
      continue;
    }
    const double expected = kDraws * weights[t] / total_weight;
    ASSERT_GE(expected, 5.0) << "too few expected draws for the chi-square approximation";
    statistic += (counts[t] - expected) * (counts[t] - expected) / expected;
    ++cells;
  }
  const int degrees_of_freedom = cells - 1;
  ASSERT_GE(degrees_of_freedom, 1);
  const double critical = ChiSquareCritical01(degrees_of_freedom);
  std::cout << label << ": chi-square " << statistic << " with " << degrees_of_freedom
            << " degrees of freedom (1% critical value " << critical << ")\n";
  EXPECT_LT(statistic, critical) << label;
}

SamplingParams Plain(float temperature, uint64_t seed) {
  return {.temperature = temperature, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed};
}

TEST(SamplerDistribution, TemperatureOne) {
  ExpectDrawsFit(Plain(1.0f, 101), kProbabilities, "temperature 1");
}

TEST(SamplerDistribution, TemperatureHalf) {
  // softmax(log(p) / 0.5) is proportional to p^2.
  std::vector<double> squared;
  for (double p : kProbabilities) squared.push_back(p * p);
  ExpectDrawsFit(Plain(0.5f, 102), squared, "temperature 0.5");
}

TEST(SamplerDistribution, TopK) {
  SamplingParams params = Plain(1.0f, 103);
  params.top_k = 3;
  ExpectDrawsFit(params, {0, 0, 0, 0.16, 0.26, 0.34}, "top_k 3");
}

TEST(SamplerDistribution, TopP) {
  // 0.34 + 0.26 + 0.16 = 0.76 < 0.8; + 0.12 = 0.88 reaches it.
  SamplingParams params = Plain(1.0f, 104);
  params.top_p = 0.8f;
  ExpectDrawsFit(params, {0, 0, 0.12, 0.16, 0.26, 0.34}, "top_p 0.8");
}

TEST(SamplerDistribution, MinP) {
  // Threshold 0.2 * 0.34 = 0.068 drops only 0.04.
  SamplingParams params = Plain(1.0f, 105);
  params.min_p = 0.2f;
  ExpectDrawsFit(params, {0, 0.08, 0.12, 0.16, 0.26, 0.34}, "min_p 0.2");
}

TEST(SamplerDistribution, WholeChain) {
  // top-k 4, top-p 0.7, min-p 0.5 keep 0.34 and 0.26 (see sampler_test's
  // chain-order case); temperature 0.5 squares them.
  SamplingParams params = {
      .temperature = 0.5f, .top_k = 4, .top_p = 0.7f, .min_p = 0.5f, .seed = 106};
  ExpectDrawsFit(params, {0, 0, 0, 0, 0.26 * 0.26, 0.34 * 0.34}, "top_k 4, top_p 0.7, min_p 0.5, T 0.5");
}

}  // namespace
}  // namespace kiln

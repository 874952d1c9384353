// Speculative decoding against its two promises: greedy output is exactly
// plain greedy output (llama.cpp's goldens), and sampled output has the
// target's distribution (chi-square against plain sampling).
#include <cmath>
#include <map>

#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/executor/speculative.h"
#include "runtime/util/json.h"
#include "tests/e2e/compiled_model.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

struct Loaded {
  std::unique_ptr<Program> program;
  std::unique_ptr<CpuExecutor> executor;
};

Loaded Load(const std::string& tag, int64_t tokens) {
  Loaded out;
  out.program = testing::CompileTestModel(tag);
  if (out.program) out.executor = testing::MakeExecutor(*out.program, tokens);
  return out;
}

std::vector<int32_t> Ids(const JsonValue* a) {
  std::vector<int32_t> out;
  for (const JsonValue& v : a->array()) out.push_back(static_cast<int32_t>(*v.int_value()));
  return out;
}

TEST(SpeculativeCheck, GreedyWithDraftModelOrLookupIsExactlyTheGoldens) {
  const std::filesystem::path dir = testing::TestDataDir() / "golden" / "stories260K";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  Loaded target = Load("stories260K", 512);
  Loaded draft_model = Load("stories260K-q4_0-mix", 512);
  ASSERT_TRUE(target.executor && draft_model.executor);
  int cases = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 5 || name.substr(name.size() - 5) != ".json" || name.find("activations") != std::string::npos) {
      continue;
    }
    absl::StatusOr<JsonValue> g = ParseJson(testing::ReadFileOrDie(e.path()));
    ASSERT_TRUE(g.ok());
    const std::vector<int32_t> prompt = Ids(g->Find("prompt_token_ids"));
    const std::vector<int32_t> golden = Ids(g->Find("generated_token_ids"));
    SpeculativeOptions options;
    options.generate.max_new_tokens = static_cast<int64_t>(golden.size());
    options.generate.sampling.temperature = 0;
    options.draft_max = 6;

    DraftModel drafter(*draft_model.executor, options.generate.sampling);
    absl::StatusOr<SpeculativeResult> with_draft = GenerateSpeculative(*target.executor, drafter, prompt, options);
    ASSERT_TRUE(with_draft.ok()) << with_draft.status();
    EXPECT_EQ(with_draft->result.ids, golden) << name << " (draft model)";

    NgramLookupDraft lookup;
    absl::StatusOr<SpeculativeResult> with_lookup = GenerateSpeculative(*target.executor, lookup, prompt, options);
    ASSERT_TRUE(with_lookup.ok()) << with_lookup.status();
    EXPECT_EQ(with_lookup->result.ids, golden) << name << " (n-gram lookup)";

    absl::StatusOr<GenerateResult> plain = Generate(*target.executor, prompt, options.generate);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(plain->ids, with_draft->result.ids) << name;
    std::printf("%s: draft model %lld/%lld accepted (%.2f per step), lookup %lld/%lld accepted; ids equal the golden\n",
                name.c_str(), (long long)with_draft->stats.accepted, (long long)with_draft->stats.drafted,
                with_draft->stats.mean_accepted_length(), (long long)with_lookup->stats.accepted,
                (long long)with_lookup->stats.drafted);
    ++cases;
  }
  EXPECT_EQ(cases, 4);
}

// Upper regularised incomplete gamma Q(a, x): the chi-square survival
// function is Q(df/2, x/2). Series for x < a+1, continued fraction otherwise.
double GammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double lg = std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (term < sum * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - lg);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - lg) * h;
}

TEST(SpeculativeCheck, GammaQMatchesKnownChiSquareQuantiles) {
  // Upper 1% points of the chi-square distribution: df 1 -> 6.635, 10 -> 23.209, 50 -> 76.154.
  EXPECT_NEAR(GammaQ(0.5, 6.635 / 2), 0.01, 1e-4);
  EXPECT_NEAR(GammaQ(5.0, 23.209 / 2), 0.01, 1e-4);
  EXPECT_NEAR(GammaQ(25.0, 76.154 / 2), 0.01, 1e-4);
}

// Two-sample chi-square homogeneity p-value; tokens seen fewer than 10
// times in both samples together share one bin.
double HomogeneityP(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b, int* bins_out) {
  std::map<int32_t, std::pair<double, double>> bins;
  std::pair<double, double> rare{0, 0};
  std::map<int32_t, int> all = a;
  for (auto [t, n] : b) all[t] += n;
  for (auto [t, n] : all) {
    const double na = a.count(t) ? a.at(t) : 0, nb = b.count(t) ? b.at(t) : 0;
    if (n < 10) {
      rare.first += na;
      rare.second += nb;
    } else {
      bins[t] = {na, nb};
    }
  }
  if (rare.first + rare.second > 0) bins[-1] = rare;
  double ta = 0, tb = 0;
  for (auto& [t, c] : bins) {
    ta += c.first;
    tb += c.second;
  }
  double chi2 = 0;
  for (auto& [t, c] : bins) {
    const double total = c.first + c.second;
    const double ea = total * ta / (ta + tb), eb = total * tb / (ta + tb);
    chi2 += (c.first - ea) * (c.first - ea) / ea + (c.second - eb) * (c.second - eb) / eb;
  }
  const int df = static_cast<int>(bins.size()) - 1;
  *bins_out = static_cast<int>(bins.size());
  return GammaQ(df / 2.0, chi2 / 2.0);
}

TEST(SpeculativeCheck, SampledTokensFollowTheTargetDistribution) {
  Loaded target = Load("stories260K", 64);
  Loaded draft_model = Load("stories260K-q4_0-mix", 64);
  if (!target.executor || !draft_model.executor) GTEST_SKIP() << "stories260K models not found";
  // Independent runs with different seeds; the token at each generated
  // position is one independent draw per run, so each position is tested
  // alone. Position 0 comes from the prefill in both methods; positions 1-3
  // go through drafting and verification: 3,400 runs give 10,200 of those.
  constexpr int kRuns = 3400;
  constexpr int kPositions = 4;
  const std::vector<int32_t> prompt = {1};  // <s>: the start of a story, a broad distribution
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  std::map<int32_t, int> plain[kPositions], spec[kPositions];
  for (int run = 0; run < kRuns; ++run) {
    SpeculativeOptions options;
    options.generate.max_new_tokens = kPositions;
    options.generate.sampling = params;
    options.generate.sampling.seed = 1000 + run;
    options.draft_max = 3;
    absl::StatusOr<GenerateResult> p = Generate(*target.executor, prompt, options.generate);
    ASSERT_TRUE(p.ok()) << p.status();
    options.generate.sampling.seed = 900000 + run;
    SamplingParams draft_params = params;
    draft_params.seed = 500000 + run;
    DraftModel drafter(*draft_model.executor, draft_params);
    absl::StatusOr<SpeculativeResult> s = GenerateSpeculative(*target.executor, drafter, prompt, options);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int k = 0; k < kPositions; ++k) {
      plain[k][p->ids[k]]++;
      spec[k][s->result.ids[k]]++;
    }
  }
  for (int k = 1; k < kPositions; ++k) {
    int bins = 0;
    const double pvalue = HomogeneityP(plain[k], spec[k], &bins);
    std::printf("generated position %d: %d runs each, %d bins, chi-square homogeneity p = %.3f\n", k, kRuns, bins,
                pvalue);
    EXPECT_GT(pvalue, 0.01) << "position " << k;
  }
}

}  // namespace
}  // namespace kiln

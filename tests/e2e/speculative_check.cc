// Speculative decoding against its two promises: greedy output is exactly
// plain greedy output (llama.cpp's goldens), and sampled output has the
// target's distribution (chi-square against plain sampling).
#include <map>

#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/executor/speculative.h"
#include "runtime/util/json.h"
#include "tests/e2e/chi_square.h"
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

// A draft whose cycles give fewer tokens per second than plain steps is
// dropped after the warm-up, probed again after kProbeEvery plain steps (then
// twice as many), and taken back when a probe pays. The first drafted cycle after plain steps
// (the draft catching up) is never measured: here it takes 100 s.
TEST(SpeculativeCheck, DraftGateDropsADraftThatDoesNotPayAndProbesIt) {
  DraftGate gate;
  EXPECT_FALSE(gate.DraftNext()) << "the first cycle measures a plain step";
  gate.ObservePlain(1.0);
  ASSERT_TRUE(gate.DraftNext());
  gate.ObserveDrafted(1, 100.0);  // catching up: not measured
  for (int i = 0; i < DraftGate::kWarmup; ++i) {
    EXPECT_TRUE(gate.DraftNext()) << "warm-up cycle " << i;
    EXPECT_EQ(gate.MaxDraftLength(), DraftGate::kMeasureLength) << "warm-up drafts are short";
    gate.ObserveDrafted(2, 3.0);  // 0.67 tokens/s against 1 for plain steps
  }
  for (int i = 1; i < DraftGate::kProbeEvery; ++i) {
    EXPECT_FALSE(gate.DraftNext()) << "plain step " << i;
    gate.ObservePlain(1.0);
  }
  EXPECT_FALSE(gate.DraftNext());
  gate.ObservePlain(1.0);
  EXPECT_TRUE(gate.DraftNext()) << "the probe after " << DraftGate::kProbeEvery << " plain steps";
  EXPECT_EQ(gate.MaxDraftLength(), DraftGate::kMeasureLength) << "a probe drafts short";
  gate.ObserveDrafted(1, 100.0);
  EXPECT_TRUE(gate.DraftNext()) << "the probe's measured cycle";
  EXPECT_EQ(gate.MaxDraftLength(), DraftGate::kMeasureLength);
  gate.ObserveDrafted(2, 3.0);
  EXPECT_FALSE(gate.DraftNext()) << "the probe did not pay";
  // A probe that pays (6 tokens in 1.5 s) brings drafting back: after twice
  // kProbeEvery plain steps (the first probe did not pay), its catch-up
  // cycle and its measured one.
  for (int i = 0; i < 2 * DraftGate::kProbeEvery; ++i) {
    EXPECT_FALSE(gate.DraftNext()) << "plain step " << i << " after the second probe";
    gate.ObservePlain(1.0);
  }
  ASSERT_TRUE(gate.DraftNext());
  gate.ObserveDrafted(6, 100.0);
  ASSERT_TRUE(gate.DraftNext());
  gate.ObserveDrafted(6, 1.5);  // averages: 3 tokens in 2.6 s, 1.14 tokens/s
  EXPECT_TRUE(gate.DraftNext());
}

// Within kMargin of plain steps' rate (0.97 tokens/s against 1) drafting
// goes on, so noise around a break-even pair does not switch it on and off.
TEST(SpeculativeCheck, DraftGateKeepsADraftNearBreakEven) {
  DraftGate gate;
  gate.ObservePlain(1.0);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(gate.DraftNext()) << "cycle " << i;
    gate.ObserveDrafted(97, 100.0);
  }
}

TEST(SpeculativeCheck, DraftGateKeepsADraftThatPays) {
  DraftGate gate;
  gate.ObservePlain(1.0);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(gate.DraftNext()) << "cycle " << i;
    gate.ObserveDrafted(3, i == 0 ? 30.0 : 1.2);  // 2.5 tokens/s against 1, after a slow catch-up
  }
  EXPECT_GT(gate.MaxDraftLength(), 8) << "steady drafting leaves the length to the acceptance rule";
}

TEST(SpeculativeCheck, GammaQMatchesKnownChiSquareQuantiles) {
  // Upper 1% points of the chi-square distribution: df 1 -> 6.635, 10 -> 23.209, 50 -> 76.154.
  EXPECT_NEAR(testing::GammaQ(0.5, 6.635 / 2), 0.01, 1e-4);
  EXPECT_NEAR(testing::GammaQ(5.0, 23.209 / 2), 0.01, 1e-4);
  EXPECT_NEAR(testing::GammaQ(25.0, 76.154 / 2), 0.01, 1e-4);
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
    const double pvalue = testing::HomogeneityP(plain[k], spec[k], &bins);
    std::printf("generated position %d: %d runs each, %d bins, chi-square homogeneity p = %.3f\n", k, kRuns, bins,
                pvalue);
    EXPECT_GT(pvalue, 0.01) << "position " << k;
  }
}

}  // namespace
}  // namespace kiln

// kiln's perplexity (runtime/executor/perplexity.h) against llama.cpp's
// llama-perplexity on the same files and text (../shared/testdata/golden/
// perplexity): the running perplexity after each chunk and the final
// estimate with its error, and, for the whole text as one sequence, each
// token's log-probability.
#include <cmath>
#include <optional>

#include "gtest/gtest.h"
#include "runtime/executor/perplexity.h"
#include "runtime/util/json.h"
#include "tests/e2e/compiled_model.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

struct PerplexityGolden {
  std::vector<int32_t> ids;      // the text with BOS, as llama.cpp tokenised it
  std::vector<double> running;   // llama-perplexity -c 128, 4 decimals
  double final_error = 0;        // its "+/-"
  std::vector<double> logprobs;  // whole text, one sequence
  double mean_nll = 0;
};

std::optional<PerplexityGolden> ReadPerplexityGolden(const std::string& tag) {
  const std::filesystem::path path = testing::TestDataFile("golden/perplexity/ppl_" + tag + ".json");
  if (path.empty()) return std::nullopt;
  absl::StatusOr<JsonValue> j = ParseJson(testing::ReadFileOrDie(path));
  EXPECT_TRUE(j.ok()) << j.status();
  if (!j.ok()) return std::nullopt;
  PerplexityGolden g;
  const JsonValue& llama = *j->Find("llama_perplexity");
  EXPECT_EQ(*llama.Find("n_ctx")->int_value(), 128);
  for (const JsonValue& v : llama.Find("running_ppl_after_each_chunk")->array()) g.running.push_back(v.number());
  g.final_error = llama.Find("final_ppl_stderr")->number();
  const JsonValue& whole = *j->Find("full_sequence");
  for (const JsonValue& v : whole.Find("token_ids")->array()) g.ids.push_back(static_cast<int32_t>(*v.int_value()));
  for (const JsonValue& v : whole.Find("token_logprobs")->array()) g.logprobs.push_back(v.number());
  g.mean_nll = whole.Find("mean_nll")->number();
  return g;
}

// A model's perplexity golden and its program compiled in memory; nullopt
// where either is missing.
struct PerplexityCase {
  PerplexityGolden golden;
  std::unique_ptr<Program> program;
};

std::optional<PerplexityCase> LoadCase(const std::string& tag) {
  std::optional<PerplexityGolden> g = ReadPerplexityGolden(tag);
  std::unique_ptr<Program> program = g ? testing::CompileTestModel(tag) : nullptr;
  if (program == nullptr) return std::nullopt;
  return PerplexityCase{*std::move(g), std::move(program)};
}

// Bounds by model (running, final and error relative; log-probabilities and
// mean NLL absolute): f32 and f16 weights multiply as llama.cpp's CPU path
// does (its 4 printed decimals; whole text: worst token 3.4e-5 f32, 7.8e-3
// f16, measured); the quantised files differ in how each engine rounds the
// activations of their integer products, which moves a chunk's perplexity
// by up to ~0.4% (measured: q8_0-mix's first chunk 3.2956 against 3.3086),
// the final estimate by ~3e-5, a token's log-probability by up to 0.2 and
// the whole text's mean NLL by ~1.4e-3.
struct Bounds {
  const char* tag;
  double running, final_ppl, error, logprob, mean_nll;
};
constexpr Bounds kBounds[] = {
    {"stories260K", 1e-4, 1e-4, 1e-4, 1e-4, 1e-5},
    {"stories260K-f16", 3e-4, 1e-4, 1e-4, 2e-2, 1e-4},
    {"stories260K-q8_0-mix", 1e-2, 1e-3, 5e-3, 0.3, 3e-3},
    {"stories260K-q4_0-mix", 1e-2, 1e-3, 5e-3, 0.3, 3e-3},
};

TEST(PerplexityCheck, ChunksAsLlamaPerplexity) {
  int models = 0;
  for (const Bounds& b : kBounds) {
    SCOPED_TRACE(b.tag);
    const std::optional<PerplexityCase> c = LoadCase(b.tag);
    if (!c) continue;
    const PerplexityGolden* g = &c->golden;
    const std::unique_ptr<CpuExecutor> ex = testing::MakeExecutor(*c->program, 128);
    ASSERT_NE(ex, nullptr);
    PerplexityOptions options;
    options.context = 128;
    options.bos = g->ids.front();
    std::vector<double> seen;
    absl::StatusOr<PerplexityResult> r = Perplexity(*ex, g->ids, options, [&](int64_t chunk, double ppl) {
      EXPECT_EQ(chunk, static_cast<int64_t>(seen.size()));
      seen.push_back(ppl);
    });
    ASSERT_TRUE(r.ok()) << r.status();
    // floor(793 / 128) = 6 chunks, positions 64..126 of each scored.
    EXPECT_EQ(r->tokens, 793);
    EXPECT_EQ(r->chunks, 6);
    EXPECT_EQ(r->scored, 6 * 63);
    ASSERT_EQ(r->running_ppl.size(), g->running.size());
    EXPECT_EQ(seen, r->running_ppl);
    double worst = 0;
    for (size_t i = 0; i < g->running.size(); ++i) {
      const double rel = std::fabs(r->running_ppl[i] - g->running[i]) / g->running[i];
      EXPECT_LE(rel, b.running) << "chunk " << i + 1 << ": " << r->running_ppl[i] << " against " << g->running[i];
      worst = std::max(worst, rel);
    }
    EXPECT_DOUBLE_EQ(r->ppl, r->running_ppl.back());
    EXPECT_LE(std::fabs(r->ppl - g->running.back()) / g->running.back(), b.final_ppl) << r->ppl;
    EXPECT_LE(std::fabs(r->ppl_error - g->final_error) / g->final_error, b.error) << r->ppl_error;
    std::printf("[ measure  ] %-20s PPL %.4f +/- %.5f (llama.cpp %.4f +/- %.5f), worst chunk %.1e relative\n", b.tag,
                r->ppl, r->ppl_error, g->running.back(), g->final_error, worst);
    ++models;
  }
  if (models == 0) GTEST_SKIP() << "no perplexity goldens under " << testing::TestDataDir();
}

TEST(PerplexityCheck, WholeTextTokenLogprobsAsTheGolden) {
  int models = 0;
  for (const Bounds& b : kBounds) {
    SCOPED_TRACE(b.tag);
    const std::optional<PerplexityCase> c = LoadCase(b.tag);
    if (!c) continue;
    const PerplexityGolden* g = &c->golden;
    const std::unique_ptr<CpuExecutor> ex = testing::MakeExecutor(*c->program, static_cast<int64_t>(g->ids.size()));
    ASSERT_NE(ex, nullptr);
    PerplexityOptions options;
    options.whole = true;
    absl::StatusOr<PerplexityResult> r = Perplexity(*ex, g->ids, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->chunks, 1);
    ASSERT_EQ(r->token_logprobs.size(), g->logprobs.size());
    double worst = 0;
    for (size_t i = 0; i < g->logprobs.size(); ++i) {
      worst = std::max(worst, std::fabs(r->token_logprobs[i] - g->logprobs[i]));
    }
    EXPECT_LE(worst, b.logprob);
    EXPECT_LE(std::fabs(r->mean_nll - g->mean_nll), b.mean_nll) << r->mean_nll << " against " << g->mean_nll;
    std::printf("[ measure  ] %-20s whole text: mean NLL %.6f (golden %.6f), worst token |ln p - golden| %.1e\n", b.tag,
                r->mean_nll, g->mean_nll, worst);
    ++models;
  }
  if (models == 0) GTEST_SKIP() << "no perplexity goldens under " << testing::TestDataDir();
}

// KL divergence from stories260K (f32) of each file's next-token
// distributions, against llama.cpp 0c1e570's `llama-perplexity -c 128 -b 128
// -t 1 -ctk f32 -ctv f32 --kl-divergence-base` (on stories260K) then
// `--kl-divergence` (on each file), run on the development machine in
// session 49 (docs/perplexity.md): mean KLD 0.000003 (f16), 0.000626 +/-
// 0.000034 (q8_0-mix), 0.068853 +/- 0.004702 (q4_0-mix); same top 100%,
// 98.677 +/- 0.588%, 86.508 +/- 1.760%. kiln's must lie within two of
// llama.cpp's standard errors (the files' activations are rounded to int8
// otherwise than llama.cpp's), and each model's perplexity is exactly what
// Perplexity gives it alone. A model against itself: 0 and 100%.
TEST(PerplexityCheck, KlDivergenceAsLlamaPerplexity) {
  const std::optional<PerplexityCase> base = LoadCase("stories260K");
  if (!base) GTEST_SKIP() << "no stories260K perplexity golden under " << testing::TestDataDir();
  const std::unique_ptr<CpuExecutor> ref = testing::MakeExecutor(*base->program, 128);
  ASSERT_NE(ref, nullptr);
  PerplexityOptions options;
  options.context = 128;
  options.bos = base->golden.ids.front();
  const std::vector<int32_t>& ids = base->golden.ids;
  {
    const std::unique_ptr<CpuExecutor> same = testing::MakeExecutor(*base->program, 128);
    absl::StatusOr<KlDivergenceResult> k = KlDivergence(*ref, *same, ids, options);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(k->mean_kld, 0.0);
    EXPECT_EQ(k->same_top, 1.0);
    EXPECT_EQ(k->test.scored, 6 * 63);
  }
  struct Peer {
    const char* tag;
    double kld, kld_error, same_top, same_top_error;
  };
  for (const Peer& peer : {Peer{"stories260K-f16", 0.000003, 0.000001, 1.0, 0.0},
                           Peer{"stories260K-q8_0-mix", 0.000626, 0.000034, 0.98677, 0.00588},
                           Peer{"stories260K-q4_0-mix", 0.068853, 0.004702, 0.86508, 0.01760}}) {
    SCOPED_TRACE(peer.tag);
    const std::unique_ptr<Program> program = testing::CompileTestModel(peer.tag);
    if (program == nullptr) continue;
    const std::unique_ptr<CpuExecutor> test = testing::MakeExecutor(*program, 128);
    ASSERT_NE(test, nullptr);
    absl::StatusOr<KlDivergenceResult> k = KlDivergence(*ref, *test, ids, options);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_NEAR(k->mean_kld, peer.kld, 2 * peer.kld_error + 2e-6);
    // One position in 378 is 0.26%: f16 may flip a near tie.
    EXPECT_NEAR(k->same_top, peer.same_top, 2 * peer.same_top_error + 0.003);
    absl::StatusOr<PerplexityResult> alone = Perplexity(*test, ids, options);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(k->test.running_ppl, alone->running_ppl);
    EXPECT_EQ(k->test.ppl, alone->ppl);
    EXPECT_EQ(k->reference.ppl, Perplexity(*ref, ids, options)->ppl);
    std::printf("[ measure  ] %-20s KLD %.6f +/- %.6f (llama.cpp %.6f), same top %.3f%% (llama.cpp %.3f%%)\n", peer.tag,
                k->mean_kld, k->kld_error, peer.kld, 100 * k->same_top, 100 * peer.same_top);
  }
}

// The text's tokens and each chunk's first token follow the vocabulary, as
// llama-perplexity's: stories260K adds BOS (the golden's 793 tokens); the
// same vocabulary without it (as Qwen's) gets no BOS in front and keeps
// each chunk's first token, so its chunks are the text's own tokens.
TEST(PerplexityCheck, TokensAndChunkStartsFollowTheVocabulary) {
  const std::optional<PerplexityGolden> g = ReadPerplexityGolden("stories260K");
  const std::filesystem::path text_path = testing::TestDataFile("golden/perplexity/text_a.txt");
  const std::unique_ptr<Program> program = g && !text_path.empty() ? testing::CompileTestModel("stories260K") : nullptr;
  if (program == nullptr) GTEST_SKIP() << "no stories260K perplexity golden under " << testing::TestDataDir();
  const std::string text = testing::ReadFileOrDie(text_path);
  const Tokenizer& with_bos = *program->tokenizer;
  EXPECT_EQ(PerplexityTokens(with_bos, text), g->ids);
  EXPECT_EQ(PerplexityChunkBos(with_bos), with_bos.bos_id());

  VocabSpec spec = with_bos.spec();
  spec.add_bos = false;
  absl::StatusOr<std::unique_ptr<Tokenizer>> without = Tokenizer::FromSpec(spec);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(PerplexityTokens(**without, text), std::vector<int32_t>(g->ids.begin() + 1, g->ids.end()));
  EXPECT_EQ(PerplexityChunkBos(**without), -1);
  // Chunks without BOS score the text's own tokens: a chunk starting
  // mid-sentence is not the BOS-led chunk llama.cpp's golden scored.
  const std::unique_ptr<CpuExecutor> ex = testing::MakeExecutor(*program, 128);
  ASSERT_NE(ex, nullptr);
  PerplexityOptions options;
  options.context = 128;
  options.bos = PerplexityChunkBos(**without);
  absl::StatusOr<PerplexityResult> r = Perplexity(*ex, PerplexityTokens(**without, text), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, 792);
  EXPECT_GT(std::fabs(r->running_ppl.front() - g->running.front()), 1e-3) << "chunk 1 scored as with BOS";
}

// What cannot be scored is refused, naming the sizes.
TEST(PerplexityCheck, RefusesWhatCannotBeScored) {
  const std::unique_ptr<Program> program = testing::CompileTestModel("stories260K");
  if (program == nullptr) GTEST_SKIP() << "no stories260K under " << testing::TestDataDir();
  const std::unique_ptr<CpuExecutor> ex = testing::MakeExecutor(*program, 128);
  ASSERT_NE(ex, nullptr);
  const std::vector<int32_t> ids(100, 5);
  PerplexityOptions options;
  options.context = 128;
  absl::StatusOr<PerplexityResult> r = Perplexity(*ex, ids, options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("100 tokens, fewer than one chunk of 128"), std::string::npos) << r.status();
  options.context = 3;
  EXPECT_EQ(Perplexity(*ex, ids, options).status().code(), absl::StatusCode::kInvalidArgument);
  options.context = 256;  // more than the pool's 128 positions
  r = Perplexity(*ex, std::vector<int32_t>(300, 5), options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("KV pool holds 128 tokens"), std::string::npos) << r.status();
  options.context = 100000;
  EXPECT_EQ(Perplexity(*ex, ids, options).status().code(), absl::StatusCode::kOutOfRange);
  options = {};
  options.whole = true;
  EXPECT_EQ(Perplexity(*ex, std::vector<int32_t>(1, 5), options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.context = 64;
  std::vector<int32_t> bad = ids;
  bad[70] = static_cast<int32_t>(ex->n_vocab());
  r = Perplexity(*ex, bad, options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("outside the model's vocabulary"), std::string::npos) << r.status();
  // --chunks caps the chunks evaluated.
  options = {};
  options.context = 64;
  options.max_chunks = 1;
  r = Perplexity(*ex, ids, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chunks, 1);
  EXPECT_EQ(r->scored, 31);
}

}  // namespace
}  // namespace kiln

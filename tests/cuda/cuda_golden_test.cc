// The CUDA executor end to end on artifacts compiled ahead of time with
// --target cuda:sm_90 (scripts/gpu/prepare.sh writes them to
// $KILN_CUDA_ARTIFACTS): greedy ids of stories260K equal llama.cpp's
// goldens, every model's greedy ids equal the CPU executor's (and, batched by
// the scheduler, their solo runs), prompt logits
// agree, PTX runs where the cubin's SM differs, and an SM the GPU cannot run
// is a clear error. Skips without a GPU or without the artifacts.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/match.h"
#include "codegen/ptx/ptx_codegen.h"
#include "gtest/gtest.h"
#include "runtime/backend/backend.h"
#include "runtime/cuda/cuda_bundle.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/cuda_executor.h"
#include "runtime/executor/cpu_executor.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/perplexity.h"
#include "runtime/util/json.h"
#include "tests/cuda/single_op_plans.h"
#include "tests/e2e/batched_check.h"
#include "tests/e2e/golden_cases.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

std::vector<int32_t> Ids(const JsonValue& a) {
  std::vector<int32_t> out;
  for (const JsonValue& v : a.array()) out.push_back(static_cast<int32_t>(*v.int_value()));
  return out;
}

class CudaGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
    if (!ctx.ok()) GTEST_SKIP() << "no CUDA GPU here: " << ctx.status().message();
    sm_ = (*ctx)->sm();
    const char* dir = std::getenv("KILN_CUDA_ARTIFACTS");
    if (dir == nullptr) GTEST_SKIP() << "KILN_CUDA_ARTIFACTS is not set (scripts/gpu/prepare.sh makes them)";
    artifacts_ = dir;
  }
  std::unique_ptr<Program> Load(const std::string& tag) {
    const std::filesystem::path path = artifacts_ / (tag + ".kiln");
    if (!std::filesystem::exists(path)) return nullptr;
    absl::StatusOr<Program> p = LoadArtifactProgram(path.string());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::make_unique<Program>(*std::move(p)) : nullptr;
  }
  std::vector<std::filesystem::path> Cases(const std::string& tag) {
    std::vector<std::filesystem::path> out;
    const std::filesystem::path dir = testing::TestDataDir() / "golden" / tag;
    if (!std::filesystem::exists(dir)) return out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (absl::EndsWith(n, ".json") && !absl::StrContains(n, "activations")) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::unique_ptr<Executor> Gpu(const Program& p) {
    BackendOptions o;
    o.num_pages = 32;
    absl::StatusOr<std::unique_ptr<Executor>> ex = CreateCudaExecutor(p, o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return ex.ok() ? *std::move(ex) : nullptr;
  }
  std::unique_ptr<Executor> Cpu(const Program& p) {
    CpuExecutorOptions o;
    o.num_pages = 32;
    o.activations = cpu::Activations::kF32;  // the exact reference
    absl::StatusOr<std::unique_ptr<CpuExecutor>> ex = CpuExecutor::Create(p.plan, p.weights, o);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return ex.ok() ? std::unique_ptr<Executor>(std::move(*ex)) : nullptr;
  }

  int sm_ = 0;
  std::filesystem::path artifacts_;
};

absl::StatusOr<GenerateResult> Greedy(Executor& ex, const std::vector<int32_t>& prompt, size_t n) {
  GenerateOptions options;
  options.max_new_tokens = static_cast<int64_t>(n);
  options.sampling.temperature = 0;
  return Generate(ex, prompt, options);
}

// stories260K-kvf16 is stories260K compiled with an f16 KV cache
// (scripts/gpu/prepare.sh): read against stories260K's goldens wherever
// llama.cpp found its own f16 cache gave them too.
TEST_F(CudaGolden, GreedyIdsEqualLlamaCppAndTheCpu) {
  int checked = 0;
  for (const std::string tag :
       {"stories260K", "stories260K-kvf16", "stories260K-f16", "stories260K-q8_0-mix", "stories260K-q4_0-mix"}) {
    std::unique_ptr<Program> program = Load(tag);
    if (!program) continue;
    const bool f16_kv = tag == "stories260K-kvf16";
    EXPECT_EQ(program->plan.pool.f16, f16_kv) << tag;
    std::unique_ptr<Executor> gpu = Gpu(*program), cpu = Cpu(*program);
    ASSERT_TRUE(gpu && cpu);
    EXPECT_TRUE(absl::StartsWith(gpu->Describe(), "cuda (")) << gpu->Describe();
    for (const auto& path : Cases(f16_kv ? "stories260K" : tag)) {
      absl::StatusOr<JsonValue> j = ParseJson(testing::ReadFileOrDie(path));
      ASSERT_TRUE(j.ok()) << j.status();
      const std::vector<int32_t> prompt = Ids(*j->Find("prompt_token_ids"));
      const std::vector<int32_t> golden = Ids(*j->Find("generated_token_ids"));
      absl::StatusOr<GenerateResult> g = Greedy(*gpu, prompt, golden.size());
      ASSERT_TRUE(g.ok()) << g.status();
      absl::StatusOr<GenerateResult> c = Greedy(*cpu, prompt, golden.size());
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(g->ids, c->ids) << tag << " " << path.filename();
      if (tag == "stories260K" || (f16_kv && testing::SameTokensWithF16KvCache(*j))) {
        EXPECT_EQ(g->ids, golden) << tag << " " << path.filename();
      }
      const double err = testing::RelativeL2(g->last_prompt_logits, c->last_prompt_logits);
      EXPECT_LT(err, 1e-4) << tag << " " << path.filename();
      std::printf("%s %s: %zu ids, %s llama.cpp's; prompt logits vs cpu relative L2 %.2e\n", tag.c_str(),
                  path.filename().c_str(), g->ids.size(), g->ids == golden ? "equal to" : "differ from", err);
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no artifacts or goldens under " << artifacts_;
}

// Speculative greedy decoding on the GPU (the draft model on the GPU too, and
// n-gram lookup) gives llama.cpp's goldens.
TEST_F(CudaGolden, SpeculativeGreedyWithDraftOrLookupIsTheGoldens) {
  std::unique_ptr<Program> target = Load("stories260K"), draft = Load("stories260K-q4_0-mix");
  if (!target || !draft) GTEST_SKIP() << "no stories260K / stories260K-q4_0-mix artifacts";
  std::unique_ptr<Executor> target_gpu = Gpu(*target), draft_gpu = Gpu(*draft);
  ASSERT_TRUE(target_gpu && draft_gpu);
  const std::vector<testing::GoldenCase> cases = testing::GoldenCases("stories260K");
  EXPECT_EQ(cases.size(), 4u);
  testing::ExpectSpeculativeGreedyIsTheGoldens(*target_gpu, *draft_gpu, cases, "CUDA");
}

// 32 requests batched by the scheduler on the GPU (ragged steps, chunked
// prefill, forced preemption) get the ids they get alone there.
TEST_F(CudaGolden, ThirtyTwoConcurrentGreedyRequestsMatchTheirSoloRuns) {
  std::unique_ptr<Program> program = Load("stories260K");
  if (!program) GTEST_SKIP() << "no stories260K artifact";
  BackendOptions solo_options, shared_options;
  solo_options.num_pages = 16;
  shared_options.num_pages = testing::kBatchedCheckPages;
  absl::StatusOr<std::unique_ptr<Executor>> solo = CreateCudaExecutor(*program, solo_options);
  ASSERT_TRUE(solo.ok()) << solo.status();
  absl::StatusOr<std::unique_ptr<Executor>> shared = CreateCudaExecutor(*program, shared_options);
  ASSERT_TRUE(shared.ok()) << shared.status();
  testing::ExpectBatchedGreedyEqualsSolo(*program, **solo, **shared);
}

// StepGreedy picks ids on the device: they equal the argmax (lowest id on
// ties) of Step's logits for the same steps, over prefill and decode.
TEST_F(CudaGolden, StepGreedyIsTheArgmaxOfStepsLogits) {
  std::unique_ptr<Program> program = Load("stories260K");
  if (!program) GTEST_SKIP() << "no stories260K artifact";
  std::unique_ptr<Executor> a = Gpu(*program), b = Gpu(*program);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 290, 1083, 354, 352, 2001 % 512, 17, 99};
  std::vector<int32_t> table(32);
  for (int i = 0; i < 32; ++i) table[i] = i;
  const int64_t vocab = a->n_vocab();
  // A prefill of 8 tokens asking for three rows, then single-token decodes.
  std::vector<StepBatch> steps;
  {
    StepBatch s;
    s.tokens.assign(ids.begin(), ids.begin() + 8);
    for (int32_t i = 0; i < 8; ++i) s.positions.push_back(i);
    s.query_starts = {0, 8};
    s.context_lens = {8};
    s.block_tables = table;
    s.pages_per_seq = 32;
    s.logit_rows = {7, 0, 3};
    steps.push_back(s);
  }
  for (int32_t p = 8; p < static_cast<int32_t>(ids.size()); ++p) {
    StepBatch s;
    s.tokens = {ids[p]};
    s.positions = {p};
    s.query_starts = {0, 1};
    s.context_lens = {p + 1};
    s.block_tables = table;
    s.pages_per_seq = 32;
    s.logit_rows = {0};
    steps.push_back(s);
  }
  for (const StepBatch& s : steps) {
    absl::StatusOr<std::span<const float>> logits = a->Step(s);
    ASSERT_TRUE(logits.ok()) << logits.status();
    std::vector<int32_t> want;
    for (size_t r = 0; r < s.logit_rows.size(); ++r) {
      const float* row = logits->data() + r * vocab;
      want.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
    absl::StatusOr<std::span<const int32_t>> got = b->StepGreedy(s);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(std::vector<int32_t>(got->begin(), got->end()), want);
  }
}

TEST_F(CudaGolden, PtxRunsWhereTheCubinIsForAnotherSm) {
  std::unique_ptr<Program> program = Load("stories260K");
  if (!program) GTEST_SKIP() << "no stories260K artifact";
  absl::StatusOr<std::vector<uint8_t>> sm80 = codegen::ptx::GenerateCudaKernels(program->plan, "cuda:sm_80");
  ASSERT_TRUE(sm80.ok()) << sm80.status();
  program->kernels = {{"cuda:sm_80", *sm80}};
  std::unique_ptr<Executor> gpu = Gpu(*program), cpu = Cpu(*program);
  ASSERT_TRUE(gpu && cpu);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  absl::StatusOr<GenerateResult> g = Greedy(*gpu, prompt, 20), c = Greedy(*cpu, prompt, 20);
  ASSERT_TRUE(g.ok() && c.ok());
  EXPECT_EQ(g->ids, c->ids);
}

// llama-perplexity's figures (golden/perplexity, -c 128 on the golden's
// tokens) from the CUDA executor, as PerplexityCheck asks them of the CPU's:
// within 1e-3 a chunk for the f32 and f16 files (the prefill's f16 weights
// round more than the CPU's f32 products), 1e-2 for the quantised ones
// (activations rounded to int8 otherwise than llama.cpp's); and one chunk
// of 512 positions, the largest bucket asking for 255 logit rows, against
// the CPU executor.
TEST_F(CudaGolden, PerplexityAsLlamaPerplexity) {
  int checked = 0;
  for (const char* tag : {"stories260K", "stories260K-f16", "stories260K-q8_0-mix", "stories260K-q4_0-mix"}) {
    SCOPED_TRACE(tag);
    const std::filesystem::path path =
        testing::TestDataDir() / "golden" / "perplexity" / (std::string("ppl_") + tag + ".json");
    std::unique_ptr<Program> program = Load(tag);
    if (!program || !std::filesystem::exists(path)) continue;
    absl::StatusOr<JsonValue> j = ParseJson(testing::ReadFileOrDie(path));
    ASSERT_TRUE(j.ok()) << j.status();
    const std::vector<int32_t> ids = Ids(*j->Find("full_sequence")->Find("token_ids"));
    std::vector<double> want;
    for (const JsonValue& v : j->Find("llama_perplexity")->Find("running_ppl_after_each_chunk")->array()) {
      want.push_back(v.number());
    }
    std::unique_ptr<Executor> gpu = Gpu(*program), cpu = Cpu(*program);
    ASSERT_TRUE(gpu && cpu);
    PerplexityOptions options;
    options.context = 128;
    options.bos = ids.front();
    absl::StatusOr<PerplexityResult> r = Perplexity(*gpu, ids, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->running_ppl.size(), want.size());
    const double bound = absl::StrContains(tag, "mix") ? 1e-2 : 1e-3;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LE(std::fabs(r->running_ppl[i] - want[i]) / want[i], bound) << "chunk " << i + 1;
    }
    options.context = 512;
    absl::StatusOr<PerplexityResult> g512 = Perplexity(*gpu, ids, options), c512 = Perplexity(*cpu, ids, options);
    ASSERT_TRUE(g512.ok() && c512.ok()) << g512.status() << c512.status();
    EXPECT_EQ(g512->scored, 255);
    EXPECT_LE(std::fabs(g512->ppl - c512->ppl) / c512->ppl, bound) << g512->ppl << " against " << c512->ppl;
    std::printf("%s: PPL -c 128 %.4f (llama.cpp %.4f); -c 512 %.4f (CPU %.4f)\n", tag, r->ppl, want.back(), g512->ppl,
                c512->ppl);
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no artifacts or perplexity goldens";
}

TEST_F(CudaGolden, KernelsForANewerSmAreAClearError) {
  std::unique_ptr<Program> program = Load("stories260K");
  if (!program) GTEST_SKIP() << "no stories260K artifact";
  absl::StatusOr<cuda::CudaBundle> bundle = cuda::ParseBundle(program->FindKernels("cuda")->bytes);
  ASSERT_TRUE(bundle.ok());
  bundle->sm = static_cast<uint32_t>(sm_ + 10);
  program->kernels = {{absl::StrCat("cuda:sm_", sm_ + 10), cuda::SerializeBundle(*bundle)}};
  absl::StatusOr<std::unique_ptr<Executor>> ex = CreateCudaExecutor(*program, BackendOptions());
  ASSERT_FALSE(ex.ok());
  EXPECT_TRUE(absl::IsUnavailable(ex.status())) << ex.status();
  EXPECT_TRUE(absl::StrContains(ex.status().message(), absl::StrCat("sm_", sm_ + 10))) << ex.status();
  EXPECT_TRUE(absl::StrContains(ex.status().message(), "recompile")) << ex.status();
}

TEST_F(CudaGolden, AutoPicksCuda) {
  std::unique_ptr<Program> program = Load("stories260K");
  if (!program) GTEST_SKIP() << "no stories260K artifact";
  absl::StatusOr<SelectedBackend> s = CreateExecutor(*program, BackendOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(absl::StartsWith(s->executor->Describe(), "cuda (")) << s->executor->Describe();
}

}  // namespace
}  // namespace kiln

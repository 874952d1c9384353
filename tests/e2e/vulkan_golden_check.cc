// The Vulkan backend against llama.cpp's goldens: stories260K compiled in
// memory, kernels generated for "vulkan", run on the first Vulkan device
// (lavapipe in CI): greedy ids equal llama.cpp's for every golden prompt, and
// the logits after the prompt agree with the CPU executor's; speculative
// greedy decoding on Vulkan (a draft model on Vulkan too, and n-gram lookup)
// gives the same goldens; 32 requests batched by the scheduler on Vulkan get
// the ids they get alone there.
#include <cmath>

#include "codegen/codegen.h"
#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/util/json.h"
#include "runtime/vulkan/vulkan_executor.h"
#include "tests/e2e/batched_check.h"
#include "tests/e2e/compiled_model.h"
#include "tests/e2e/golden_cases.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

// A Vulkan executor with pages for `tokens` positions over a testdata model
// compiled in memory (Unavailable where there is no Vulkan device).
absl::StatusOr<std::unique_ptr<Executor>> VulkanFor(const Program& program, int64_t tokens) {
  absl::StatusOr<std::vector<uint8_t>> kernels = codegen::GenerateKernels(program.plan, "vulkan");
  if (!kernels.ok()) return kernels.status();
  vulkan::VulkanExecutorOptions options;
  options.num_pages = tokens / program.plan.pool.page_size;
  return vulkan::CreateVulkanExecutor(program.plan, program.weights, *kernels, options);
}

// With the KV cache in f32, and in f16 (kiln compile --kv-type f16: the
// goldens' ids wherever llama.cpp found its own f16 cache gave them too,
// and the CPU's logits on the same rounded pages).
TEST(VulkanGoldenCheck, Stories260KGreedyIdsEqualLlamaCpp) {
  const std::vector<testing::GoldenCase> cases = testing::GoldenCases("stories260K");
  if (cases.empty()) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  for (const std::string kv_type : {"f32", "f16"}) {
    std::unique_ptr<Program> program = testing::CompileTestModel("stories260K", "", kv_type);
    ASSERT_NE(program, nullptr);
    absl::StatusOr<std::unique_ptr<Executor>> gpu = VulkanFor(*program, 256);
    if (!gpu.ok() && absl::IsUnavailable(gpu.status())) GTEST_SKIP() << "no Vulkan: " << gpu.status().message();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    std::printf("backend: %s, %s KV cache\n", (*gpu)->Describe().c_str(), kv_type.c_str());
    std::unique_ptr<CpuExecutor> cpu = testing::MakeExecutor(*program, 256);
    ASSERT_NE(cpu, nullptr);

    int checked = 0;
    for (const testing::GoldenCase& c : cases) {
      const std::string& name = c.name;
      const std::vector<int32_t>& prompt = c.prompt;
      const std::vector<int32_t>& want = c.generated;
      GenerateOptions generate;
      generate.max_new_tokens = static_cast<int64_t>(want.size());
      generate.sampling.temperature = 0;
      absl::StatusOr<GenerateResult> got = Generate(**gpu, prompt, generate);
      ASSERT_TRUE(got.ok()) << got.status();
      if (kv_type == "f32" || c.same_with_f16_kv_cache) {
        EXPECT_EQ(got->ids, want) << name << " " << kv_type;
        ++checked;
      }
      absl::StatusOr<GenerateResult> reference = Generate(*cpu, prompt, generate);
      ASSERT_TRUE(reference.ok()) << reference.status();
      EXPECT_EQ(got->ids, reference->ids) << name << " " << kv_type;
      // In f16 a K or V element whose f32 value differs from the CPU's in its
      // last bits can round to the neighbouring half (an ulp is 1e-3 of it):
      // measured up to 3.2e-5 here, against 2.8e-7 with f32 pages.
      const double err = testing::RelativeL2(got->last_prompt_logits, reference->last_prompt_logits);
      EXPECT_LT(err, kv_type == "f32" ? 1e-5 : 1e-4) << name << " " << kv_type;
      size_t same = 0;
      while (same < got->ids.size() && same < want.size() && got->ids[same] == want[same]) ++same;
      std::printf(
          "%s (%s KV): %zu/%zu greedy ids equal llama.cpp's on Vulkan; last-prompt logits vs CPU relative "
          "L2 %.2e\n",
          name.c_str(), kv_type.c_str(), same, want.size(), err);
    }
    EXPECT_GT(checked, 0) << kv_type;
  }
}

TEST(VulkanGoldenCheck, SpeculativeGreedyWithDraftOrLookupIsTheGoldens) {
  const std::vector<testing::GoldenCase> cases = testing::GoldenCases("stories260K");
  if (cases.empty()) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  std::unique_ptr<Program> target = testing::CompileTestModel("stories260K");
  std::unique_ptr<Program> draft = testing::CompileTestModel("stories260K-q4_0-mix");
  ASSERT_TRUE(target && draft);
  absl::StatusOr<std::unique_ptr<Executor>> target_gpu = VulkanFor(*target, 512);
  if (!target_gpu.ok() && absl::IsUnavailable(target_gpu.status())) {
    GTEST_SKIP() << "no Vulkan: " << target_gpu.status().message();
  }
  ASSERT_TRUE(target_gpu.ok()) << target_gpu.status();
  absl::StatusOr<std::unique_ptr<Executor>> draft_gpu = VulkanFor(*draft, 512);
  ASSERT_TRUE(draft_gpu.ok()) << draft_gpu.status();
  EXPECT_EQ(cases.size(), 4u);
  testing::ExpectSpeculativeGreedyIsTheGoldens(**target_gpu, **draft_gpu, cases, "Vulkan");
}

TEST(VulkanGoldenCheck, ThirtyTwoConcurrentGreedyRequestsMatchTheirSoloRuns) {
  std::unique_ptr<Program> program = testing::CompileTestModel("stories260K");
  if (program == nullptr) GTEST_SKIP() << "stories260K.gguf not found under " << testing::TestDataDir();
  const int64_t page = program->plan.pool.page_size;
  absl::StatusOr<std::unique_ptr<Executor>> solo = VulkanFor(*program, 16 * page);
  if (!solo.ok() && absl::IsUnavailable(solo.status())) GTEST_SKIP() << "no Vulkan: " << solo.status().message();
  ASSERT_TRUE(solo.ok()) << solo.status();
  absl::StatusOr<std::unique_ptr<Executor>> shared = VulkanFor(*program, testing::kBatchedCheckPages * page);
  ASSERT_TRUE(shared.ok()) << shared.status();
  testing::ExpectBatchedGreedyEqualsSolo(*program, **solo, **shared);
}

}  // namespace
}  // namespace kiln

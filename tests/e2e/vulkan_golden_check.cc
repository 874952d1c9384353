// The Vulkan backend against llama.cpp's goldens: stories260K compiled in
// memory, kernels generated for "vulkan", run on the first Vulkan device
// (lavapipe in CI): greedy ids equal llama.cpp's for every golden prompt, and
// the logits after the prompt agree with the CPU executor's; speculative
// greedy decoding on Vulkan (a draft model on Vulkan too, and n-gram lookup)
// gives the same goldens.
#include <cmath>

#include "codegen/codegen.h"
#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/speculative.h"
#include "runtime/util/json.h"
#include "runtime/vulkan/vulkan_executor.h"
#include "tests/e2e/compiled_model.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

std::vector<int32_t> Ids(const JsonValue& a) {
  std::vector<int32_t> out;
  for (const JsonValue& v : a.array()) out.push_back(static_cast<int32_t>(*v.int_value()));
  return out;
}

TEST(VulkanGoldenCheck, Stories260KGreedyIdsEqualLlamaCpp) {
  const std::filesystem::path dir = testing::TestDataDir() / "golden" / "stories260K";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  std::unique_ptr<Program> program = testing::CompileTestModel("stories260K");
  ASSERT_NE(program, nullptr);
  absl::StatusOr<std::vector<uint8_t>> kernels = codegen::GenerateKernels(program->plan, "vulkan");
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  vulkan::VulkanExecutorOptions options;
  options.num_pages = 256 / program->plan.pool.page_size;
  absl::StatusOr<std::unique_ptr<Executor>> gpu =
      vulkan::CreateVulkanExecutor(program->plan, program->weights, *kernels, options);
  if (!gpu.ok() && absl::IsUnavailable(gpu.status())) GTEST_SKIP() << "no Vulkan: " << gpu.status().message();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::printf("backend: %s\n", (*gpu)->Describe().c_str());
  std::unique_ptr<CpuExecutor> cpu = testing::MakeExecutor(*program, 256);
  ASSERT_NE(cpu, nullptr);

  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name.find("activations") != std::string::npos) continue;
    absl::StatusOr<JsonValue> golden = ParseJson(testing::ReadFileOrDie(entry.path()));
    ASSERT_TRUE(golden.ok()) << golden.status();
    const std::vector<int32_t> prompt = Ids(*golden->Find("prompt_token_ids"));
    const std::vector<int32_t> want = Ids(*golden->Find("generated_token_ids"));
    GenerateOptions generate;
    generate.max_new_tokens = static_cast<int64_t>(want.size());
    generate.sampling.temperature = 0;
    absl::StatusOr<GenerateResult> got = Generate(**gpu, prompt, generate);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ids, want) << name;
    absl::StatusOr<GenerateResult> reference = Generate(*cpu, prompt, generate);
    ASSERT_TRUE(reference.ok()) << reference.status();
    double num = 0, den = 0;
    for (size_t i = 0; i < reference->last_prompt_logits.size(); ++i) {
      const double d = double(got->last_prompt_logits[i]) - reference->last_prompt_logits[i];
      num += d * d;
      den += double(reference->last_prompt_logits[i]) * reference->last_prompt_logits[i];
    }
    const double err = std::sqrt(num / den);
    EXPECT_LT(err, 1e-5) << name;
    size_t same = 0;
    while (same < got->ids.size() && same < want.size() && got->ids[same] == want[same]) ++same;
    std::printf("%s: %zu/%zu greedy ids equal llama.cpp's on Vulkan; last-prompt logits vs CPU relative L2 %.2e\n",
                name.c_str(), same, want.size(), err);
    ++cases;
  }
  EXPECT_GT(cases, 0);
}

// A Vulkan executor for a testdata model compiled in memory; null with a
// skip message when there is no Vulkan device.
absl::StatusOr<std::unique_ptr<Executor>> VulkanFor(const Program& program, int64_t tokens) {
  absl::StatusOr<std::vector<uint8_t>> kernels = codegen::GenerateKernels(program.plan, "vulkan");
  if (!kernels.ok()) return kernels.status();
  vulkan::VulkanExecutorOptions options;
  options.num_pages = tokens / program.plan.pool.page_size;
  return vulkan::CreateVulkanExecutor(program.plan, program.weights, *kernels, options);
}

TEST(VulkanGoldenCheck, SpeculativeGreedyWithDraftOrLookupIsTheGoldens) {
  const std::filesystem::path dir = testing::TestDataDir() / "golden" / "stories260K";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
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
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name.find("activations") != std::string::npos) continue;
    absl::StatusOr<JsonValue> golden = ParseJson(testing::ReadFileOrDie(entry.path()));
    ASSERT_TRUE(golden.ok()) << golden.status();
    const std::vector<int32_t> prompt = Ids(*golden->Find("prompt_token_ids"));
    const std::vector<int32_t> want = Ids(*golden->Find("generated_token_ids"));
    SpeculativeOptions options;
    options.generate.max_new_tokens = static_cast<int64_t>(want.size());
    options.generate.sampling.temperature = 0;
    options.draft_max = 6;
    DraftModel drafter(**draft_gpu, options.generate.sampling);
    absl::StatusOr<SpeculativeResult> with_draft = GenerateSpeculative(**target_gpu, drafter, prompt, options);
    ASSERT_TRUE(with_draft.ok()) << with_draft.status();
    EXPECT_EQ(with_draft->result.ids, want) << name << " (draft model)";
    NgramLookupDraft lookup;
    absl::StatusOr<SpeculativeResult> with_lookup = GenerateSpeculative(**target_gpu, lookup, prompt, options);
    ASSERT_TRUE(with_lookup.ok()) << with_lookup.status();
    EXPECT_EQ(with_lookup->result.ids, want) << name << " (n-gram lookup)";
    EXPECT_GT(with_draft->stats.drafted, 0) << name;
    std::printf("%s on Vulkan: draft model %lld/%lld accepted, lookup %lld/%lld accepted; ids equal the golden: %s\n",
                name.c_str(), (long long)with_draft->stats.accepted, (long long)with_draft->stats.drafted,
                (long long)with_lookup->stats.accepted, (long long)with_lookup->stats.drafted,
                with_draft->result.ids == want && with_lookup->result.ids == want ? "yes" : "no");
    ++cases;
  }
  EXPECT_EQ(cases, 4);
}

}  // namespace
}  // namespace kiln

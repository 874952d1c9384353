// The Vulkan backend against llama.cpp's goldens: stories260K compiled in
// memory, kernels generated for "vulkan", run on the first Vulkan device
// (lavapipe in CI): greedy ids equal llama.cpp's for every golden prompt, and
// the logits after the prompt agree with the CPU executor's.
#include <cmath>

#include "codegen/codegen.h"
#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
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

}  // namespace
}  // namespace kiln

// Every Vulkan kernel template against the CPU executor on random inputs:
// single-op plans (fed by embedding lookups), several shapes including odd
// ones, outputs poisoned with NaN before each step, relative L2 under 1e-5
// (both sides decode the same weights exactly and sum in f32).
#include <cstring>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/vulkan/vulkan_test_plan.h"

namespace kiln::testing {
namespace {

constexpr double kTolerance = 1e-5;

// Runs `batches` on both executors; every step's outputs must agree.
void ExpectSameOutputs(const TestPlan& tp, int64_t result_region, int64_t width, const std::vector<StepBatch>& batches,
                       int64_t num_pages, const std::string& what, double tolerance = kTolerance) {
  absl::StatusOr<Plan> plan = tp.Build(result_region, width);
  ASSERT_TRUE(plan.ok()) << plan.status();
  CpuExecutorOptions cpu_options;
  cpu_options.num_pages = num_pages;
  absl::StatusOr<std::unique_ptr<CpuExecutor>> cpu = CpuExecutor::Create(*plan, tp.Source(), cpu_options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::string skip;
  std::unique_ptr<Executor> gpu = MakeVulkan(*plan, tp.Source(), num_pages, &skip);
  if (!skip.empty()) GTEST_SKIP() << "no Vulkan: " << skip;
  ASSERT_NE(gpu, nullptr);
  for (size_t i = 0; i < batches.size(); ++i) {
    absl::StatusOr<std::span<const float>> want = (*cpu)->Step(batches[i]);
    ASSERT_TRUE(want.ok()) << want.status();
    const std::vector<float> expected(want->begin(), want->end());
    absl::StatusOr<std::span<const float>> got = gpu->Step(batches[i]);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), expected.size());
    for (size_t j = 0; j < got->size(); ++j) ASSERT_TRUE(std::isfinite((*got)[j])) << what << " element " << j;
    const double err = RelativeL2(*got, expected);
    size_t worst = 0;
    for (size_t j = 0; j < expected.size(); ++j) {
      if (std::fabs((*got)[j] - expected[j]) > std::fabs((*got)[worst] - expected[worst])) worst = j;
    }
    EXPECT_LT(err, tolerance) << what << ", step " << i << ": worst element " << worst << " is " << (*got)[worst]
                              << ", the CPU says " << expected[worst];
  }
}

struct StorageCase {
  std::string storage;
  int64_t k;  // a whole number of the storage's blocks
};

const std::vector<StorageCase>& Storages() {
  static const std::vector<StorageCase> cases = {
      {"f32", 40},   {"f16", 40},   {"bf16", 40},  {"q8_0", 96},  {"q4_0", 96},       {"q4_1", 96},
      {"q5_0", 96},  {"q5_1", 96},  {"q2_K", 256}, {"q3_K", 256}, {"q4_K", 256},      {"q5_K", 256},
      {"q6_K", 256}, {"int4:g32", 96}, {"int2:g32", 96}, {"int4:g128", 256},
  };
  return cases;
}

TEST(VulkanKernels, MatmulEveryStorage) {
  for (const StorageCase& c : Storages()) {
    TestPlan tp;
    const int64_t n = 37, vocab = 29;
    const int64_t x = tp.Embed("emb", vocab, c.k);
    tp.Weight("w", c.storage, {n, c.k});
    const int64_t y = tp.Region(n);
    tp.Launch("matmul." + c.storage, {tp.ArenaBinding("input", x), TestPlan::WeightBinding("weight", "w"),
                                      tp.ArenaBinding("result", y)},
              absl::StrCat("\"k\":", c.k, ",\"n\":", n));
    std::vector<StepBatch> batches = {MakeBatch({{0, 5}}, 2, vocab, tp.rng()), MakeBatch({{5, 1}}, 2, vocab, tp.rng()),
                                      MakeBatch({{0, 3}, {2, 4}}, 2, vocab, tp.rng())};
    ExpectSameOutputs(tp, y, n, batches, 4, "matmul " + c.storage);
  }
}

TEST(VulkanKernels, FusedMatmulNormThreeWeights) {
  for (const char* storage : {"f32", "q8_0", "q4_K"}) {
    TestPlan tp;
    const int64_t k = std::string(storage) == "q4_K" ? 256 : 64, vocab = 31;
    const int64_t x = tp.Embed("emb", vocab, k);
    tp.Weight("g", "f32", {k});
    tp.Weight("wq", storage, {24, k});
    tp.Weight("wk", storage, {9, k});
    tp.Weight("wv", storage, {9, k});
    const int64_t q = tp.Region(24), kk = tp.Region(9), v = tp.Region(9);
    tp.Launch(std::string("fused_matmul.norm.") + storage,
              {tp.ArenaBinding("input", x), TestPlan::WeightBinding("norm", "g"), TestPlan::WeightBinding("weight0", "wq"),
               TestPlan::WeightBinding("weight1", "wk"), TestPlan::WeightBinding("weight2", "wv"),
               tp.ArenaBinding("result0", q), tp.ArenaBinding("result1", kk), tp.ArenaBinding("result2", v)},
              absl::StrCat("\"epilogue\":\"none\",\"eps\":1e-5,\"k\":", k, ",\"n\":[24,9,9]"));
    std::vector<StepBatch> batches = {MakeBatch({{0, 7}}, 2, vocab, tp.rng()), MakeBatch({{7, 1}}, 2, vocab, tp.rng())};
    ExpectSameOutputs(tp, q, 24, batches, 4, std::string("fused q ") + storage);
    ExpectSameOutputs(tp, v, 9, batches, 4, std::string("fused v ") + storage);
  }
}

TEST(VulkanKernels, FusedMatmulSiluMulAndResidualAdd) {
  // n: gate/up rows and down's columns, so a whole number of down's blocks.
  for (const auto& [storage, k, n] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"f32", 40, 45}, {"f16", 64, 45}, {"q4_0", 64, 96}, {"q6_K", 256, 256}}) {
    TestPlan tp;
    const int64_t vocab = 23;
    const int64_t x = tp.Embed("emb", vocab, k);
    tp.Weight("g", "f32", {k});
    tp.Weight("gate", storage, {n, k});
    tp.Weight("up", storage, {n, k});
    const int64_t h = tp.Region(n);
    tp.Launch("fused_matmul.norm.silu_mul." + storage,
              {tp.ArenaBinding("input", x), TestPlan::WeightBinding("norm", "g"), TestPlan::WeightBinding("weight0", "gate"),
               TestPlan::WeightBinding("weight1", "up"), tp.ArenaBinding("result0", h)},
              absl::StrCat("\"epilogue\":\"silu_mul\",\"eps\":1e-6,\"k\":", k, ",\"n\":[", n, ",", n, "]"));
    const int64_t res = tp.Embed("emb_res", vocab, k);
    tp.Weight("down", storage, {k, n});
    const int64_t out = tp.Region(k);
    tp.Launch("fused_matmul.residual_add." + storage,
              {tp.ArenaBinding("input", h), TestPlan::WeightBinding("weight0", "down"),
               tp.ArenaBinding("residual", res), tp.ArenaBinding("result0", out)},
              absl::StrCat("\"epilogue\":\"residual_add\",\"k\":", n, ",\"n\":[", k, "]"));
    std::vector<StepBatch> batches = {MakeBatch({{0, 6}}, 2, vocab, tp.rng()),
                                      MakeBatch({{6, 1}, {0, 2}}, 2, vocab, tp.rng())};
    ExpectSameOutputs(tp, h, n, batches, 4, "silu_mul " + storage);
    ExpectSameOutputs(tp, out, k, batches, 4, "residual_add " + storage);
  }
}

}  // namespace
}  // namespace kiln::testing

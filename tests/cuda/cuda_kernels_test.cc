// Every CUDA kernel against the CPU executor, one op at a time, on random
// inputs at several shapes (odd widths, unaligned rows, every bucket path)
// and every weight storage. Kernels are compiled here with the real codegen
// for this GPU's SM. The device arena starts as NaNs, so an output element
// a kernel fails to write shows as a failure. Skips without a CUDA driver.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_join.h"

#include "codegen/ptx/ptx_codegen.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/cuda_executor.h"
#include "runtime/cuda/kernel_calls.h"
#include "runtime/executor/cpu_executor.h"
#include "tests/cuda/single_op_plans.h"

namespace kiln {
namespace {

using testing::RaggedBatch;
using testing::SingleOpPlan;

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
    if (!ctx.ok()) GTEST_SKIP() << "no CUDA GPU here: " << ctx.status().message();
    target_ = absl::StrCat("cuda:sm_", (*ctx)->sm());
  }

  struct Region {
    int64_t at, width;
    std::string what;
    bool int_bits = false;  // argmax: compare the int32 bit patterns exactly
  };

  // Runs `batches` on the CPU and the GPU with each region as the result and
  // checks every step's rows within `tolerance` (relative L2).
  void Compare(const SingleOpPlan& b, const std::vector<Region>& regions, const std::vector<StepBatch>& batches,
               double tolerance, int64_t num_pages = 16) {
    const Plan first = b.PlanWithResult(regions[0].at, regions[0].width);
    absl::StatusOr<std::vector<uint8_t>> kernels = Kernels(first);
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    for (const Region& r : regions) {
      Program program;
      program.plan = b.PlanWithResult(r.at, r.width);
      program.weights = b.Source();
      program.kernels.push_back({target_, *kernels});
      CpuExecutorOptions cpu_options;
      cpu_options.threads = 1;
      cpu_options.activations = cpu::Activations::kF32;  // the exact reference
      cpu_options.num_pages = num_pages;
      absl::StatusOr<std::unique_ptr<CpuExecutor>> cpu = CpuExecutor::Create(program.plan, program.weights, cpu_options);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      BackendOptions gpu_options;
      gpu_options.num_pages = num_pages;
      absl::StatusOr<std::unique_ptr<Executor>> gpu = CreateCudaExecutor(program, gpu_options);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      for (size_t step = 0; step < batches.size(); ++step) {
        absl::StatusOr<std::span<const float>> want = (*cpu)->Step(batches[step]);
        ASSERT_TRUE(want.ok()) << want.status();
        const std::vector<float> expected(want->begin(), want->end());
        absl::StatusOr<std::span<const float>> got = (*gpu)->Step(batches[step]);
        ASSERT_TRUE(got.ok()) << r.what << ": " << got.status();
        ASSERT_EQ(got->size(), expected.size());
        if (r.int_bits) {
          EXPECT_EQ(0, std::memcmp(got->data(), expected.data(), expected.size() * 4))
              << r.what << " step " << step;
        } else {
          // Tensor-core buckets multiply f16 operands.
          const size_t bucket = *program.plan.BucketFor(static_cast<int64_t>(batches[step].tokens.size()));
          const double bound =
              program.plan.buckets[bucket] >= cuda::kTensorCoreMinBucket ? std::max(5e-3, tolerance) : tolerance;
          const double err = testing::RelativeL2(*got, expected);
          EXPECT_LT(err, bound) << r.what << " step " << step << " (T=" << batches[step].tokens.size() << ")";
        }
      }
    }
  }

  // The kernels of a plan, compiled once per distinct instantiation set
  // (shapes are run-time parameters: plans differing only in shape share them).
  // Thread-safe: PrecompileInParallel fills the cache from several threads.
  absl::StatusOr<std::vector<uint8_t>> Kernels(const Plan& plan) {
    static std::mutex mu;
    static std::map<std::string, std::vector<uint8_t>> cache;
    absl::StatusOr<std::vector<std::string>> names = cuda::PlanInstantiations(plan);
    if (!names.ok()) return names.status();
    const std::string key = absl::StrJoin(*names, ";");
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = cache.find(key);
      if (it != cache.end()) return it->second;
    }
    absl::StatusOr<std::vector<uint8_t>> k = codegen::ptx::GenerateCudaKernels(plan, target_);
    if (k.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      cache[key] = *k;
    }
    return k;
  }
  // Compiles the kernels of `plans` on one thread each (NVRTC and the
  // assembler take seconds per program; the checks then find them cached).
  void PrecompileInParallel(const std::vector<Plan>& plans) {
    std::vector<std::thread> threads;
    for (const Plan& plan : plans) {
      threads.emplace_back([this, &plan] { (void)Kernels(plan); });
    }
    for (std::thread& t : threads) t.join();
  }

  // A CUDA executor of b's plan with its result at `r` (kernels compiled once).
  absl::StatusOr<std::unique_ptr<Executor>> Gpu(const SingleOpPlan& b, const Region& r, int64_t num_pages = 16) {
    Program program;
    program.plan = b.PlanWithResult(r.at, r.width);
    program.weights = b.Source();
    absl::StatusOr<std::vector<uint8_t>> kernels = Kernels(program.plan);
    if (!kernels.ok()) return kernels.status();
    program.kernels.push_back({target_, *kernels});
    BackendOptions options;
    options.num_pages = num_pages;
    return CreateCudaExecutor(program, options);
  }

  // b's result r over `steps` with the one-token launches' stage images
  // (KILN_CUDA_PRESTAGE=1) is bit for bit the result with each block
  // staging its activations itself (=0).
  void ExpectStageImagesChangeNoBit(const SingleOpPlan& b, const Region& r, const std::vector<StepBatch>& steps,
                                    int64_t num_pages = 16) {
    auto outputs = [&](const char* prestage) {
      absl::StatusOr<std::unique_ptr<Executor>> gpu = [&] {
        const testing::ScopedEnv staging("KILN_CUDA_PRESTAGE", prestage);
        return Gpu(b, r, num_pages);
      }();
      std::vector<std::vector<float>> got;
      EXPECT_TRUE(gpu.ok()) << gpu.status();
      if (!gpu.ok()) return got;
      for (const StepBatch& step : steps) {
        absl::StatusOr<std::span<const float>> y = (*gpu)->Step(step);
        EXPECT_TRUE(y.ok()) << y.status();
        if (y.ok()) got.emplace_back(y->begin(), y->end());
      }
      return got;
    };
    const std::vector<std::vector<float>> staged = outputs("1"), per_block = outputs("0");
    ASSERT_EQ(staged.size(), steps.size());
    ASSERT_EQ(per_block.size(), steps.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      ASSERT_EQ(staged[i].size(), per_block[i].size());
      EXPECT_EQ(0, std::memcmp(staged[i].data(), per_block[i].data(), staged[i].size() * sizeof(float)))
          << r.what << " step " << i;
    }
  }

  std::string target_;
};

// One sequence of T new tokens from position 0 (no attention in the plan).
StepBatch Rows(int32_t tokens, uint32_t seed, std::vector<int32_t> logit_rows = {}) {
  StepBatch b = RaggedBatch({0}, {tokens}, {{0, 1, 2, 3}}, 50, seed);
  if (!logit_rows.empty()) b.logit_rows = std::move(logit_rows);
  return b;
}

// One sequence of T new tokens from position 0 on a table of 16 pages of 16.
StepBatch Prefill(int32_t tokens, uint32_t seed) {
  std::vector<int32_t> table(16);
  for (int32_t i = 0; i < 16; ++i) table[i] = i;
  return RaggedBatch({0}, {tokens}, {table}, 50, seed);
}

// A layer's normed matmuls over b's weights gamma, q, k, v, gate and up:
// q, k, v fused (results at rq, rk, rv) and gate/up with silu_mul (at rg).
void LaunchNormedQkvAndGateUp(SingleOpPlan& b, int64_t x, int64_t rq, int64_t rk, int64_t rv, int64_t rg) {
  b.Launch("fused_matmul.norm.qkv",
           {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "q"),
            b.WeightBinding("weight1", "k"), b.WeightBinding("weight2", "v"), b.Arena("result0", rq),
            b.Arena("result1", rk), b.Arena("result2", rv)},
           R"({"epilogue": "none", "eps": 1e-5})");
  b.Launch("fused_matmul.norm.silu_mul",
           {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "gate"),
            b.WeightBinding("weight1", "up"), b.Arena("result0", rg)},
           R"({"epilogue": "silu_mul", "eps": 1e-5})");
}

// q4_K's CUDA-core lane, and q8_0's one- and two-token decode where K is a
// multiple of 256, quantise the activations to int8 per 32 elements (dp4a),
// as llama.cpp's CUDA backend does; q4_K's steps of 3-63 tokens per 256
// (the int8 tile kernel, as llama.cpp's q8_K): a dot's relative error is
// about 1 / (127 sqrt(12)) times the activations' max over their RMS, ~0.5%.
bool Int8Activations(const std::string& storage) { return storage == "q4_k" || storage == "q8_0"; }
constexpr double kInt8ActivationsBound = 3e-2;  // silu_mul compounds two such dots (1.7% seen)

constexpr const char* kStorages[] = {"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",      "q5_0",      "q5_1",
                                     "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "int4:g32", "int4:g128", "int2:g64"};

TEST_F(CudaKernels, MatmulEpiloguesAndEmbeddingForEveryStorage) {
  {
    std::vector<Plan> plans;
    for (const char* storage : kStorages) {
      SingleOpPlan b({1, 2, 4, 16, 64}, PlanPagePool{1, 1, 8, 16, 64}, 7);
      const int64_t x = b.Activation(256, 50);
      b.Weight("gamma", "f32", {256});
      for (int i = 0; i < 6; ++i) b.Weight(absl::StrCat("w", i), storage, {8, 256}, 0.1f);
      b.Weight("table", storage, {50, 256}, 1.0f);
      const int64_t r = b.Region(8);
      b.Launch("fused_matmul.norm.q", {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "w0"),
                                       b.WeightBinding("weight1", "w1"), b.Arena("result0", r), b.Arena("result1", r)},
               R"({"epilogue": "none", "eps": 1e-5})");
      b.Launch("fused_matmul.norm.silu_mul.q",
               {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "w2"),
                b.WeightBinding("weight1", "w3"), b.Arena("result0", r)},
               R"({"epilogue": "silu_mul", "eps": 1e-5})");
      b.Launch("fused_matmul.residual_add.q",
               {b.Arena("input", x), b.WeightBinding("weight0", "w4"), b.Arena("residual", r), b.Arena("result0", r)},
               R"({"epilogue": "residual_add"})");
      b.Launch("matmul.q", {b.Arena("input", x), b.WeightBinding("weight", "w5"), b.Arena("result", r)}, "{}");
      b.Launch("embedding.q", {b.WeightBinding("table", "table"), b.InputBinding("tokens", "tokens"), b.Arena("result", r)},
               R"({"vocab": 50, "width": 256})");
      plans.push_back(b.PlanWithResult(r, 8));
    }
    PrecompileInParallel(plans);
  }
  for (const char* storage : kStorages) {
    const bool plain = std::string(storage) == "f32" || std::string(storage) == "f16" || std::string(storage) == "bf16";
    // Plain rows of odd length (tails, unaligned rows); quantised rows of
    // whole 256-blocks, and for 32-element blocks an odd count (q8_0's lane
    // takes two); a K past the 8-token tile's staging chunk (2048).
    const std::string s(storage);
    const bool block32 = s == "q8_0" || s == "q4_0" || s == "q4_1" || s == "q5_0" || s == "q5_1" || s == "int4:g32";
    std::vector<std::pair<int64_t, int64_t>> shapes = plain ? std::vector<std::pair<int64_t, int64_t>>{{171, 37}, {1024, 77}, {2601, 9}}
                                                            : std::vector<std::pair<int64_t, int64_t>>{{512, 37}, {1024, 77}, {4352, 9}};
    if (block32) shapes.push_back({160, 11});
    for (auto [k, n] : shapes) {
      SCOPED_TRACE(absl::StrCat(storage, " k=", k, " n=", n));
      SingleOpPlan b({1, 2, 4, 16, 64}, PlanPagePool{1, 1, 8, 16, 64}, 7);
      const int64_t x = b.Activation(k, 50);
      b.Weight("gamma", "f32", {k});
      for (int i = 0; i < 6; ++i) b.Weight(absl::StrCat("w", i), storage, {i == 2 || i == 3 ? n + 8 : n, k}, 0.1f);
      b.Weight("table", storage, {50, k}, 1.0f);
      const int64_t r0 = b.Region(n), r1 = b.Region(n), r2 = b.Region(n + 8), r3 = b.Region(n), r4 = b.Region(n),
                    r5 = b.Region(k);
      const std::string eps = R"("eps": 1e-5)";
      b.Launch("fused_matmul.norm.q", {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "w0"),
                                       b.WeightBinding("weight1", "w1"), b.Arena("result0", r0), b.Arena("result1", r1)},
               absl::StrCat(R"({"epilogue": "none", )", eps, "}"));
      b.Launch("fused_matmul.norm.silu_mul.q",
               {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "w2"),
                b.WeightBinding("weight1", "w3"), b.Arena("result0", r2)},
               absl::StrCat(R"({"epilogue": "silu_mul", )", eps, "}"));
      b.Launch("fused_matmul.residual_add.q",
               {b.Arena("input", x), b.WeightBinding("weight0", "w4"), b.Arena("residual", r0), b.Arena("result0", r3)},
               R"({"epilogue": "residual_add"})");
      b.Launch("matmul.q", {b.Arena("input", x), b.WeightBinding("weight", "w5"), b.Arena("result", r4)}, "{}");
      b.Launch("embedding.q", {b.WeightBinding("table", "table"), b.InputBinding("tokens", "tokens"), b.Arena("result", r5)},
               absl::StrCat(R"({"vocab": 50, "width": )", k, "}"));
      Compare(b,
              {{r0, n, "qkv-style result0"}, {r1, n, "qkv-style result1"}, {r2, n + 8, "silu_mul"}, {r3, n, "residual_add"},
               {r4, n, "plain matmul"}, {r5, k, "embedding"}},
              {Rows(1, 1), Rows(2, 8), Rows(3, 2), Rows(13, 3), Rows(1, 4), Rows(4, 9), Rows(16, 5), Rows(40, 6), Rows(64, 7)},
              Int8Activations(s) ? kInt8ActivationsBound : 1e-4);
      if (HasFatalFailure()) return;
    }
  }
}

// Decode launches with more row blocks than the GPU has SMs walk K in one
// warp per set of rows (MatmulKSplit); the shapes above are all split.
TEST_F(CudaKernels, DecodeOfManyRowBlocksIsNotSplit) {
  for (const char* storage : {"q4_k", "f16"}) {
    SCOPED_TRACE(storage);
    constexpr int64_t kK = 512, kN = 8192;  // 256 blocks of 32 rows, over the H200's 132 SMs
    SingleOpPlan b({1, 2}, PlanPagePool{1, 1, 8, 16, 64}, 5);
    const int64_t x = b.Activation(kK, 50);
    b.Weight("gamma", "f32", {kK});
    b.Weight("gate", storage, {kN, kK}, 0.1f);
    b.Weight("up", storage, {kN, kK}, 0.1f);
    const int64_t r = b.Region(kN);
    b.Launch("fused_matmul.norm.silu_mul.q",
             {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "gate"),
              b.WeightBinding("weight1", "up"), b.Arena("result0", r)},
             R"({"epilogue": "silu_mul", "eps": 1e-5})");
    Compare(b, {{r, kN, "silu_mul"}}, {Rows(1, 1), Rows(1, 2)},
            Int8Activations(storage) ? kInt8ActivationsBound : 1e-4);
    if (HasFatalFailure()) return;
  }
}

// q8_0's one-token decode on sm_90 streams row groups through a ring of
// kStreamStages stages (matmul_stream_kernel): here a block takes up to four
// groups of three K chunks (2048, 2048, 512), so every slot is refilled
// several times, and the last group is partial (8200 and 4100 outputs).
TEST_F(CudaKernels, DecodeStreamsRowGroupsThroughTheRing) {
  constexpr int64_t kK = 4608, kN = 4100;
  SingleOpPlan b({1, 2}, PlanPagePool{1, 1, 8, 16, 64}, 29);
  const int64_t x = b.Activation(kK, 50);
  b.Weight("gamma", "f32", {kK});
  b.Weight("gate", "q8_0", {2 * kN, kK}, 0.1f);
  b.Weight("up", "q8_0", {2 * kN, kK}, 0.1f);
  b.Weight("w", "q8_0", {kN, kK}, 0.1f);
  const int64_t rg = b.Region(2 * kN), rm = b.Region(kN);
  b.Launch("fused_matmul.norm.silu_mul.q",
           {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "gate"),
            b.WeightBinding("weight1", "up"), b.Arena("result0", rg)},
           R"({"epilogue": "silu_mul", "eps": 1e-5})");
  b.Launch("matmul.q", {b.Arena("input", x), b.WeightBinding("weight", "w"), b.Arena("result", rm)}, "{}");
  Compare(b, {{rg, 2 * kN, "silu_mul"}, {rm, kN, "matmul"}}, {Rows(1, 1), Rows(1, 2), Rows(2, 3)},
          kInt8ActivationsBound);
}

// Activations large enough that 32 of them often sum past f16's 65504
// (each stays below it, as the f16 activation paths need): the int8 paths
// keep their per-group sums in units of the group's scale (a sum in f16
// would be infinite), in decode and in steps of 3-63 tokens.
TEST_F(CudaKernels, LargeActivationsStayInRange) {
  for (const char* storage : {"q4_k", "q8_0"}) {
    SCOPED_TRACE(storage);
    constexpr int64_t kK = 1024, kN = 40;
    SingleOpPlan b({1, 2, 4, 16}, PlanPagePool{1, 1, 8, 16, 64}, 31);
    const int64_t x = b.Activation(kK, 50, 6e3f);  // sums of 32: sd ~34000
    b.Weight("w", storage, {kN, kK}, 0.1f);
    const int64_t r = b.Region(kN);
    b.Launch("matmul.q", {b.Arena("input", x), b.WeightBinding("weight", "w"), b.Arena("result", r)}, "{}");
    Compare(b, {{r, kN, "matmul"}}, {Rows(1, 1), Rows(2, 2), Rows(3, 3), Rows(13, 4)}, kInt8ActivationsBound);
    if (HasFatalFailure()) return;
  }
}

// Two-token steps of q8_0 run like decode but stage both tokens, so a K
// that fits one token's staging chunk can take two chunks for two tokens
// (the 8B's down, K = 14336): K = 10240 here, with the K split of few rows.
// q4_K's run on matmul_tile_int8_kernel (one token tile, 2 of 8 tokens used).
TEST_F(CudaKernels, TwoTokenStepsPastOneStagingChunk) {
  for (const char* storage : {"q4_k", "q8_0"}) {
    SCOPED_TRACE(storage);
    constexpr int64_t kK = 10240, kN = 40;
    SingleOpPlan b({1, 2}, PlanPagePool{1, 1, 8, 16, 64}, 23);
    const int64_t x = b.Activation(kK, 50);
    b.Weight("gamma", "f32", {kK});
    b.Weight("gate", storage, {kN, kK}, 0.1f);
    b.Weight("up", storage, {kN, kK}, 0.1f);
    b.Weight("down", storage, {kN, kK}, 0.1f);
    const int64_t rg = b.Region(kN), rd = b.Region(kN);
    b.Launch("fused_matmul.norm.silu_mul",
             {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "gate"),
              b.WeightBinding("weight1", "up"), b.Arena("result0", rg)},
             R"({"epilogue": "silu_mul", "eps": 1e-5})");
    b.Launch("matmul.down", {b.Arena("input", x), b.WeightBinding("weight", "down"), b.Arena("result", rd)}, "{}");
    Compare(b, {{rg, kN, "silu_mul"}, {rd, kN, "matmul"}}, {Rows(2, 1), Rows(1, 2), Rows(2, 3)}, kInt8ActivationsBound);
    if (HasFatalFailure()) return;
  }
}

// Buckets of 64 tokens and more run matmul_f16_tc_kernel (over f16 rows;
// quantised weights decoded first): several token and row tiles, partial
// ones at both edges, K longer than its ring of steps, three fused weights.
// On sm_90 the tiles are few enough that the wgmma kernel cuts K (28 steps)
// into 3 uneven slices (10, 10, 8) added by matmul_split_sum_kernel.
TEST_F(CudaKernels, PrefillMatmulOverSeveralTiles) {
  constexpr const char* kTileStorages[] = {"q4_k", "f16", "q8_0", "q6_k"};
  constexpr int64_t kK = 1792;
  auto plan = [](const char* storage) {
    SingleOpPlan b({1, 64, 256}, PlanPagePool{1, 1, 8, 16, 256}, 13);
    const int64_t x = b.Activation(kK, 50);
    b.Weight("gamma", "f32", {kK});
    b.Weight("q", storage, {300, kK}, 0.1f);
    b.Weight("k", storage, {40, kK}, 0.1f);
    b.Weight("v", storage, {40, kK}, 0.1f);
    b.Weight("gate", storage, {136, kK}, 0.1f);
    b.Weight("up", storage, {136, kK}, 0.1f);
    b.Weight("o", storage, {300, kK}, 0.1f);
    const int64_t rq = b.Region(300), rk = b.Region(40), rv = b.Region(40), rg = b.Region(136), ro = b.Region(300);
    LaunchNormedQkvAndGateUp(b, x, rq, rk, rv, rg);
    b.Launch("fused_matmul.residual_add",
             {b.Arena("input", x), b.WeightBinding("weight0", "o"), b.Arena("residual", rq), b.Arena("result0", ro)},
             R"({"epilogue": "residual_add"})");
    return std::make_tuple(b, std::vector<int64_t>{rq, rk, rv, rg, ro});
  };
  {
    std::vector<Plan> plans;
    for (const char* storage : kTileStorages) {
      auto [b, r] = plan(storage);
      plans.push_back(b.PlanWithResult(r[0], 300));
    }
    PrecompileInParallel(plans);
  }
  for (const char* storage : kTileStorages) {
    SCOPED_TRACE(storage);
    auto [b, r] = plan(storage);
    Compare(b,
            {{r[0], 300, "q"}, {r[1], 40, "k"}, {r[2], 40, "v"}, {r[3], 136, "silu_mul"}, {r[4], 300, "residual_add"}},
            {Prefill(200, 1), Prefill(64, 2), Prefill(130, 3)}, 5e-3);
    if (HasFatalFailure()) return;
  }
}

// q4_K's small prefill buckets read the rows as stored
// (matmul_q4k_wgmma_kernel, sm_90a; elsewhere this runs the f16 path):
// against the CPU with every prefill bucket on it (KILN_CUDA_Q4K_WGMMA_MAX),
// at 64-256 tokens over partial tiles (a block's second tile past the last
// row), K cut into slices at 64 tokens; and, with K whole, against the f16
// copy of the weights (its decoding rounds the scale and min to f16 first:
// within an f16 rounding of the copy's values). With every bucket on it
// there is no f16 copy.
TEST_F(CudaKernels, Q4KPrefillMatmulReadsTheRowsAsStored) {
  constexpr int64_t kK = 1792;
  SingleOpPlan b({1, 64, 128, 256}, PlanPagePool{1, 1, 8, 16, 256}, 19);
  const int64_t x = b.Activation(kK, 50);
  b.Weight("gamma", "f32", {kK});
  b.Weight("q", "q4_k", {300, kK}, 0.1f);
  b.Weight("k", "q4_k", {40, kK}, 0.1f);
  b.Weight("v", "q4_k", {40, kK}, 0.1f);
  b.Weight("gate", "q4_k", {136, kK}, 0.1f);
  b.Weight("up", "q4_k", {136, kK}, 0.1f);
  b.Weight("o", "q4_k", {300, kK}, 0.1f);
  const int64_t rq = b.Region(300), rk = b.Region(40), rv = b.Region(40), rg = b.Region(136), ro = b.Region(300);
  LaunchNormedQkvAndGateUp(b, x, rq, rk, rv, rg);
  b.Launch("fused_matmul.residual_add",
           {b.Arena("input", x), b.WeightBinding("weight0", "o"), b.Arena("residual", rq), b.Arena("result0", ro)},
           R"({"epilogue": "residual_add"})");
  const std::vector<Region> regions = {{rq, 300, "q"}, {rk, 40, "k"}, {rg, 136, "silu_mul"}, {ro, 300, "residual_add"}};
  const std::vector<StepBatch> steps = {Prefill(64, 1), Prefill(200, 2), Prefill(130, 3), Prefill(100, 4)};
  {
    const testing::ScopedEnv every_bucket("KILN_CUDA_Q4K_WGMMA_MAX", "256");
    Compare(b, regions, steps, 5e-3);
    if (HasFatalFailure()) return;
  }

  const testing::ScopedEnv whole_k("KILN_CUDA_K_SPLITS", "0");
  for (const Region& r : regions) {
    SCOPED_TRACE(r.what);
    std::vector<std::vector<float>> outputs;
    for (const char* max : {"256", "0"}) {
      absl::StatusOr<std::unique_ptr<Executor>> gpu = [&] {
        const testing::ScopedEnv buckets("KILN_CUDA_Q4K_WGMMA_MAX", max);
        return Gpu(b, r);
      }();
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      if (std::string(max) == "256" && target_ == "cuda:sm_90") {
        EXPECT_EQ((*gpu)->Describe().find("f16 copy"), std::string::npos);
      }
      for (const StepBatch& batch : steps) {
        absl::StatusOr<std::span<const float>> got = (*gpu)->Step(batch);
        ASSERT_TRUE(got.ok()) << got.status();
        outputs.emplace_back(got->begin(), got->end());
      }
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::vector<float>& q4k = outputs[i];
      const std::vector<float>& f16 = outputs[i + steps.size()];
      ASSERT_EQ(q4k.size(), f16.size());
      EXPECT_LT(testing::RelativeL2(q4k, f16), 1e-3) << "step " << i;
    }
  }
}

// Quantised weights of the prefill matmul decoded once at load (the
// default where memory allows) give the same bits as decoding them in every
// step (KILN_CUDA_RESIDENT_F16=0).
TEST_F(CudaKernels, ResidentF16WeightsMatchDecodingPerStep) {
  for (const char* storage : {"q4_k", "q8_0"}) {
    SCOPED_TRACE(storage);
    constexpr int64_t kK = 512;
    SingleOpPlan b({1, 64}, PlanPagePool{1, 1, 8, 16, 64}, 17);
    const int64_t x = b.Activation(kK, 50);
    b.Weight("gamma", "f32", {kK});
    b.Weight("gate", storage, {72, kK}, 0.1f);
    b.Weight("up", storage, {72, kK}, 0.1f);
    const int64_t r = b.Region(72);
    b.Launch("fused_matmul.norm.silu_mul",
             {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "gate"),
              b.WeightBinding("weight1", "up"), b.Arena("result0", r)},
             R"({"epilogue": "silu_mul", "eps": 1e-5})");
    Program program;
    program.plan = b.PlanWithResult(r, 72);
    program.weights = b.Source();
    absl::StatusOr<std::vector<uint8_t>> kernels = Kernels(program.plan);
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    program.kernels.push_back({target_, *kernels});
    BackendOptions options;
    // A 2 GiB pool (1 KB pages): filling it takes long enough that a
    // load-time decode not ordered after the fills would be overwritten.
    options.num_pages = 1 << 21;
    std::vector<std::vector<float>> outputs;
    const testing::ScopedEnv f16_rows("KILN_CUDA_Q4K_WGMMA_MAX", "0");  // q4_K's 64-token bucket on the f16 rows too
    for (const char* resident : {"1", "0"}) {
      absl::StatusOr<std::unique_ptr<Executor>> gpu = [&] {
        const testing::ScopedEnv at_load("KILN_CUDA_RESIDENT_F16", resident);
        return CreateCudaExecutor(program, options);
      }();
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_EQ((*gpu)->Describe().find("f16 copy") != std::string::npos, std::string(resident) == "1")
          << (*gpu)->Describe();
      for (const StepBatch& batch : {Prefill(64, 1), Prefill(40, 2)}) {
        absl::StatusOr<std::span<const float>> got = (*gpu)->Step(batch);
        ASSERT_TRUE(got.ok()) << got.status();
        outputs.emplace_back(got->begin(), got->end());
      }
    }
    ASSERT_EQ(outputs.size(), 4u);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(outputs[i].size(), outputs[i + 2].size());
      EXPECT_TRUE(std::all_of(outputs[i].begin(), outputs[i].end(), [](float v) { return std::isfinite(v); }));
      EXPECT_EQ(0, std::memcmp(outputs[i].data(), outputs[i + 2].data(), outputs[i].size() * sizeof(float))) << "step " << i;
    }
  }
}

// q4_K's CUDA-core matmuls read decode copies made at load (LaneQ4_KTable)
// unless KILN_CUDA_Q4K_TABLE=0 (the blocks' headers, LaneQ4_K): both
// against the CPU, and against each other within the f16 rounding of the
// table's products, for three fused weights, silu_mul and a plain matmul
// in one-, two- and three-token steps.
TEST_F(CudaKernels, Q4KScaleTablesAgreeWithTheHeaders) {
  constexpr int64_t kK = 1280, kN = 72;
  SingleOpPlan b({1, 2, 4}, PlanPagePool{1, 1, 8, 16, 64}, 37);
  const int64_t x = b.Activation(kK, 50);
  b.Weight("gamma", "f32", {kK});
  for (const char* w : {"q", "k", "v", "gate", "up", "down"}) b.Weight(w, "q4_k", {kN, kK}, 0.1f);
  const int64_t rq = b.Region(kN), rk = b.Region(kN), rv = b.Region(kN), rg = b.Region(kN), rd = b.Region(kN);
  LaunchNormedQkvAndGateUp(b, x, rq, rk, rv, rg);
  b.Launch("matmul.down", {b.Arena("input", x), b.WeightBinding("weight", "down"), b.Arena("result", rd)}, "{}");
  const std::vector<Region> regions = {
      {rq, kN, "q"}, {rk, kN, "k"}, {rv, kN, "v"}, {rg, kN, "silu_mul"}, {rd, kN, "down"}};
  const std::vector<StepBatch> batches = {Rows(1, 1), Rows(2, 2), Rows(3, 3)};
  std::map<std::string, std::vector<std::vector<float>>> outputs;  // per switch: per region and step
  for (const char* tables : {"1", "0"}) {
    SCOPED_TRACE(absl::StrCat("KILN_CUDA_Q4K_TABLE=", tables));
    const testing::ScopedEnv table_lane("KILN_CUDA_Q4K_TABLE", tables);
    Compare(b, regions, batches, kInt8ActivationsBound);
    for (const Region& r : regions) {
      absl::StatusOr<std::unique_ptr<Executor>> gpu = Gpu(b, r);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_EQ((*gpu)->Describe().find("q4_K decode copies: ") != std::string::npos, std::string(tables) == "1")
          << (*gpu)->Describe();
      for (const StepBatch& batch : batches) {
        absl::StatusOr<std::span<const float>> got = (*gpu)->Step(batch);
        ASSERT_TRUE(got.ok()) << got.status();
        outputs[tables].emplace_back(got->begin(), got->end());
      }
    }
  }
  ASSERT_EQ(outputs["1"].size(), regions.size() * batches.size());
  ASSERT_EQ(outputs["0"].size(), outputs["1"].size());
  for (size_t i = 0; i < outputs["1"].size(); ++i) {
    // Same int8 activations and codes; only A and M are rounded to f16.
    EXPECT_LT(testing::RelativeL2(outputs["1"][i], outputs["0"][i]), 2e-3)
        << regions[i / batches.size()].what << " step " << i % batches.size();
  }
}

// A 24 x 512 q4_K matmul of weights ~ N(mean, scale) over steps of 1, 2
// and 7 tokens against the CPU; then whether the CUDA executor kept the
// decode copies and left the int8 tile kernel (what Describe() says).
class CudaQ4KRange : public CudaKernels {
 protected:
  void ExpectFallbacks(uint32_t seed, float scale, float mean, bool tables_stay) {
    constexpr int64_t kK = 512, kN = 24;
    SingleOpPlan b({1, 2, 8}, PlanPagePool{1, 1, 8, 16, 64}, seed);
    const int64_t x = b.Activation(kK, 50);
    b.Weight("w", "q4_k", {kN, kK}, scale, false, mean);
    const int64_t r = b.Region(kN);
    b.Launch("matmul.q", {b.Arena("input", x), b.WeightBinding("weight", "w"), b.Arena("result", r)}, "{}");
    Compare(b, {{r, kN, "matmul"}}, {Rows(1, 1), Rows(2, 2), Rows(7, 3)}, kInt8ActivationsBound);
    absl::StatusOr<std::unique_ptr<Executor>> gpu = Gpu(b, {r, kN, "matmul"});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const std::string d = (*gpu)->Describe();
    EXPECT_EQ(d.find("q4_K decode copies: ") != std::string::npos, tables_stay) << d;
    EXPECT_NE(d.find("q4_K steps of 2-63 tokens on matmul_tile_tc_kernel"), std::string::npos) << d;
  }
};

// Weights so large that a block's d * scale passes f16's 65504 (d itself
// still fits; scale 1e6: sub-block scales ~4e5, d ~6e3):
// q4k_scale_table_kernel flags it, the runtime drops the tables and the
// matmuls read the headers, as the CPU does; and steps of 2-63 tokens leave
// the int8 tile kernel (whose f16 MMA holds 8 d * scale) for
// matmul_tile_tc_kernel (raw codes in the MMA, block scales in f32).
TEST_F(CudaQ4KRange, TablesFallBackToHeadersPastHalfRange) { ExpectFallbacks(41, 1e6f, 0.0f, false); }

// d * scale within f16's range but 8 d * scale past it: weights of 1.2e5
// +- 2e4, all positive (mins 0, d * scale ~1.2e4). The tables stay, the
// small buckets leave the int8 tile kernel.
TEST_F(CudaQ4KRange, TileKernelLeftPastAnEighthOfHalfRange) { ExpectFallbacks(43, 2e4f, 1.2e5f, true); }

TEST_F(CudaKernels, GateAndUpOfDifferentStoragesGoThroughScratch) {
  SingleOpPlan b({1, 4, 16, 64}, PlanPagePool{1, 1, 8, 16, 64}, 11);
  const int64_t x = b.Activation(256, 50);
  b.Weight("gate", "q4_k", {40, 256}, 0.1f);
  b.Weight("up", "q6_k", {40, 256}, 0.1f);
  const int64_t r = b.Region(40);
  b.Launch("fused_matmul.silu_mul.mixed",
           {b.Arena("input", x), b.WeightBinding("weight0", "gate"), b.WeightBinding("weight1", "up"), b.Arena("result0", r)},
           R"({"epilogue": "silu_mul", "n": [40, 40]})");
  Compare(b, {{r, 40, "mixed silu_mul"}}, {Rows(1, 1), Rows(7, 2), Rows(50, 3)}, kInt8ActivationsBound);
}

// A one-token silu_mul launch over q4_K stages the down projection's int8
// activations once (PrestagesNext: the last block of each run of 256
// outputs) instead of every block of the down projection: its results are
// the CPU's, and bit for bit those of each block staging them
// (KILN_CUDA_PRESTAGE=0). n = 512: 16 blocks a run (the K split); n = 8704:
// 34 runs over two rounds of blocks, the second partial.
TEST_F(CudaKernels, SiluMulStagesTheDownProjectionOnce) {
  for (int64_t n : {512, 8704}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    SingleOpPlan b({1, 4}, PlanPagePool{1, 1, 8, 16, 64}, 13);
    const int64_t x = b.Activation(256, 50);
    b.Weight("gamma", "f32", {256});
    b.Weight("gate", "q4_k", {n, 256}, 0.1f);
    b.Weight("up", "q4_k", {n, 256}, 0.1f);
    b.Weight("down", "q4_k", {256, n}, 0.1f);
    const int64_t h = b.Region(n), r = b.Region(256);
    b.Launch("fused_matmul.norm.silu_mul.q4_k",
             {b.Arena("input", x), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "gate"),
              b.WeightBinding("weight1", "up"), b.Arena("result0", h)},
             R"({"epilogue": "silu_mul", "eps": 1e-5})");
    b.Launch("fused_matmul.residual_add.q4_k",
             {b.Arena("input", h), b.WeightBinding("weight0", "down"), b.Arena("residual", x), b.Arena("result0", r)},
             R"({"epilogue": "residual_add"})");
    const std::vector<StepBatch> steps = {Rows(1, 1), Rows(1, 2), Rows(4, 3), Rows(1, 4)};
    Compare(b, {{r, 256, "down after silu_mul"}}, steps, kInt8ActivationsBound);
    if (HasFatalFailure()) return;
    ExpectStageImagesChangeNoBit(b, {r, 256, "down"}, steps);
  }
}

TEST_F(CudaKernels, RowOpsGatherAndArgmax) {
  SingleOpPlan b({1, 4, 16, 64}, PlanPagePool{1, 1, 8, 16, 64}, 3);
  const int64_t w = 133;
  const int64_t x = b.Activation(w, 50), y = b.Activation(w, 50), q = b.Activation(4 * 16, 50);
  b.Weight("gamma", "f32", {w});
  b.Weight("bias", "f32", {w});
  b.Weight("head", "q8_0", {45, 128}, 0.1f);
  b.Weight("gamma2", "f32", {128});
  const int64_t x2 = b.Activation(128, 50);
  const int64_t r0 = b.Region(w), r1 = b.Region(w), r2 = b.Region(w), r3 = b.Region(w), r4 = b.Region(w),
                r5 = b.Region(64), r6 = b.Region(1), r7 = b.Region(128), r8 = b.Region(45), r9 = b.Region(1);
  const std::string width = absl::StrCat(R"({"width": )", w, "}");
  b.Launch("rms_norm", {b.Arena("input", x), b.WeightBinding("gamma", "gamma"), b.Arena("result", r0)}, R"({"eps": 1e-6})");
  b.Launch("bias_add", {b.Arena("input", x), b.WeightBinding("bias", "bias"), b.Arena("result", r1)}, width);
  b.Launch("silu", {b.Arena("input", x), b.Arena("result", r2)}, width);
  b.Launch("mul", {b.Arena("lhs", x), b.Arena("rhs", y), b.Arena("result", r3)}, width);
  b.Launch("add", {b.Arena("lhs", x), b.Arena("rhs", y), b.Arena("result", r4)}, width);
  b.Launch("rope", {b.Arena("input", q), b.InputBinding("positions", "positions"), b.Arena("result", r5)},
           R"({"num_heads": 4, "head_dim": 16, "rope_theta": 10000, "rope_dims": 16, "rope_style": "half"})");
  b.Launch("argmax", {b.Arena("input", x), b.Arena("result", r6)}, width);
  b.Launch("gather_rows", {b.Arena("input", x2), b.InputBinding("rows", "logit_rows"), b.Arena("result", r7)},
           R"({"width": 128})");
  b.Launch("fused_matmul.norm.q8_0",
           {b.Arena("input", r7), b.WeightBinding("norm", "gamma2"), b.WeightBinding("weight0", "head"), b.Arena("result0", r8)},
           R"({"epilogue": "none", "eps": 1e-5})");
  b.Launch("argmax", {b.Arena("input", r8), b.Arena("result", r9)}, R"({"width": 45})");
  const std::vector<StepBatch> all_rows = {Rows(1, 1), Rows(3, 2), Rows(13, 3), Rows(37, 7)};
  Compare(b,
          {{r0, w, "rms_norm"}, {r1, w, "bias_add"}, {r2, w, "silu"}, {r3, w, "mul"}, {r4, w, "add"},
           {r5, 64, "rope"}, {r6, 1, "argmax", true}},
          all_rows, 1e-5);
  // The logit rows path: gather picks R < T rows; what follows runs on R rows.
  const std::vector<StepBatch> picked = {Rows(1, 4, {0}), Rows(4, 5, {3, 1}), Rows(13, 6, {12, 0, 5}),
                                         Rows(60, 8, {59, 0, 33})};
  Compare(b, {{r7, 128, "gather_rows"}, {r8, 45, "logits after gather"}, {r9, 1, "argmax after gather", true}}, picked,
          1e-5);
}

// A large bucket's logit rows run on the tile kernels' looping instances
// (a grid of one 8-token tile): more rows than a tile, every row of the
// bucket, and one row; q8_0's head on f16 hi | lo, q4_K's on int8 codes.
TEST_F(CudaKernels, LogitRowsOfALargeBucketPastOneTokenTile) {
  SingleOpPlan b({1, 4, 16, 64}, PlanPagePool{1, 1, 8, 16, 64}, 31);
  const int64_t x = b.Activation(256, 50);
  b.Weight("gamma", "f32", {256});
  b.Weight("head8", "q8_0", {45, 256}, 0.1f);
  b.Weight("head4", "q4_k", {45, 256}, 0.1f);
  const int64_t g = b.Region(256), r8 = b.Region(45), r4 = b.Region(45);
  b.Launch("gather_rows", {b.Arena("input", x), b.InputBinding("rows", "logit_rows"), b.Arena("result", g)},
           R"({"width": 256})");
  b.Launch("fused_matmul.norm.q8_0",
           {b.Arena("input", g), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "head8"), b.Arena("result0", r8)},
           R"({"epilogue": "none", "eps": 1e-5})");
  b.Launch("fused_matmul.norm.q4_k",
           {b.Arena("input", g), b.WeightBinding("norm", "gamma"), b.WeightBinding("weight0", "head4"), b.Arena("result0", r4)},
           R"({"epilogue": "none", "eps": 1e-5})");
  std::vector<int32_t> twenty, all;
  for (int32_t i = 0; i < 20; ++i) twenty.push_back((7 * i + 3) % 60);
  for (int32_t i = 0; i < 64; ++i) all.push_back(63 - i);
  const std::vector<StepBatch> steps = {Rows(60, 1, twenty), Rows(64, 2, all), Rows(40, 3, {39}), Rows(17, 4, {0, 16})};
  Compare(b, {{r8, 45, "q8_0 head"}}, steps, 1e-5);
  Compare(b, {{r4, 45, "q4_K head"}}, steps, kInt8ActivationsBound);
}

// Rows of a 2-bit table repeat their maximum (4 levels a group of 64):
// argmax keeps the first, as the CPU does, on its 16-byte loads (4160: more
// than one pass of the block's 1024 threads; 1088: less).
TEST_F(CudaKernels, ArgmaxKeepsTheFirstOfEqualMaxima) {
  for (int64_t width : {4160, 1088}) {
    SCOPED_TRACE(width);
    SingleOpPlan b({1, 4, 16}, PlanPagePool{1, 1, 8, 16, 64}, 29);
    b.Weight("table", "int2:g64", {50, width}, 1.0f);
    const int64_t e = b.Region(width), r = b.Region(1);
    b.Launch("embedding.q", {b.WeightBinding("table", "table"), b.InputBinding("tokens", "tokens"), b.Arena("result", e)},
             absl::StrCat(R"({"vocab": 50, "width": )", width, "}"));
    b.Launch("argmax", {b.Arena("input", e), b.Arena("result", r)}, absl::StrCat(R"({"width": )", width, "}"));
    Compare(b, {{e, width, "embedding"}, {r, 1, "argmax", true}}, {Rows(1, 1), Rows(3, 2), Rows(16, 3)}, 1e-6);
    if (HasFatalFailure()) return;
  }
}

// Relative L2 bound of a paged attention's output against the CPU: f32
// sums of f32 operands (attention_kernel), or of f16 Q, K, V and P on
// tensor cores where buckets of AttentionGroupMinBucket tokens or more run
// attention_group_kernel (head dims of multiples of 16 up to 128, groups of
// up to 16 heads; measured up to 3.2e-4) and prefill tiles run
// attention_prefill_kernel.
double AttentionBound(int64_t head_dim, int64_t group) {
  return head_dim % 16 == 0 && head_dim <= 128 && group <= 16 ? 1e-3 : 1e-4;
}

struct AttentionCase {
  int64_t head_dim;
  const char* rope;  // "", "interleaved", "half"
  int64_t heads = 4, kv_heads = 2;
  int64_t page = 8;  // a power of two (the page index a shift) or not (a division)
  bool f16 = false;  // the pool's element type (kiln compile --kv-type f16)
};

// A paged_attention launch of `heads` query heads over `kv_heads` KV heads.
int64_t AttentionLaunch(SingleOpPlan& b, int64_t heads, int64_t kv_heads, int64_t d, int64_t page, const char* rope,
                        bool f16 = false) {
  const int64_t q = b.Activation(heads * d, 50), k = b.Activation(kv_heads * d, 50), v = b.Activation(kv_heads * d, 50);
  const int64_t out = b.Region(heads * d);
  std::string constants =
      absl::StrCat(R"({"num_heads": )", heads, R"(, "num_kv_heads": )", kv_heads, R"(, "head_dim": )", d,
                   R"(, "layer": 1, "scale": )", 1.0 / std::sqrt(static_cast<double>(d)), R"(, "kv_type": ")",
                   f16 ? "f16" : "f32", R"(", "page_size": )", page, R"(, "max_tokens": 512)");
  if (std::string(rope).size() > 0) {
    absl::StrAppend(&constants, R"(, "rope_theta": 10000, "rope_dims": )", d, R"(, "rope_style": ")", rope, R"(")");
  }
  constants += "}";
  b.Launch(std::string(rope).empty() ? "paged_attention" : "paged_attention.rope",
           {b.Arena("q", q), b.Arena("k", k), b.Arena("v", v), b.InputBinding("pool", "kv"),
            b.InputBinding("positions", "positions"), b.InputBinding("query_starts", "query_starts"),
            b.InputBinding("context_lens", "context_lens"), b.InputBinding("block_tables", "block_tables"),
            b.Arena("result", out)},
           constants);
  return out;
}

class CudaAttention : public CudaKernels, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(CudaAttention, PagedAttentionOverStepsMatchesTheCpu) {
  const AttentionCase c = GetParam();
  const int64_t d = c.head_dim, page = c.page;
  PlanPagePool pool{2, c.kv_heads, d, page, 512};
  pool.f16 = c.f16;
  SingleOpPlan b({1, 4, 16, 256}, pool, 5);
  const int64_t out = AttentionLaunch(b, c.heads, c.kv_heads, d, page, c.rope, c.f16);
  // Two sequences on scattered pages: prefill, decode, a chunk, a long chunk
  // (several 32-position tiles per warp; 64-token tiles of one sequence and
  // one that spans both), then decode deep in the context.
  std::vector<int32_t> t0, t1;
  for (int32_t i = 0; i < 32; ++i) {
    t0.push_back(63 - 2 * i);
    t1.push_back(2 * i);
  }
  const std::vector<std::vector<int32_t>> tables = {t0, t1};
  const std::vector<StepBatch> steps = {
      RaggedBatch({0, 0}, {5, 3}, tables, 50, 1),      RaggedBatch({5, 3}, {1, 1}, tables, 50, 2),
      RaggedBatch({6, 4}, {9, 2}, tables, 50, 3),      RaggedBatch({15, 6}, {150, 60}, tables, 50, 4),
      RaggedBatch({165, 66}, {1, 1}, tables, 50, 5),   RaggedBatch({166}, {1}, {t0}, 50, 6),
      // Prefill tiles (64 tokens of one sequence, attention_prefill_kernel)
      // starting deep in the context, beside a partial one.
      RaggedBatch({167, 67}, {64, 100}, tables, 50, 7),
  };
  Compare(b, {{out, c.heads * d, "paged attention"}}, steps, AttentionBound(d, c.heads / c.kv_heads), 64);
}

// Query heads per KV head: 2 (stories260K's), 4 (Llama-3-8B's: 32 over 8)
// and 10; pages of 8 positions and of 12; f32 pools and f16 ones (the CPU
// reading the same rounded rows).
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttention,
    ::testing::Values(AttentionCase{8, "interleaved"}, AttentionCase{64, "half"}, AttentionCase{128, ""},
                      AttentionCase{128, "half"}, AttentionCase{256, "interleaved"}, AttentionCase{128, "half", 32, 8},
                      AttentionCase{64, "interleaved", 20, 2}, AttentionCase{64, "half", 4, 2, 12},
                      AttentionCase{8, "interleaved", 4, 2, 8, true}, AttentionCase{128, "half", 32, 8, 8, true},
                      AttentionCase{64, "half", 4, 2, 12, true}, AttentionCase{256, "", 4, 2, 8, true}),
    [](const ::testing::TestParamInfo<AttentionCase>& i) {
      return absl::StrCat("d", i.param.head_dim, "_", std::string(i.param.rope).empty() ? "norope" : i.param.rope, "_h",
                          i.param.heads, "_kv", i.param.kv_heads, "_page", i.param.page, i.param.f16 ? "_f16" : "");
    });

// One-token decode attention over heads of 128 dims stages the o
// projection's int8 activations in its merging blocks
// (AttentionStagesNext): o's results are the CPU's, and bit for bit those
// of o's blocks staging them (KILN_CUDA_PRESTAGE=0), over contexts of one
// slice and of ten.
TEST_F(CudaKernels, DecodeAttentionStagesTheOProjection) {
  const int64_t d = 128, heads = 4, kv_heads = 2, page = 16;
  SingleOpPlan b({1, 64}, PlanPagePool{2, kv_heads, d, page, 512}, 17);
  const int64_t attn = AttentionLaunch(b, heads, kv_heads, d, page, "half");
  const int64_t x = b.Activation(256, 50), r = b.Region(256);
  b.Weight("o", "q4_k", {256, heads * d}, 0.1f);
  b.Launch("fused_matmul.residual_add.q4_k",
           {b.Arena("input", attn), b.WeightBinding("weight0", "o"), b.Arena("residual", x), b.Arena("result0", r)},
           R"({"epilogue": "residual_add"})");
  std::vector<int32_t> table(32);
  for (int32_t i = 0; i < 32; ++i) table[i] = 31 - i;
  // Decode at 4 and 5 positions (one slice), then at 306 and 307 (ten)
  // after a prefill in chunks of 60.
  std::vector<StepBatch> steps = {RaggedBatch({0}, {3}, {table}, 50, 1), RaggedBatch({3}, {1}, {table}, 50, 2),
                                  RaggedBatch({4}, {1}, {table}, 50, 3)};
  for (int32_t c = 0; c < 5; ++c) steps.push_back(RaggedBatch({5 + 60 * c}, {60}, {table}, 50, 4 + c));
  steps.push_back(RaggedBatch({305}, {1}, {table}, 50, 9));
  steps.push_back(RaggedBatch({306}, {1}, {table}, 50, 10));
  Compare(b, {{r, 256, "o after decode attention"}}, steps, kInt8ActivationsBound, 32);
  if (HasFatalFailure()) return;
  ExpectStageImagesChangeNoBit(b, {r, 256, "o"}, steps, 32);
}

// Steps of many sequences (the search for a token's sequence in
// query_starts): 140 sequences prefill 3 tokens each, then decode.
TEST_F(CudaKernels, AttentionOverStepsOfManySequences) {
  constexpr int kSeqs = 140;
  const int64_t d = 64, page = 8;
  SingleOpPlan b({1, 256, 512}, PlanPagePool{2, 2, d, page, 64}, 9);
  const int64_t out = AttentionLaunch(b, 8, 2, d, page, "half");
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> zeros(kSeqs, 0), threes(kSeqs, 3), ones(kSeqs, 1);
  for (int32_t s = 0; s < kSeqs; ++s) tables.push_back({kSeqs - 1 - s});
  Compare(b, {{out, 8 * d, "paged attention, 140 sequences"}},
          {RaggedBatch(zeros, threes, tables, 50, 1), RaggedBatch(threes, ones, tables, 50, 2)}, AttentionBound(d, 4),
          kSeqs);
}

}  // namespace
}  // namespace kiln

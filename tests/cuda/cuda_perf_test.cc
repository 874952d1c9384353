// Timing of the CUDA executor on Llama-3-8B-shaped layers (hidden 4096,
// 32 heads of 128, 8 KV heads, FFN 14336): a step over `kLayers` layers
// that share one layer's weights (each layer's weights exceed the L2, so
// every layer streams them from memory again). Prints decode time per layer
// and the weight bandwidth it reaches, and prefill tokens/s. Runs only with
// KILN_CUDA_PERF set and a GPU (scripts/gpu/device.sh sets it on request).
#include <chrono>
#include <cstdlib>

#include "codegen/ptx/ptx_codegen.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/cuda_executor.h"
#include "tests/cuda/single_op_plans.h"

namespace kiln {
namespace {

constexpr int64_t kHidden = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kFfn = 14336, kLayers = 8;

TEST(CudaPerf, Llama3LayerDecodeAndPrefill) {
  if (std::getenv("KILN_CUDA_PERF") == nullptr) GTEST_SKIP() << "set KILN_CUDA_PERF=1 to time";
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(0);
  if (!ctx.ok()) GTEST_SKIP() << "no CUDA GPU here: " << ctx.status().message();
  const std::string target = absl::StrCat("cuda:sm_", (*ctx)->sm());
  for (const std::string storage : {"q4_k", "q8_0", "f16"}) {
   // Without attention the layer is its matmuls alone: the difference is attention's share.
   for (const bool with_attention : {true, false}) {
    testing::SingleOpPlan b({1, 512}, PlanPagePool{kLayers, kKvHeads, kHeadDim, 16, 2048}, 1);
    const int64_t q_width = kHeads * kHeadDim, kv_width = kKvHeads * kHeadDim;
    b.Weight("attn_norm", "f32", {kHidden});
    b.Weight("ffn_norm", "f32", {kHidden});
    b.Weight("wq", storage, {q_width, kHidden}, 0.02f, true);
    b.Weight("wk", storage, {kv_width, kHidden}, 0.02f, true);
    b.Weight("wv", storage, {kv_width, kHidden}, 0.02f, true);
    b.Weight("wo", storage, {kHidden, q_width}, 0.02f, true);
    b.Weight("gate", storage, {kFfn, kHidden}, 0.02f, true);
    b.Weight("up", storage, {kFfn, kHidden}, 0.02f, true);
    b.Weight("down", storage, {kHidden, kFfn}, 0.02f, true);
    int64_t h = b.Activation(kHidden, 64);
    const int64_t q = b.Region(q_width), k = b.Region(kv_width), v = b.Region(kv_width), att = b.Region(q_width),
                  h1 = b.Region(kHidden), ff = b.Region(kFfn), h2 = b.Region(kHidden);
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      const int64_t in = layer == 0 ? h : h2;
      b.Launch("fused_matmul.norm", {b.Arena("input", in), b.WeightBinding("norm", "attn_norm"), b.WeightBinding("weight0", "wq"),
                                     b.WeightBinding("weight1", "wk"), b.WeightBinding("weight2", "wv"), b.Arena("result0", q),
                                     b.Arena("result1", k), b.Arena("result2", v)},
               R"({"epilogue": "none", "eps": 1e-5})");
      if (with_attention) b.Launch("paged_attention.rope",
               {b.Arena("q", q), b.Arena("k", k), b.Arena("v", v), b.InputBinding("pool", "kv"),
                b.InputBinding("positions", "positions"), b.InputBinding("query_starts", "query_starts"),
                b.InputBinding("context_lens", "context_lens"), b.InputBinding("block_tables", "block_tables"),
                b.Arena("result", att)},
               absl::StrCat(R"({"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "scale": 0.088, "layer": )", layer,
                            R"(, "rope_theta": 500000, "rope_dims": 128, "rope_style": "half"})"));
      // The residual stream alternates between h1 and h2; layer 0 reads the embedding.
      b.Launch("fused_matmul.residual_add", {b.Arena("input", with_attention ? att : q), b.WeightBinding("weight0", "wo"), b.Arena("residual", in),
                                             b.Arena("result0", h1)},
               R"({"epilogue": "residual_add"})");
      b.Launch("fused_matmul.norm.silu_mul", {b.Arena("input", h1), b.WeightBinding("norm", "ffn_norm"),
                                              b.WeightBinding("weight0", "gate"), b.WeightBinding("weight1", "up"),
                                              b.Arena("result0", ff)},
               R"({"epilogue": "silu_mul", "eps": 1e-5})");
      b.Launch("fused_matmul.residual_add", {b.Arena("input", ff), b.WeightBinding("weight0", "down"), b.Arena("residual", h1),
                                             b.Arena("result0", h2)},
               R"({"epilogue": "residual_add"})");
    }
    Program program;
    program.plan = b.PlanWithResult(h2, kHidden);
    program.weights = b.Source();
    absl::StatusOr<std::vector<uint8_t>> kernels = codegen::ptx::GenerateCudaKernels(program.plan, target);
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    program.kernels.push_back({target, *kernels});
    BackendOptions options;
    options.num_pages = 128;
    absl::StatusOr<std::unique_ptr<Executor>> ex = CreateCudaExecutor(program, options);
    ASSERT_TRUE(ex.ok()) << ex.status();
    std::vector<int32_t> table(128);
    for (int i = 0; i < 128; ++i) table[i] = i;
    // Prefill 512 tokens, then decode at positions 512.. (context ~512).
    const StepBatch prefill = testing::RaggedBatch({0}, {512}, {table}, 64, 1);
    auto time_steps = [&](const std::function<StepBatch(int)>& make, int n) {
      for (int i = 0; i < 2; ++i) EXPECT_TRUE((*ex)->Step(make(i)).ok());
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) {
        absl::StatusOr<std::span<const float>> r = (*ex)->Step(make(i));
        EXPECT_TRUE(r.ok()) << r.status();
      }
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / n;
    };
    const double prefill_s = time_steps([&](int) { return prefill; }, 5);
    const double decode_s =
        time_steps([&](int i) { return testing::RaggedBatch({512 + i % 64}, {1}, {table}, 64, i); }, 50);
    const double bytes_per_layer = static_cast<double>(
        (*cpu::ParseWeightStorage(storage)->RowBytes(kHidden)) * (q_width + 2 * kv_width + 2 * kFfn) +
        *cpu::ParseWeightStorage(storage)->RowBytes(q_width) * kHidden +
        *cpu::ParseWeightStorage(storage)->RowBytes(kFfn) * kHidden);
    const double per_layer = decode_s / kLayers;
    std::printf(
        "perf %-5s %s decode: %7.1f us/layer, %6.0f GB/s weights (%4.1f%% of 4270); est. 32 layers %6.0f tok/s (no head) | "
        "prefill 512: %8.1f us/layer, %7.0f tok/s est. 32 layers\n",
        storage.c_str(), with_attention ? "layer " : "matmuls", per_layer * 1e6, bytes_per_layer / per_layer / 1e9, 100 * bytes_per_layer / per_layer / 4.27e12,
        1.0 / (per_layer * 32), prefill_s / kLayers * 1e6, 512.0 / (prefill_s / kLayers * 32));
   }
  }
}

}  // namespace
}  // namespace kiln

// CUDA codegen without a GPU: every kernel instantiation the plans of the
// test models use (stories260K as is and at several --quant, its q4_0/q6_K/
// f16 mix, kiln synth's tiny preset at k-quant storages) compiles with NVRTC and assembles for sm_90 in
// `kiln compile --target cuda:sm_90`, and `kiln inspect` reports registers
// and spills per kernel. Also: the kernels section's parser refuses every
// damaged form, and a plan op the CUDA backend lacks is an error naming it.
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "codegen/ptx/ptx_codegen.h"
#include "gtest/gtest.h"
#include "kernels-templates/cuda/kernel_abi.h"
#include "runtime/cuda/cuda_bundle.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/cuda/kernel_calls.h"
#include "runtime/executor/program.h"
#include "tests/cuda/single_op_plans.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using testing::Quote;
using testing::RunKiln;

// Compiles `model` for `target` program-only and returns the program.
std::unique_ptr<Program> CompileForCuda(const std::filesystem::path& model, const std::string& extra,
                                        const std::string& target, const std::filesystem::path& out) {
  const testing::CommandResult r = RunKiln(absl::StrCat("compile ", Quote(model.string()), " --target ", target,
                                                        " --program-only ", extra, " -o ", Quote(out.string())));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return nullptr;
  absl::StatusOr<Program> p = LoadArtifactProgram(out.string(), model.string());
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::make_unique<Program>(*std::move(p)) : nullptr;
}

// The bundle holds every instantiation the plan needs, with a lowered name,
// a cubin for the SM and resource numbers from the assembler.
void CheckBundle(const Program& program, uint32_t sm) {
  const KernelBundle* kb = program.FindKernels("cuda");
  ASSERT_NE(kb, nullptr);
  absl::StatusOr<cuda::CudaBundle> bundle = cuda::ParseBundle(kb->bytes);
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  EXPECT_EQ(bundle->sm, sm);
  ASSERT_GE(bundle->cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(bundle->cubin.data(), "\x7f" "ELF", 4), 0);
  EXPECT_TRUE(absl::StrContains(bundle->ptx, absl::StrCat(".target sm_", sm)));
  absl::StatusOr<std::vector<std::string>> names = cuda::PlanInstantiations(program.plan);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(bundle->kernels.size(), names->size());
  for (const std::string& n : *names) {
    const cuda::BundleKernel* k = bundle->Find(n);
    ASSERT_NE(k, nullptr) << n;
    EXPECT_FALSE(k->lowered_name.empty()) << n;
    EXPECT_TRUE(absl::StrContains(bundle->ptx, k->lowered_name)) << n;
    EXPECT_GT(k->registers, 0) << n;
    EXPECT_LE(k->registers, 255) << n;
    EXPECT_GE(k->spill_store_bytes, 0) << n;
    EXPECT_GE(k->stack_bytes, 0) << n;
  }
}

TEST(CudaCodegen, Stories260KAtEveryQuantCompilesForSm90) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("cuda_codegen");
  // (f16 is in the mixes below; q4_k cannot hold stories260K's 64-wide rows
  // and falls back to q8_0: the synth test covers it.) Each compile takes
  // seconds: the list stays short to keep CI fast.
  for (const std::string quant : {"", "int4", "int2"}) {
    SCOPED_TRACE(quant.empty() ? "as is" : quant);
    std::unique_ptr<Program> p = CompileForCuda(model, quant.empty() ? "" : "--quant " + quant, "cuda:sm_90",
                                                dir / absl::StrCat("s", quant, ".kiln"));
    ASSERT_NE(p, nullptr);
    CheckBundle(*p, 90);
  }
}

TEST(CudaCodegen, QuantisedTestModelsCompileForSm80And89) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K-q4_0-mix.gguf");
  const std::filesystem::path dir = testing::ScratchDir("cuda_codegen_sm");
  for (uint32_t sm : {80u, 89u}) {
    std::unique_ptr<Program> p = CompileForCuda(model, "", absl::StrCat("cuda:sm_", sm), dir / absl::StrCat(sm, ".kiln"));
    ASSERT_NE(p, nullptr);
    CheckBundle(*p, sm);
  }
}

TEST(CudaCodegen, SynthTinyAtSeveralStoragesCompiles) {
  SKIP_WITHOUT_COMPILER();
  const std::filesystem::path dir = testing::ScratchDir("cuda_codegen_synth");
  for (const std::string type : {"q6_k", "q2_k"}) {
    SCOPED_TRACE(type);
    const std::filesystem::path gguf = dir / (type + ".gguf");
    const testing::CommandResult s =
        RunKiln(absl::StrCat("synth --preset tiny --type ", type, " --threads 2 -o ", Quote(gguf.string())));
    ASSERT_EQ(s.exit_code, 0) << s.output;
    std::unique_ptr<Program> p = CompileForCuda(gguf, "", "cuda:sm_90", dir / (type + ".kiln"));
    ASSERT_NE(p, nullptr);
    CheckBundle(*p, 90);
  }
}

// The plan of a Llama-3-8B-shaped model (hidden 4096, 32 q / 8 kv heads of
// 128, FFN 14336, vocab 128256) in the launch pattern the compiler emits for
// it, without weight data: kernels need only the plan.
Plan Llama3Plan(const std::string& storage) {
  testing::SingleOpPlan b({1, 2, 4, 8, 16, 32, 64, 128, 256, 512}, PlanPagePool{32, 8, 128, 16, 8192}, 1);
  const int64_t hidden = 4096, q_width = 4096, kv_width = 1024, ffn = 14336, vocab = 128256;
  b.DeclareWeight("token_embd.weight", storage, {vocab, hidden});
  b.DeclareWeight("output_norm.weight", "f32", {hidden});
  b.DeclareWeight("output.weight", storage, {vocab, hidden});
  const int64_t h = b.Region(hidden), q = b.Region(q_width), k = b.Region(kv_width), v = b.Region(kv_width),
                att = b.Region(q_width), h1 = b.Region(hidden), ff = b.Region(ffn), last = b.Region(hidden),
                logits = b.Region(vocab);
  b.Launch("embedding", {b.WeightBinding("table", "token_embd.weight"), b.InputBinding("tokens", "tokens"), b.Arena("result", h)},
           R"({"vocab": 128256, "width": 4096})");
  for (int layer = 0; layer < 32; ++layer) {
    const std::string p = absl::StrCat("blk.", layer, ".");
    b.DeclareWeight(p + "attn_norm.weight", "f32", {hidden});
    b.DeclareWeight(p + "ffn_norm.weight", "f32", {hidden});
    b.DeclareWeight(p + "attn_q.weight", storage, {q_width, hidden});
    b.DeclareWeight(p + "attn_k.weight", storage, {kv_width, hidden});
    b.DeclareWeight(p + "attn_v.weight", storage, {kv_width, hidden});
    b.DeclareWeight(p + "attn_output.weight", storage, {hidden, q_width});
    b.DeclareWeight(p + "ffn_gate.weight", storage, {ffn, hidden});
    b.DeclareWeight(p + "ffn_up.weight", storage, {ffn, hidden});
    b.DeclareWeight(p + "ffn_down.weight", storage, {hidden, ffn});
    b.Launch("fused_matmul.norm", {b.Arena("input", h), b.WeightBinding("norm", p + "attn_norm.weight"),
                                   b.WeightBinding("weight0", p + "attn_q.weight"), b.WeightBinding("weight1", p + "attn_k.weight"),
                                   b.WeightBinding("weight2", p + "attn_v.weight"), b.Arena("result0", q),
                                   b.Arena("result1", k), b.Arena("result2", v)},
             R"({"epilogue": "none", "eps": 1e-5, "k": 4096, "n": [4096, 1024, 1024]})");
    b.Launch("paged_attention.rope",
             {b.Arena("q", q), b.Arena("k", k), b.Arena("v", v), b.InputBinding("pool", "kv"),
              b.InputBinding("positions", "positions"), b.InputBinding("query_starts", "query_starts"),
              b.InputBinding("context_lens", "context_lens"), b.InputBinding("block_tables", "block_tables"),
              b.Arena("result", att)},
             absl::StrCat(R"({"num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "scale": 0.0884, "kv_type": "f32", "layer": )",
                          layer, R"(, "rope_theta": 500000, "rope_dims": 128, "rope_style": "half"})"));
    b.Launch("fused_matmul.residual_add", {b.Arena("input", att), b.WeightBinding("weight0", p + "attn_output.weight"),
                                           b.Arena("residual", h), b.Arena("result0", h1)},
             R"({"epilogue": "residual_add", "k": 4096, "n": [4096]})");
    b.Launch("fused_matmul.norm.silu_mul", {b.Arena("input", h1), b.WeightBinding("norm", p + "ffn_norm.weight"),
                                            b.WeightBinding("weight0", p + "ffn_gate.weight"),
                                            b.WeightBinding("weight1", p + "ffn_up.weight"), b.Arena("result0", ff)},
             R"({"epilogue": "silu_mul", "eps": 1e-5, "k": 4096, "n": [14336, 14336]})");
    b.Launch("fused_matmul.residual_add", {b.Arena("input", ff), b.WeightBinding("weight0", p + "ffn_down.weight"),
                                           b.Arena("residual", h1), b.Arena("result0", h)},
             R"({"epilogue": "residual_add", "k": 14336, "n": [4096]})");
  }
  b.Launch("gather_rows", {b.Arena("input", h), b.InputBinding("rows", "logit_rows"), b.Arena("result", last)},
           R"({"width": 4096})");
  b.Launch("fused_matmul.norm", {b.Arena("input", last), b.WeightBinding("norm", "output_norm.weight"),
                                 b.WeightBinding("weight0", "output.weight"), b.Arena("result0", logits)},
           R"({"epilogue": "none", "eps": 1e-5, "k": 4096, "n": [128256]})");
  return b.PlanWithResult(logits, vocab);
}

TEST(CudaCodegen, Llama3ShapedPlansCompileForSm90) {
  for (const std::string storage : {"q4_k", "q8_0", "f16"}) {
    SCOPED_TRACE(storage);
    Program program;
    program.plan = Llama3Plan(storage);
    ASSERT_EQ(program.plan.launches.size(), 32u * 5 + 3);
    absl::StatusOr<std::vector<uint8_t>> kernels = codegen::ptx::GenerateCudaKernels(program.plan, "cuda:sm_90");
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    program.kernels.push_back({"cuda:sm_90", *kernels});
    CheckBundle(program, 90);
    absl::StatusOr<cuda::CudaBundle> bundle = cuda::ParseBundle(*kernels);
    ASSERT_TRUE(bundle.ok());
    EXPECT_NE(bundle->Find("kiln::attention_kernel<128, kiln::KvF32>"), nullptr);
    EXPECT_NE(bundle->Find(absl::StrCat("kiln::matmul_tc_kernel<", *cuda::StorageTemplate(storage), ", 1>")), nullptr);
    EXPECT_NE(bundle->Find("kiln::matmul_f16_tc_kernel<1>"), nullptr);
    // sm_90 compiles for sm_90a: the prefill matmul on warpgroup MMA, two
    // blocks per SM (at most 128 registers) and nothing spilled.
    EXPECT_TRUE(absl::StrContains(bundle->ptx, ".target sm_90a"));
    for (int epilogue : {0, 1, 2}) {
      const cuda::BundleKernel* wgmma = bundle->Find(absl::StrCat("kiln::matmul_f16_wgmma_kernel<", epilogue, ">"));
      ASSERT_NE(wgmma, nullptr) << epilogue;
      EXPECT_LE(wgmma->registers, 128) << epilogue;
      EXPECT_EQ(wgmma->spill_store_bytes, 0) << epilogue;
    }
    // q4_K's small prefill steps read the rows as stored (matmul_q4k_wgmma_kernel): likewise.
    for (int epilogue : {0, 1, 2}) {
      const cuda::BundleKernel* q4k = bundle->Find(absl::StrCat("kiln::matmul_q4k_wgmma_kernel<", epilogue, ">"));
      if (storage != "q4_k") {
        EXPECT_EQ(q4k, nullptr) << epilogue;
        continue;
      }
      ASSERT_NE(q4k, nullptr) << epilogue;
      EXPECT_LE(q4k->registers, 128) << epilogue;
      EXPECT_EQ(q4k->spill_store_bytes, 0) << epilogue;
    }
    EXPECT_LE(2 * (cuda_abi::Q4KWgmmaSmemBytes() + 1024), 228 * 1024);
    // Its K slices' sum, per epilogue.
    for (int epilogue : {0, 1, 2}) {
      EXPECT_NE(bundle->Find(absl::StrCat("kiln::matmul_split_sum_kernel<", epilogue, ">")), nullptr) << epilogue;
    }
    // q8_0's one-token decode streams the weights (matmul_stream_kernel):
    // the three launch kinds, nothing spilled, and two blocks per SM: the
    // registers of two blocks of kStreamThreads in the 64K of an SM, and the
    // ring with the down projection's K of activations in half of an SM's
    // 228 KB less 1 KB reserved per block.
    const std::string storage_template = *cuda::StorageTemplate(storage);
    for (const std::string& args : {std::string(", 0, true>"), std::string(", 1, true>"), std::string(", 2, false>")}) {
      const std::string name = absl::StrCat("kiln::matmul_stream_kernel<", storage_template, args);
      const cuda::BundleKernel* stream = bundle->Find(name);
      if (storage != "q8_0") {
        EXPECT_EQ(stream, nullptr) << name;
        continue;
      }
      ASSERT_NE(stream, nullptr) << name;
      EXPECT_LE(stream->registers, 65536 / (2 * cuda_abi::kStreamThreads)) << name;
      EXPECT_EQ(stream->spill_store_bytes, 0) << name;
      EXPECT_LE(cuda::StreamSmemBytesOf(storage, 14336), 113 * 1024) << name;
    }
    // f16 rows are read in place; quantised ones are decoded to f16 first.
    const cuda::BundleKernel* dequantize =
        bundle->Find(absl::StrCat("kiln::dequantize_f16_kernel<", *cuda::StorageTemplate(storage), ">"));
    EXPECT_EQ(dequantize == nullptr, storage == "f16");
  }
}

// An f16 page pool (kiln compile --kv-type f16): the four attention
// kernels' KvF16 instances compile for sm_90, spilling no more than the f32
// pool's (whose prefill tiles NVRTC's ptxas already spills 8 bytes of at 128
// dims), and a launch whose kv_type is not the pool's is an error naming it.
TEST(CudaCodegen, F16KvCacheAttentionCompilesForSm90) {
  for (const int64_t head_dim : {64, 128}) {
    SCOPED_TRACE(head_dim);
    int64_t prefill_spill[2] = {0, 0};
    for (const bool f16 : {false, true}) {
      PlanPagePool pool{2, 2, head_dim, 16, 512};
      pool.f16 = f16;
      testing::SingleOpPlan b({1, 64}, pool, 1);
      const int64_t q = b.Activation(4 * head_dim), k = b.Activation(2 * head_dim), v = b.Activation(2 * head_dim);
      const int64_t out = b.Region(4 * head_dim);
      auto launch = [&](const std::string& kv_type) {
        b.Launch("paged_attention",
                 {b.Arena("q", q), b.Arena("k", k), b.Arena("v", v), b.InputBinding("pool", "kv"),
                  b.InputBinding("positions", "positions"), b.InputBinding("query_starts", "query_starts"),
                  b.InputBinding("context_lens", "context_lens"), b.InputBinding("block_tables", "block_tables"),
                  b.Arena("result", out)},
                 absl::StrCat(R"({"num_heads": 4, "num_kv_heads": 2, "scale": 0.125, "layer": 1, "head_dim": )",
                              head_dim, R"(, "kv_type": ")", kv_type, R"("})"));
      };
      launch(f16 ? "f16" : "f32");
      absl::StatusOr<std::vector<uint8_t>> kernels =
          codegen::ptx::GenerateCudaKernels(b.PlanWithResult(out, 4 * head_dim), "cuda:sm_90");
      ASSERT_TRUE(kernels.ok()) << kernels.status();
      absl::StatusOr<cuda::CudaBundle> bundle = cuda::ParseBundle(*kernels);
      ASSERT_TRUE(bundle.ok()) << bundle.status();
      const std::string kv = f16 ? "kiln::KvF16" : "kiln::KvF32", other = f16 ? "kiln::KvF32" : "kiln::KvF16";
      for (const std::string& name : {absl::StrCat("kiln::kv_append_kernel<", kv, ">"),
                                      absl::StrCat("kiln::attention_kernel<", head_dim, ", ", kv, ">"),
                                      absl::StrCat("kiln::attention_group_kernel<", head_dim, ", ", kv, ">")}) {
        const cuda::BundleKernel* kernel = bundle->Find(name);
        ASSERT_NE(kernel, nullptr) << name;
        EXPECT_EQ(kernel->spill_store_bytes, 0) << name;
      }
      const cuda::BundleKernel* prefill =
          bundle->Find(absl::StrCat("kiln::attention_prefill_kernel<", head_dim, ", ", kv, ">"));
      ASSERT_NE(prefill, nullptr);
      prefill_spill[f16] = prefill->spill_store_bytes;
      EXPECT_EQ(bundle->Find(absl::StrCat("kiln::attention_kernel<", head_dim, ", ", other, ">")), nullptr);
      if (!f16) continue;
      launch("f32");
      absl::StatusOr<std::vector<uint8_t>> mixed =
          codegen::ptx::GenerateCudaKernels(b.PlanWithResult(out, 4 * head_dim), "cuda:sm_90");
      ASSERT_FALSE(mixed.ok());
      EXPECT_TRUE(absl::StrContains(mixed.status().message(), "kv_type f32 differs from the page pool's"))
          << mixed.status();
    }
    EXPECT_LE(prefill_spill[1], prefill_spill[0]);
  }
}

TEST(CudaCodegen, InspectShowsRegistersAndSpillsPerKernel) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path out = testing::ScratchDir("cuda_inspect") / "s.kiln";
  ASSERT_NE(CompileForCuda(model, "--quant q8_0", "cuda:sm_90", out), nullptr);
  const testing::CommandResult r = RunKiln("inspect " + Quote(out.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "kiln::matmul_kernel<kiln::StorageQ8_0, 0, true, 1>")) << r.output;
  int kernel_lines = 0;
  for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
    if (!absl::StrContains(line, "kiln::")) continue;
    ++kernel_lines;
    EXPECT_TRUE(absl::StrContains(line, " regs, spill ")) << line;
  }
  EXPECT_GE(kernel_lines, 6) << r.output;
}

TEST(CudaCodegen, UnknownOpIsAnErrorNamingTheLaunch) {
  absl::StatusOr<Plan> plan = ParsePlan(R"({"format": "kiln-plan-v1", "function": "step", "model": {"n_vocab": 4},
    "buckets": [1], "arena_bytes": [256], "results": [{"role": "result0", "arena": [0]}],
    "inputs": [{"role": "kv", "kind": "page_pool", "layers": 1, "kv_heads": 1, "head_dim": 8, "page_size": 16, "max_tokens": 16}],
    "weights": [], "launches": [{"kernel": "softmax.f32", "bindings": [{"role": "input", "arena": [0]}], "constants": {}}]})");
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::vector<uint8_t>> k = codegen::ptx::GenerateCudaKernels(*plan, "cuda:sm_90");
  ASSERT_FALSE(k.ok());
  EXPECT_TRUE(absl::StrContains(k.status().message(), "softmax.f32")) << k.status();
  EXPECT_TRUE(absl::StrContains(k.status().message(), "no kernel for op 'softmax'")) << k.status();
  EXPECT_FALSE(codegen::ptx::GenerateCudaKernels(*plan, "cuda:sm90").ok());
}

// The host sizes the decode matmul's grid with the rows per warp of the
// storage's lane (matmul_lanes.cuh's kRows), looked up by the storage's
// name as WeightStorage spells it ("q6_K"): a miss leaves rows unwritten.
TEST(CudaKernelCalls, DecodeRowsPerWarpFollowTheLanes) {
  const std::pair<const char*, int> lanes[] = {{"f16", 4},  {"bf16", 4}, {"q8_0", 2}, {"q4_k", 4},
                                               {"q5_0", 2}, {"q5_1", 2}, {"q6_k", 1}, {"q4_0", 4}};
  for (const auto& [text, rows] : lanes) {
    absl::StatusOr<cpu::WeightStorage> storage = cpu::ParseWeightStorage(text);
    ASSERT_TRUE(storage.ok()) << text;
    EXPECT_EQ(cuda::MatmulRowsPerWarp(storage->Name(), 1), rows) << text << " (" << storage->Name() << ")";
    EXPECT_EQ(cuda::MatmulRowsPerWarp(storage->Name(), 8), 2) << text;
  }
}

// The wgmma prefill matmul cuts K only where its tiles would leave half the
// SMs idle (on the H200's 132 SMs, cutting o_proj and down at 512 tokens too
// cost 1.8 ms per step), into enough slices of at least 8 steps for two
// blocks per SM, none empty. Tiles of the 8B shape: qkv 48 and o_proj/down
// 32 per 128 tokens, gate/up (silu_mul, 64 outputs a tile) 224.
TEST(CudaKernelCalls, WgmmaKSlicesOnlyWhereTilesLeaveHalfTheSmsIdle) {
  using cuda_abi::WgmmaKSplits;
  EXPECT_EQ(WgmmaKSplits(32, 4096, 132), 8);    // o_proj at 64-128 tokens: 9 wanted, capped at 8
  EXPECT_EQ(WgmmaKSplits(32, 14336, 132), 8);   // down
  EXPECT_EQ(WgmmaKSplits(48, 4096, 132), 6);    // qkv: 6 slices of 11, 11, ..., 9 steps
  EXPECT_EQ(WgmmaKSplits(224, 4096, 132), 1);   // gate/up fills the SMs
  EXPECT_EQ(WgmmaKSplits(64, 4096, 132), 5);    // o_proj at 256 tokens: 5 slices of 13 steps (the last 12)
  EXPECT_EQ(WgmmaKSplits(128, 4096, 132), 1);   // o_proj at 512 tokens: not cut
  EXPECT_EQ(WgmmaKSplits(6, 1792, 132), 3);     // cuda_kernels_test's prefill matmul: 28 steps as 10, 10, 8
  EXPECT_EQ(WgmmaKSplits(6, 256, 132), 1);      // 4 steps: too few to cut
  EXPECT_EQ(WgmmaKSplits(3, 960, 132), 1);      // 15 steps: one slice of at least 8 would be all
  // Floats per token row of the slices' partial sums: whole tiles of 128 rows.
  EXPECT_EQ(cuda_abi::WgmmaPartialStride(4096, cuda_abi::kEpilogueResidualAdd), 4096);
  EXPECT_EQ(cuda_abi::WgmmaPartialStride(300, cuda_abi::kEpilogueNone), 384);
  EXPECT_EQ(cuda_abi::WgmmaPartialStride(14336, cuda_abi::kEpilogueSiluMul), 28672);
  EXPECT_EQ(cuda_abi::WgmmaPartialStride(136, cuda_abi::kEpilogueSiluMul), 384);
}

// The int8 tile matmul's row tiles per block: the most of 4, 2, 1 that
// leave 7/4 blocks per SM (231 on the H200). The 8B's launches at steps of
// up to 16 sequences (one token block): gate/up 14336 outputs, qkv 6144, o
// and down 4096; at 32 sequences two token blocks.
TEST(CudaKernelCalls, TileInt8RowTilesLeaveSevenQuartersOfABlockPerSm) {
  using cuda_abi::TileInt8RowTiles;
  EXPECT_EQ(TileInt8RowTiles(14336, 1, 132), 2);  // 4 tiles: 224 blocks, 2: 448
  EXPECT_EQ(TileInt8RowTiles(6144, 1, 132), 1);   // 2 tiles: 192
  EXPECT_EQ(TileInt8RowTiles(4096, 1, 132), 1);   // 2 tiles: 128
  EXPECT_EQ(TileInt8RowTiles(14336, 2, 132), 4);  // 448
  EXPECT_EQ(TileInt8RowTiles(4096, 2, 132), 2);   // 256
  EXPECT_EQ(TileInt8RowTiles(40, 1, 132), 1);     // a small launch: one tile
  EXPECT_EQ(TileInt8RowTiles(128256, 1, 132), 4); // the logits
}

// Decode attention's context slices: about four blocks an SM, 1 to 16.
// The 8B's 32 heads on 132 SMs: 16, 8, 4 and 2 slices for buckets of 1, 2,
// 4 and 8 tokens, one from 16 on; stories260K's 8 heads keep 16 to 4 tokens.
TEST(CudaKernelCalls, AttentionSplitsLeaveAboutFourBlocksPerSm) {
  using cuda_abi::AttentionSplits;
  EXPECT_EQ(AttentionSplits(1, 32, 132), 16);
  EXPECT_EQ(AttentionSplits(2, 32, 132), 8);
  EXPECT_EQ(AttentionSplits(4, 32, 132), 4);
  EXPECT_EQ(AttentionSplits(8, 32, 132), 2);
  EXPECT_EQ(AttentionSplits(16, 32, 132), 1);
  EXPECT_EQ(AttentionSplits(512, 32, 132), 1);
  EXPECT_EQ(AttentionSplits(4, 8, 132), 16);
  EXPECT_EQ(AttentionSplits(16, 8, 132), 4);
  EXPECT_EQ(AttentionSplits(64, 8, 132), 1);
  EXPECT_EQ(AttentionSplits(0, 32, 132), 16);  // no tokens: the cap, not a division by zero
}

TEST(CudaBundle, RoundTripsAndRefusesEveryTruncation) {
  cuda::CudaBundle b;
  b.sm = 90;
  b.ptx = ".version 9.0\n.target sm_90\n";
  b.cubin = {0x7f, 'E', 'L', 'F', 1, 2, 3};
  b.info_log = "ptxas info : Used 12 registers";
  b.kernels.push_back({"kiln::rms_norm_kernel", "_Z15rms_norm_kernel", 12, 0, 0, 64, 0});
  const std::vector<uint8_t> bytes = cuda::SerializeBundle(b);
  absl::StatusOr<cuda::CudaBundle> back = cuda::ParseBundle(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->sm, 90u);
  EXPECT_EQ(back->ptx, b.ptx);
  EXPECT_EQ(back->cubin, b.cubin);
  ASSERT_EQ(back->kernels.size(), 1u);
  EXPECT_EQ(back->kernels[0].lowered_name, "_Z15rms_norm_kernel");
  EXPECT_EQ(back->kernels[0].registers, 12);
  EXPECT_EQ(back->kernels[0].shared_bytes, 64);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(cuda::ParseBundle(std::span<const uint8_t>(bytes.data(), n)).ok()) << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(cuda::ParseBundle(longer).ok());
  std::vector<uint8_t> huge = bytes;
  huge[16] = 0xff;  // the PTX length's low byte: far past the end
  huge[23] = 0x7f;
  EXPECT_FALSE(cuda::ParseBundle(huge).ok());
}

TEST(CudaBundle, TargetNamesParse) {
  EXPECT_EQ(*cuda::SmOfTarget("cuda:sm_90"), 90u);
  EXPECT_EQ(*cuda::SmOfTarget("cuda:sm_80"), 80u);
  EXPECT_FALSE(cuda::SmOfTarget("cuda").ok());
  EXPECT_FALSE(cuda::SmOfTarget("vulkan").ok());
  EXPECT_FALSE(cuda::SmOfTarget("cuda:sm_x").ok());
}

}  // namespace
}  // namespace kiln

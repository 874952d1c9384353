// The Vulkan kernels section: every module codegen writes passes the
// spirv-val binary, the bundle parser refuses damaged bytes with an error
// (never a crash), codegen errors name the template and its constants, and
// `kiln inspect` lists each module of a compiled artifact.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "codegen/spirv/glslang_next.h"
#include "codegen/spirv/spirv_codegen.h"
#include "codegen/spirv/spirv_templates.h"
#include "runtime/vulkan/vulkan_bundle.h"
#include "tests/test_support.h"
#include "tests/vulkan/vulkan_test_plan.h"

namespace kiln::testing {
namespace {

// A plan with one launch of every op and every weight storage.
absl::StatusOr<Plan> EveryKernelPlan(TestPlan& tp) {
  tp.SetPool(1, 2, 8, 4, 32);
  const int64_t vocab = 16;
  const int64_t x = tp.Embed("emb", vocab, 256);
  for (const char* storage : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K",
                              "q6_K", "int4:g128", "int2:g64"}) {
    const std::string name = absl::StrCat("w_", storage);
    tp.Weight(name, storage, {16, 256});
    tp.Launch(absl::StrCat("matmul.", storage),
              {tp.ArenaBinding("input", x), TestPlan::WeightBinding("weight", name), tp.ArenaBinding("result", tp.Region(16))},
              "\"k\":256,\"n\":16");
  }
  const int64_t q = tp.Region(32), k = tp.Region(16), v = tp.Region(16), att = tp.Region(32), r = tp.Region(32);
  tp.Weight("g", "f32", {256});
  tp.Weight("wq", "q4_K", {32, 256});
  tp.Weight("wk", "q4_K", {16, 256});
  tp.Weight("wv", "q4_K", {16, 256});
  tp.Launch("fused_matmul.norm.q4_K",
            {tp.ArenaBinding("input", x), TestPlan::WeightBinding("norm", "g"), TestPlan::WeightBinding("weight0", "wq"),
             TestPlan::WeightBinding("weight1", "wk"), TestPlan::WeightBinding("weight2", "wv"),
             tp.ArenaBinding("result0", q), tp.ArenaBinding("result1", k), tp.ArenaBinding("result2", v)},
            "\"epilogue\":\"none\",\"eps\":1e-5,\"k\":256,\"n\":[32,16,16]");
  tp.Launch("rope", {tp.ArenaBinding("input", q), TestPlan::InputBinding("positions"), tp.ArenaBinding("result", r)},
            "\"num_heads\":4,\"head_dim\":8,\"rope_dims\":8,\"rope_style\":\"half\",\"rope_theta\":10000");
  tp.Launch("paged_attention.rope",
            {tp.ArenaBinding("q", q), tp.ArenaBinding("k", k), tp.ArenaBinding("v", v), TestPlan::InputBinding("kv"),
             TestPlan::InputBinding("positions"), TestPlan::InputBinding("query_starts"),
             TestPlan::InputBinding("context_lens"), TestPlan::InputBinding("block_tables"), tp.ArenaBinding("result", att)},
            "\"head_dim\":8,\"layer\":0,\"num_heads\":4,\"num_kv_heads\":2,\"page_size\":4,\"scale\":0.35,"
            "\"rope_dims\":8,\"rope_style\":\"interleaved\",\"rope_theta\":10000");
  tp.Weight("bias", "f32", {32});
  const int64_t b = tp.Region(32), s = tp.Region(32), m = tp.Region(32), a = tp.Region(32), n = tp.Region(32),
                g = tp.Region(32), am = tp.Region(1);
  tp.Launch("bias_add", {tp.ArenaBinding("input", att), TestPlan::WeightBinding("bias", "bias"), tp.ArenaBinding("result", b)}, "");
  tp.Launch("silu", {tp.ArenaBinding("input", b), tp.ArenaBinding("result", s)}, "\"width\":32");
  tp.Launch("mul", {tp.ArenaBinding("lhs", s), tp.ArenaBinding("rhs", r), tp.ArenaBinding("result", m)}, "\"width\":32");
  tp.Launch("add", {tp.ArenaBinding("lhs", m), tp.ArenaBinding("rhs", r), tp.ArenaBinding("result", a)}, "\"width\":32");
  tp.Weight("g32", "f32", {32});
  tp.Launch("rms_norm", {tp.ArenaBinding("input", a), TestPlan::WeightBinding("gamma", "g32"), tp.ArenaBinding("result", n)},
            "\"eps\":1e-5");
  tp.Launch("gather_rows", {tp.ArenaBinding("input", n), TestPlan::InputBinding("logit_rows"), tp.ArenaBinding("result", g)},
            "\"width\":32");
  tp.Launch("argmax", {tp.ArenaBinding("input", g), tp.ArenaBinding("result", am)}, "\"width\":32");
  return tp.Build(g, 32);
}

TEST(VulkanBundle, EveryModulePassesSpirvVal) {
  if (std::system("spirv-val --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "spirv-val is not installed";
  TestPlan tp;
  absl::StatusOr<Plan> plan = EveryKernelPlan(tp);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::vector<uint8_t>> bytes = codegen::spirv::GenerateVulkanKernels(*plan);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::vector<vulkan::SpirvModule>> modules = vulkan::ParseBundle(*bytes);
  ASSERT_TRUE(modules.ok()) << modules.status();
  std::set<std::string> templates;
  for (const vulkan::SpirvModule& m : *modules) templates.insert(m.template_name);
  std::set<std::string> expected = {"argmax", "attention_combine", "copy_logits", "dequant_f16", "elementwise", "embedding", "gather_rows",
                                    "kv_append", "matmul", "matmul_coopmat", "matmul_decode", "matmul_tiled", "paged_attention",
                                    "paged_attention_prefill", "rms_norm", "rope", "row_rms"};
  // The workgroup-scope tensor-core prefill where the newer glslang is
  // installed (scripts/setup.sh fetches it): its large and small tiles once
  // for the 15 plain matmuls (their weights all [16, 256]), with their f16
  // activations (no norm); the
  // QKV's 16 q columns are not whole 256-column tiles, so it has none.
  const bool next = codegen::spirv::GlslangNextAvailable().ok();
  if (next) expected.insert({"activations_f16", "matmul_coopmat2"});
  EXPECT_EQ(templates, expected);
  // 15 storages of the plain matmul and the fused QKV, each a decode, a
  // small-bucket, a tiled prefill and a tensor-core prefill variant, the
  // two q4_K ones also a decode on integer dot products; the tensor-core
  // prefill on f16 rows once for the 15 plain matmuls (their weights all
  // [16, 256]: the same instance) and once for the QKV, with the kernel
  // that makes the f16 copy for each storage but f16 (the QKV's q4_K is the
  // plain q4_K's); the rest once each (elementwise: four ops; attention
  // also its query-tiled prefill variant and its split steps' FOLD variant;
  // argmax also as the greedy steps' last dispatch, TO_HOST; row_rms before
  // the normed QKV's tiled variants).
  EXPECT_EQ(modules->size(), 4 * (15u + 1) + 2 + 2 + 14 + 4 + 13 + (next ? 3 : 0));
  int f16_rows = 0, to_host = 0;
  for (const vulkan::SpirvModule& m : *modules) {
    f16_rows += m.template_name == "matmul_coopmat" && absl::StrContains(m.constants, "F16W=1") ? 1 : 0;
    to_host += m.template_name == "argmax" && absl::StrContains(m.constants, "TO_HOST=1") ? 1 : 0;
  }
  EXPECT_EQ(f16_rows, 2);
  EXPECT_EQ(to_host, 1);
  const std::filesystem::path dir = ScratchDir("spirv_val");
  for (size_t i = 0; i < modules->size(); ++i) {
    if (codegen::spirv::NeedsGlslangNext(vulkan::KernelInstance{(*modules)[i].template_name, {}, 0})) {
      // SPIR-V 1.6 with SPV_NV_cooperative_matrix2, which Debian 12's spirv-val does not know.
      EXPECT_TRUE(codegen::spirv::ValidateNext((*modules)[i].words).ok()) << (*modules)[i].Key();
      continue;
    }
    const std::filesystem::path file = dir / absl::StrCat(i, ".spv");
    std::ofstream(file, std::ios::binary)
        .write(reinterpret_cast<const char*>((*modules)[i].words.data()), (*modules)[i].words.size() * 4);
    const std::string command = absl::StrCat("spirv-val --target-env vulkan1.1 ", Quote(file.string()), " 2>&1");
    EXPECT_EQ(std::system(command.c_str()), 0) << (*modules)[i].Key();
  }
}

// Prefill attention on workgroup-scope tensor cores
// (paged_attention_coopmat2.comp), where the newer glslang is installed:
// planned for head_dim 128 at group 4 (Llama-3-8B's heads) on f32 and f16
// pages, compiled and validated with the other attention kernels. (Head
// dims that are not multiples of 16 get none: EveryModulePassesSpirvVal's
// head_dim 8.)
TEST(VulkanBundle, WorkgroupTensorCoreAttentionCompiles) {
  if (!codegen::spirv::GlslangNextAvailable().ok()) GTEST_SKIP() << "no newer glslang (scripts/setup.sh fetches it)";
  for (const bool f16 : {false, true}) {
    TestPlan tp({1, 64});
    tp.SetPool(1, 2, 128, 16, 128, f16);
    const int64_t q = tp.Embed("eq", 5, 1024), k = tp.Embed("ek", 5, 256), v = tp.Embed("ev", 5, 256);
    const int64_t att = tp.Region(1024);
    tp.Launch("paged_attention.rope",
              {tp.ArenaBinding("q", q), tp.ArenaBinding("k", k), tp.ArenaBinding("v", v), TestPlan::InputBinding("kv"),
               TestPlan::InputBinding("positions"), TestPlan::InputBinding("query_starts"),
               TestPlan::InputBinding("context_lens"), TestPlan::InputBinding("block_tables"),
               tp.ArenaBinding("result", att)},
              "\"head_dim\":128,\"layer\":0,\"num_heads\":8,\"num_kv_heads\":2,\"page_size\":16,"
              "\"scale\":0.088,\"rope_dims\":128,\"rope_style\":\"half\",\"rope_theta\":500000");
    absl::StatusOr<Plan> plan = tp.Build(att, 1024);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<std::vector<uint8_t>> bytes = codegen::spirv::GenerateVulkanKernels(*plan);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<std::vector<vulkan::SpirvModule>> modules = vulkan::ParseBundle(*bytes);
    ASSERT_TRUE(modules.ok()) << modules.status();
    int found = 0;
    for (const vulkan::SpirvModule& m : *modules) {
      if (m.template_name != "paged_attention_coopmat2") continue;
      ++found;
      EXPECT_THAT(m.constants, ::testing::HasSubstr(absl::StrCat("KV_F16=", f16 ? 1 : 0)));
      EXPECT_THAT(m.constants, ::testing::HasSubstr("BR=64"));
      EXPECT_TRUE(codegen::spirv::ValidateNext(m.words).ok());
    }
    EXPECT_EQ(found, 1) << (f16 ? "f16 pages" : "f32 pages");
  }
}

TEST(VulkanBundle, DamagedBytesAreErrors) {
  vulkan::SpirvModule m;
  m.template_name = "matmul";
  m.constants = "K=64";
  m.workgroup_size = 64;
  m.words = {0x07230203, 0x00010300, 0, 8, 0};
  const std::vector<uint8_t> good = vulkan::SerializeBundle({m, m});
  absl::StatusOr<std::vector<vulkan::SpirvModule>> parsed = vulkan::ParseBundle(good);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[1].Key(), "matmul K=64");
  EXPECT_EQ((*parsed)[1].words, m.words);
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(vulkan::ParseBundle(std::span<const uint8_t>(good.data(), n)).ok()) << "prefix of " << n << " bytes";
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_THAT(std::string(vulkan::ParseBundle(longer).status().message()), ::testing::HasSubstr("after the last module"));
  std::vector<uint8_t> version = good;
  version[8] = 2;
  EXPECT_THAT(std::string(vulkan::ParseBundle(version).status().message()), ::testing::HasSubstr("version 2"));
  std::vector<uint8_t> huge = good;
  huge[16] = 0xFF;  // the first string's length
  huge[17] = 0xFF;
  EXPECT_FALSE(vulkan::ParseBundle(huge).ok());
  // Workgroup sizes the writer never writes, put where "64" was (after the
  // magic, version, count and the strings "matmul", "K=64" and "main").
  for (const char* wg : {"064", "+64", " 64", "0", "-1", "6x"}) {
    vulkan::SpirvModule odd = m;
    std::vector<uint8_t> bytes = vulkan::SerializeBundle({odd});
    const std::string text(wg);
    const size_t at = 8 + 4 + 4 + (4 + 6) + (4 + 4) + (4 + 4);  // the workgroup string's length field
    ASSERT_EQ(bytes[at], 2);
    bytes[at] = static_cast<uint8_t>(text.size());
    bytes.erase(bytes.begin() + at + 4, bytes.begin() + at + 6);
    bytes.insert(bytes.begin() + at + 4, text.begin(), text.end());
    EXPECT_THAT(std::string(vulkan::ParseBundle(bytes).status().message()),
                ::testing::HasSubstr("has workgroup size '" + text + "'"));
  }
  m.words[0] = 0x12345678;
  EXPECT_THAT(std::string(vulkan::ParseBundle(vulkan::SerializeBundle({m})).status().message()),
              ::testing::HasSubstr("SPIR-V magic"));
  EXPECT_THAT(vulkan::DescribeBundle(longer), ::testing::HasSubstr("unreadable"));
}

TEST(VulkanBundle, CompileErrorsNameTheTemplateAndConstants) {
  vulkan::KernelInstance k;
  k.template_name = "rms_norm";
  k.constants = {{"WG", "64"}, {"WIDTH", "32"}};  // EPS missing: the GLSL does not compile
  absl::StatusOr<std::vector<uint32_t>> words = codegen::spirv::CompileInstance(k);
  ASSERT_FALSE(words.ok());
  EXPECT_THAT(std::string(words.status().message()), ::testing::HasSubstr("'rms_norm' with WG=64 WIDTH=32"));
  EXPECT_THAT(std::string(words.status().message()), ::testing::HasSubstr("EPS"));
  k.template_name = "no_such_kernel";
  EXPECT_THAT(std::string(codegen::spirv::CompileInstance(k).status().message()), ::testing::HasSubstr("no_such_kernel"));
  k.template_name = "embedding";
  k.constants = {{"WG", "64"}, {"WIDTH", "32"}, {"W0", "iq2_xs"}, {"W0_COLS", "32"}};
  EXPECT_FALSE(codegen::spirv::CompileInstance(k).ok());
}

// KILN_KERNEL_TEMPLATES=DIR: DIR/vulkan/<file> replaces the embedded template
// of that name (here one that stops glslang with its own message), and only
// while the variable is set.
TEST(VulkanBundle, KernelTemplatesFolderReplacesAnEmbeddedTemplate) {
  vulkan::KernelInstance k;
  k.template_name = "rms_norm";
  k.constants = {{"WG", "64"}, {"WIDTH", "32"}, {"EPS", "1e-5"}};
  ASSERT_TRUE(codegen::spirv::CompileInstance(k).ok());
  const std::filesystem::path dir = ScratchDir("kernel_templates");
  std::filesystem::create_directories(dir / "vulkan");
  std::string text;
  for (const codegen::spirv::EmbeddedTemplate& t : codegen::spirv::EmbeddedTemplates()) {
    if (t.file == "rms_norm.comp") text = std::string(t.text);
  }
  ASSERT_FALSE(text.empty());
  std::ofstream(dir / "vulkan" / "rms_norm.comp") << text << "\n#error rms_norm from the templates folder\n";
  absl::StatusOr<std::vector<uint32_t>> words = [&] {
    const testing::ScopedEnv templates("KILN_KERNEL_TEMPLATES", dir.c_str());
    return codegen::spirv::CompileInstance(k);
  }();
  ASSERT_FALSE(words.ok());
  EXPECT_THAT(std::string(words.status().message()), ::testing::HasSubstr("rms_norm from the templates folder"));
  EXPECT_TRUE(codegen::spirv::CompileInstance(k).ok());
}

TEST(VulkanBundle, UnsupportedLaunchIsAnErrorNamingIt) {
  TestPlan tp;
  const int64_t x = tp.Embed("emb", 8, 16);
  const int64_t y = tp.Region(16);
  tp.Launch("softmax", {tp.ArenaBinding("input", x), tp.ArenaBinding("result", y)}, "\"width\":16");
  absl::StatusOr<Plan> plan = tp.Build(y, 16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::vector<uint8_t>> bytes = codegen::spirv::GenerateVulkanKernels(*plan);
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(std::string(bytes.status().message()), ::testing::HasSubstr("launch 'softmax'"));
}

TEST(VulkanBundle, ExecutorRefusesABundleWithoutItsKernels) {
  TestPlan tp;
  const int64_t x = tp.Embed("emb", 8, 16);
  absl::StatusOr<Plan> plan = tp.Build(x, 16);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<uint8_t> empty = vulkan::SerializeBundle({});
  absl::StatusOr<std::unique_ptr<Executor>> ex = vulkan::CreateVulkanExecutor(*plan, tp.Source(), empty, {});
  if (absl::IsUnavailable(ex.status())) GTEST_SKIP() << "no Vulkan: " << ex.status().message();
  ASSERT_FALSE(ex.ok());
  EXPECT_THAT(std::string(ex.status().message()), ::testing::HasSubstr("lack 'embedding WG=64 WIDTH=16"));
}

TEST(VulkanBundle, InspectListsEveryModuleOfAnArtifact) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path out = ScratchDir("inspect_vulkan") / "s.kiln";
  CommandResult compile = RunKiln(absl::StrCat("compile ", Quote(model.string()), " --target vulkan -o ", Quote(out.string())));
  ASSERT_EQ(compile.exit_code, 0) << compile.output;
  EXPECT_THAT(compile.output, ::testing::HasSubstr("vulkan kernels:"));
  CommandResult inspect = RunKiln(absl::StrCat("inspect ", Quote(out.string())));
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_THAT(inspect.output, ::testing::HasSubstr("kernels for vulkan"));
  for (const char* line : {"paged_attention", "kv_append", "embedding", "gather_rows", "copy_logits",
                           "K=64 NUM_W=3 N0=64 N1=32 N2=32 EPILOGUE=0 HAS_NORM=1"}) {
    EXPECT_THAT(inspect.output, ::testing::HasSubstr(line));
  }
}

}  // namespace
}  // namespace kiln::testing

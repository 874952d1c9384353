// `kiln compile` end to end: import, the pass pipeline, the per-pass IR dumps
// (which kiln-opt must read back and print identically), and the errors a
// user gets for models kiln cannot take.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/formats/gguf.h"
#include "runtime/formats/gguf_writer.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Quote;
using testing::RunKiln;

#ifdef KILN_OPT
testing::CommandResult RunKilnOpt(const std::string& args) {
  testing::CommandResult r;
  const std::string cmd = std::string(KILN_OPT) + " " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
#endif

TEST(KilnCompile, DumpsOneFilePerPassThatKilnOptReadsBackIdentically) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("compile_dump");
  const testing::CommandResult r =
      RunKiln("compile " + Quote(model.string()) + " --dump-ir=after-all --dump-dir " + Quote(dir.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no -o given: nothing written"));
  const std::vector<std::string> files = {"00-import.mlir", "01-kiln-fuse.mlir", "02-kiln-quantize.mlir",
                                          "03-kiln-paged-attention.mlir", "04-kiln-plan-memory.mlir",
                                          "05-kiln-emit-plan.mlir"};
  size_t found = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++found;
  }
  EXPECT_EQ(found, files.size());
  for (const std::string& f : files) {
    const std::string ir = testing::ReadFileOrDie(dir / f);
    ASSERT_FALSE(ir.empty()) << f;
#ifdef KILN_OPT
    const testing::CommandResult back = RunKilnOpt(Quote((dir / f).string()));
    ASSERT_EQ(back.exit_code, 0) << f << ": " << back.output;
    EXPECT_EQ(back.output, ir) << f << " does not print back identically";
#endif
  }
  const std::string imported = testing::ReadFileOrDie(dir / files[0]);
  EXPECT_THAT(imported, HasSubstr("kiln.rope"));
  EXPECT_THAT(imported, HasSubstr("!kiln.kv_cache<5 x 4 x 8 x 2048, f32>"));
  EXPECT_THAT(imported, HasSubstr("kiln.weight \"blk.4.ffn_down.weight\" : !kiln.weight<[64, 172], #kiln.storage<f32>>"));
  const std::string fused = testing::ReadFileOrDie(dir / files[1]);
  EXPECT_THAT(fused, HasSubstr("kiln.fused_matmul"));
  EXPECT_THAT(fused, HasSubstr("epilogue = #kiln<epilogue silu_mul>"));
  EXPECT_THAT(fused, HasSubstr("epilogue = #kiln<epilogue residual_add>"));
  EXPECT_THAT(fused, Not(HasSubstr("kiln.rope ")));
  const std::string paged = testing::ReadFileOrDie(dir / files[3]);
  EXPECT_THAT(paged, HasSubstr("kiln.paged_attention"));
  EXPECT_THAT(paged, HasSubstr("!kiln.page_pool<5 x 4 x 8, page 16, f32>"));
  EXPECT_THAT(paged, HasSubstr("tensor<?x?xi32> {kiln.role = \"block_tables\"}"));
  EXPECT_THAT(paged, Not(HasSubstr("kiln.attention ")));
  EXPECT_THAT(testing::ReadFileOrDie(dir / files[5]), HasSubstr("kiln.plan @step"));
}

TEST(KilnCompile, PrintsPipeline) {
  SKIP_WITHOUT_COMPILER();
  const testing::CommandResult r = RunKiln("compile m.gguf --quant q4_k --page-size 32 --print-pipeline");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "builtin.module(kiln-fuse,kiln-quantize{quant=q4_k group-size=128},kiln-paged-attention{page-size=32 "
            "kv-type=f32},"
            "kiln-plan-memory,kiln-emit-plan)\n");
}

TEST(KilnCompile, QuantizePolicyReachesTheIr) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("compile_quant");
  const testing::CommandResult r = RunKiln("compile " + Quote(model.string()) +
                                           " --quant q8_0 --dump-ir=after-all --dump-dir " + Quote(dir.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ir = testing::ReadFileOrDie(dir / "02-kiln-quantize.mlir");
  EXPECT_THAT(ir, HasSubstr("kiln.weight \"blk.0.attn_q.weight\" {repack = \"f32->q8_0\", source = "
                            "#kiln.storage<f32>} : !kiln.weight<[64, 64], #kiln.storage<q8_0>>"));
  // ffn_down rows of 172 are not whole q8_0 blocks: they fall back, with a remark.
  EXPECT_THAT(ir, HasSubstr("kiln.weight \"blk.0.ffn_down.weight\" {repack = \"f32->f16\""));
  EXPECT_THAT(r.output, HasSubstr("blk.0.ffn_down.weight"));
}

TEST(KilnCompile, RejectsBadOptions) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  testing::CommandResult r = RunKiln("compile " + Quote(model.string()) + " --quant q9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("f16, bf16, q8_0, q4_k, int4, int2"));
  r = RunKiln("compile " + Quote(model.string()) + " --target cuda:sm_75");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("unknown --target 'cuda:sm_75'"));
  r = RunKiln("compile " + Quote(model.string()) + " --buckets 1,zero");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--buckets: 'zero' is not a positive token count"));
  // An -o that cannot be written fails before the compile, not after it.
  const std::filesystem::path dir = testing::ScratchDir("compile_bad_output");
  r = RunKiln("compile " + Quote(model.string()) + " -o " + Quote((dir / "missing" / "m.kiln").string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("m.kiln.part: cannot create: No such file or directory"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("kernel launches per step"))) << "compiled before failing";
  r = RunKiln("compile " + Quote(model.string()) + " -o " + Quote(dir.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(": is a directory"));
}

// --kv-type f16 halves the page pool (kiln inspect says so, and the plan
// carries it), for every target; other types are refused by name.
TEST(KilnCompile, KvTypeF16HalvesThePagePool) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("compile_kv_type");
  for (const std::string type : {"f32", "f16"}) {
    const std::string out = (dir / (type + ".kiln")).string();
    testing::CommandResult r = RunKiln("compile " + Quote(model.string()) + " --kv-type " + type + " -o " + Quote(out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = RunKiln("inspect " + Quote(out));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 5 layers x 4 kv heads x 8 dims, K and V, 16 positions a page: 10 KiB in f32.
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("kv pool: 5 layers x 4 kv heads x 8 head dim, ", type,
                                                 ", pages of 16 tokens (", type == "f16" ? "10.0" : "20.0", " KiB)")))
        << r.output;
  }
  testing::CommandResult r = RunKiln("compile " + Quote(model.string()) + " --kv-type f16 --target vulkan -o " +
                                     Quote((dir / "vulkan.kiln").string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = RunKiln("compile " + Quote(model.string()) + " --kv-type q8_0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--kv-type: 'q8_0' is not f32 or f16"));
}

// A copy of `source` with its metadata and tensors, minus `drop`, with
// `arch` as general.architecture when given.
std::string RewriteGguf(const std::filesystem::path& source, const std::string& out, const std::string& drop,
                        const std::string& arch = "") {
  absl::StatusOr<std::unique_ptr<GgufFile>> in = GgufFile::Open(source.string());
  EXPECT_TRUE(in.ok()) << in.status();
  GgufWriter w;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (!arch.empty() && key.rfind("llama.", 0) == 0) {
      w.Set(arch + key.substr(5), value);
    } else {
      w.Set(key, value);
    }
  }
  if (!arch.empty()) w.Set("general.architecture", GgufValue::String(arch));
  for (const GgufTensor& t : (*in)->tensors()) {
    if (t.name == drop) continue;
    EXPECT_TRUE(w.AddTensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  }
  EXPECT_TRUE(w.WriteFile(out).ok());
  return out;
}

TEST(KilnCompile, MissingTensorIsNamed) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("compile_missing");
  const std::string file = RewriteGguf(model, (dir / "m.gguf").string(), "blk.3.ffn_up.weight");
  const testing::CommandResult r = RunKiln("compile " + Quote(file));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("tensor 'blk.3.ffn_up.weight' not found (a Llama-family model needs it)"));
}

TEST(KilnCompile, UnsupportedArchitectureListsSupported) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("compile_arch");
  const std::string file = RewriteGguf(model, (dir / "m.gguf").string(), "", "gpt2");
  const testing::CommandResult r = RunKiln("compile " + Quote(file));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("architecture 'gpt2' is not supported (supported: llama, mistral, qwen2)"));
}

TEST(KilnCompile, RealQwenModelHasBiasesAndHalfRope) {
  SKIP_WITHOUT_COMPILER();
  const std::filesystem::path model = testing::ModelCacheDir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not fetched";
  const std::filesystem::path dir = testing::ScratchDir("compile_qwen");
  const testing::CommandResult r =
      RunKiln("compile " + Quote(model.string()) + " --dump-ir=after-all --dump-dir " + Quote(dir.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string imported = testing::ReadFileOrDie(dir / "00-import.mlir");
  EXPECT_THAT(imported, HasSubstr("kiln.bias_add"));
  EXPECT_THAT(imported, HasSubstr("style = \"half\""));
  EXPECT_THAT(imported, HasSubstr("theta = 1.000000e+06"));
  EXPECT_THAT(imported, HasSubstr("#kiln.storage<q5_0>"));
}

// A one-layer Llama-layout Hugging Face folder with F32 tensors of the given
// shapes, filled with small values.
std::filesystem::path WriteHfModel(const std::string& name, const std::string& architecture) {
  const std::filesystem::path dir = testing::ScratchDir(name);
  testing::WriteBinaryFile(dir / "config.json", R"({"architectures": [")" + architecture + R"("],
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
    "rope_theta": 500000.0, "tie_word_embeddings": true, "hidden_act": "silu"})");
  std::vector<testing::SafetensorsEntry> tensors;
  auto add = [&](const std::string& n, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    tensors.push_back({n, "F32", shape, testing::F32Bytes(std::vector<float>(count, 0.01f))});
  };
  add("model.embed_tokens.weight", {256, 64});
  add("model.norm.weight", {64});
  const std::string l = "model.layers.0.";
  add(l + "input_layernorm.weight", {64});
  add(l + "self_attn.q_proj.weight", {64, 64});
  add(l + "self_attn.k_proj.weight", {32, 64});
  add(l + "self_attn.v_proj.weight", {32, 64});
  add(l + "self_attn.o_proj.weight", {64, 64});
  add(l + "post_attention_layernorm.weight", {64});
  add(l + "mlp.gate_proj.weight", {128, 64});
  add(l + "mlp.up_proj.weight", {128, 64});
  add(l + "mlp.down_proj.weight", {64, 128});
  testing::WriteBinaryFile(dir / "model.safetensors", testing::SafetensorsBytes(tensors));
  return dir;
}

TEST(KilnCompile, HuggingFaceFolderImportsToTheSameFamily) {
  SKIP_WITHOUT_COMPILER();
  const std::filesystem::path model = WriteHfModel("compile_hf", "LlamaForCausalLM");
  const std::filesystem::path dir = testing::ScratchDir("compile_hf_ir");
  const testing::CommandResult r =
      RunKiln("compile " + Quote(model.string()) + " --dump-ir=after-all --dump-dir " + Quote(dir.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string imported = testing::ReadFileOrDie(dir / "00-import.mlir");
  EXPECT_THAT(imported, HasSubstr("kiln.weight \"model.layers.0.self_attn.k_proj.weight\" : "
                                  "!kiln.weight<[32, 64], #kiln.storage<f32>>"));
  EXPECT_THAT(imported, HasSubstr("style = \"half\""));  // HF q/k are not permuted
  EXPECT_THAT(imported, HasSubstr("!kiln.kv_cache<1 x 2 x 16 x 512, f32>"));
  EXPECT_THAT(imported, HasSubstr("tied_embeddings = true"));
  // The tied head reads the embedding table.
  EXPECT_THAT(imported, ::testing::ContainsRegex("kiln.matmul %[0-9]+, %0 : "));
  EXPECT_THAT(testing::ReadFileOrDie(dir / "05-kiln-emit-plan.mlir"), HasSubstr("kiln.plan @step"));
}

TEST(KilnCompile, HuggingFaceUnsupportedArchitecture) {
  SKIP_WITHOUT_COMPILER();
  const std::filesystem::path model = WriteHfModel("compile_hf_gpt2", "GPT2LMHeadModel");
  const testing::CommandResult r = RunKiln("compile " + Quote(model.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("GPT2LMHeadModel"));
  EXPECT_THAT(r.output, HasSubstr("LlamaForCausalLM"));
}

}  // namespace
}  // namespace kiln

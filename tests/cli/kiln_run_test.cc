// `kiln run` end to end: greedy output against llama.cpp's goldens through
// both model forms (GGUF compiled in memory, .kiln artifact), the JSON
// contract, and the errors for corrupted artifacts and over-long prompts.
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/util/json.h"
#include "tests/cli/json_line.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using testing::JsonLine;
using testing::Quote;
using testing::RunKiln;

std::vector<int64_t> Ints(const JsonValue* a) {
  std::vector<int64_t> out;
  if (a == nullptr || !a->is_array()) return out;
  for (const JsonValue& v : a->array()) out.push_back(v.int_value().value_or(-1));
  return out;
}

JsonValue ReadJsonOrDie(const std::filesystem::path& path) {
  absl::StatusOr<JsonValue> j = ParseJson(testing::ReadFileOrDie(path));
  EXPECT_TRUE(j.ok()) << path << ": " << j.status();
  return j.ok() ? *std::move(j) : JsonValue();
}

// What `kiln run --output-format json` prints, greedy.
JsonValue RunJson(const std::string& model, const std::string& prompt, int n, const std::string& extra = "") {
  const testing::CommandResult r = RunKiln("run " + Quote(model) + " -p " + Quote(prompt) + " -n " +
                                           std::to_string(n) + " --temp 0 --output-format json " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<JsonValue> j = JsonLine(r.output);
  EXPECT_TRUE(j.ok()) << j.status() << "\n" << r.output;
  return j.ok() ? *j : JsonValue();
}

// A golden's prompt and its greedy ids.
std::pair<std::string, std::vector<int64_t>> PromptAndIds(const std::filesystem::path& golden_path) {
  const JsonValue golden = ReadJsonOrDie(golden_path);
  return {golden.Find("prompt")->string_value(), Ints(golden.Find("generated_token_ids"))};
}

TEST(KilnRun, GgufAndArtifactBothGiveTheGoldenIds) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(golden_path, "golden/stories260K/p03_one_day_a_cat.json");
  const JsonValue g = ReadJsonOrDie(golden_path);
  const JsonValue* golden = &g;
  const std::vector<int64_t> want = Ints(golden->Find("generated_token_ids"));
  const std::string prompt = golden->Find("prompt")->string_value();

  const JsonValue direct = RunJson(model.string(), prompt, 64);
  EXPECT_EQ(Ints(direct.Find("prompt_ids")), Ints(golden->Find("prompt_token_ids")));
  EXPECT_EQ(Ints(direct.Find("ids")), want);
  ASSERT_NE(direct.Find("text"), nullptr);
  EXPECT_EQ(direct.Find("text")->string_value(), golden->Find("generated_text")->string_value());
  ASSERT_NE(direct.Find("timings"), nullptr);
  EXPECT_NE(direct.Find("timings")->Find("generate_tokens_per_second"), nullptr);

  const std::filesystem::path dir = testing::ScratchDir("run_artifact");
  const std::string art = (dir / "s.kiln").string();
  const testing::CommandResult c = RunKiln("compile " + Quote(model.string()) + " -o " + Quote(art));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(Ints(RunJson(art, prompt, 64).Find("ids")), want);
}

// KILN_CPU_INT8_KERNEL picks the CPU's integer kernel family (how one
// machine measures the kernels of CPUs without its wider instructions): the
// backend line names the family that ran, each gives the q8_0 goldens, and a
// name the CPU cannot run or does not know is said and the best one runs.
TEST(KilnRun, Int8KernelNamedByTheEnvironment) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K-q8_0-mix.gguf");
  KILN_REQUIRE_TESTDATA(golden_path, "golden/stories260K-q8_0-mix/p01_once_upon_a_time.json");
  const auto [prompt, want] = PromptAndIds(golden_path);
  const JsonValue plain = RunJson(model.string(), prompt, 32);
  const std::string backend = plain.Find("backend")->string_value();
  if (backend.find("int8 activations") == std::string::npos) GTEST_SKIP() << "no integer kernels here: " << backend;
  for (const char* kernel : {"avx2", "avx-vnni", "avx512-vnni"}) {
    SCOPED_TRACE(kernel);
    const testing::ScopedEnv env("KILN_CPU_INT8_KERNEL", kernel);
    const testing::CommandResult r =
        RunKiln("run " + Quote(model.string()) + " -p " + Quote(prompt) + " -n 32 --temp 0 --output-format json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    absl::StatusOr<JsonValue> j = JsonLine(r.output);
    ASSERT_TRUE(j.ok()) << r.output;
    EXPECT_EQ(Ints(j->Find("ids")), std::vector<int64_t>(want.begin(), want.begin() + 32));
    if (r.output.find("lacks its instructions") != std::string::npos) {
      EXPECT_NE(std::string(kernel), "avx2") << "every CPU with integer kernels has AVX2's";
      EXPECT_EQ(j->Find("backend")->string_value(), backend) << "the best kernel instead";
    } else {
      EXPECT_THAT(j->Find("backend")->string_value(), HasSubstr(std::string("int8 activations (") + kernel + ")"));
    }
  }
  const testing::ScopedEnv env("KILN_CPU_INT8_KERNEL", "sse9");
  const testing::CommandResult r = RunKiln("run " + Quote(model.string()) + " -p " + Quote(prompt) + " -n 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("KILN_CPU_INT8_KERNEL=sse9 is none of avx2, avx-vnni, avx512-vnni"));
}

// --kv-type applies when a GGUF is compiled in memory: the f16 cache gives
// stories260K's golden ids too (GoldenCheck.Stories260KF16KvCacheGreedyIds),
// and the JSON says which cache ran. An artifact's plan fixed its cache type.
TEST(KilnRun, KvTypeOfAGgufCompiledInMemory) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(golden_path, "golden/stories260K/p03_one_day_a_cat.json");
  const auto [prompt, want] = PromptAndIds(golden_path);
  const JsonValue f32 = RunJson(model.string(), prompt, 64);
  ASSERT_NE(f32.Find("kv_type"), nullptr);
  EXPECT_EQ(f32.Find("kv_type")->string_value(), "f32");
  const JsonValue f16 = RunJson(model.string(), prompt, 64, "--kv-type f16 --backend cpu");
  ASSERT_NE(f16.Find("kv_type"), nullptr);
  EXPECT_EQ(f16.Find("kv_type")->string_value(), "f16");
  EXPECT_EQ(Ints(f16.Find("ids")), want);

  testing::CommandResult r = RunKiln("run " + Quote(model.string()) + " -p hi --kv-type f8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--kv-type: 'f8' is not f32 or f16"));
  const std::filesystem::path dir = testing::ScratchDir("run_kv_type");
  const std::string art = (dir / "s.kiln").string();
  ASSERT_EQ(RunKiln("compile " + Quote(model.string()) + " -o " + Quote(art)).exit_code, 0);
  r = RunKiln("run " + Quote(art) + " -p hi --kv-type f16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--kv-type applies when compiling a GGUF; this is a compiled artifact"));
  r = RunKiln("run " + Quote(art) + " -p hi --quant q8_0 --kv-type f16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--quant, --kv-type apply when compiling a GGUF"));
}

// A GGUF's kernels are compiled in memory for the device the backend
// choice looks at (its properties, without opening it): a device that is not
// there is a clean refusal naming it, and on a CPU implementation of Vulkan
// (lavapipe) auto passes Vulkan over saying why.
TEST(KilnRun, InMemoryCompileLooksAtTheVulkanDeviceItWillRunOn) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const testing::CommandResult missing =
      RunKiln("run " + Quote(model.string()) + " -p hi -n 4 --backend vulkan --device 99");
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  const auto has = [&](const char* what) { return missing.output.find(what) != std::string::npos; };
  if (has("no Vulkan loader") || has("no Vulkan driver") || has("unbuilt backend") ||
      (has("no Vulkan device") && !has("no Vulkan device 99"))) {
    GTEST_SKIP() << "no Vulkan here: " << missing.output;
  }
  EXPECT_THAT(missing.output, HasSubstr("no Vulkan device 99 (the loader lists "));

  const testing::CommandResult autorun =
      RunKiln("run " + Quote(model.string()) + " -p hi -n 4 --temp 0 --output-format json");
  ASSERT_EQ(autorun.exit_code, 0) << autorun.output;
  absl::StatusOr<JsonValue> j = JsonLine(autorun.output);
  ASSERT_TRUE(j.ok()) << autorun.output;
  if (j->Find("backend")->string_value().rfind("cpu", 0) == 0) {
    EXPECT_THAT(autorun.output, HasSubstr("vulkan: device 0 ("));
  }
}

// --backend auto takes the fastest backend present and says why it passed the
// others over: with kernels for Vulkan only and no GPU (CI: lavapipe, a CPU
// implementation), that is the CPU; --backend vulkan still runs Vulkan where a
// device exists. Both give the goldens.
TEST(KilnRun, AutoBackendSaysWhatItPickedAndWhy) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(golden_path, "golden/stories260K/p03_one_day_a_cat.json");
  const auto [prompt, want] = PromptAndIds(golden_path);
  const std::string art = (testing::ScratchDir("run_backend") / "s.kiln").string();
  const testing::CommandResult c = RunKiln("compile " + Quote(model.string()) + " --target vulkan -o " + Quote(art));
  ASSERT_EQ(c.exit_code, 0) << c.output;

  const testing::CommandResult autorun =
      RunKiln("run " + Quote(art) + " -p " + Quote(prompt) + " -n 64 --temp 0 --output-format json");
  ASSERT_EQ(autorun.exit_code, 0) << autorun.output;
  EXPECT_THAT(autorun.output, HasSubstr("kiln: backend "));
  absl::StatusOr<JsonValue> j = JsonLine(autorun.output);
  ASSERT_TRUE(j.ok()) << autorun.output;
  EXPECT_EQ(Ints(j->Find("ids")), want);
  const std::string picked = j->Find("backend")->string_value();
  if (picked.rfind("cpu", 0) == 0) EXPECT_THAT(autorun.output, HasSubstr("vulkan: ")) << "no reason given";

  const testing::CommandResult vk =
      RunKiln("run " + Quote(art) + " -p " + Quote(prompt) + " -n 64 --temp 0 --output-format json --backend vulkan");
  if (vk.exit_code != 0 && picked.rfind("cpu", 0) == 0 && vk.output.find("no Vulkan") != std::string::npos) {
    GTEST_SKIP() << "no Vulkan device: " << vk.output;
  }
  ASSERT_EQ(vk.exit_code, 0) << vk.output;
  absl::StatusOr<JsonValue> v = JsonLine(vk.output);
  ASSERT_TRUE(v.ok()) << vk.output;
  EXPECT_EQ(Ints(v->Find("ids")), want);
  EXPECT_EQ(v->Find("backend")->string_value().rfind("vulkan", 0), 0u) << v->Find("backend")->string_value();

  // kiln bench --profile times one more decode step after the timed ones; the
  // timed steps may fill the sequences' pages to the last position.
  const testing::CommandResult prof =
      RunKiln("bench " + Quote(art) + " --backend vulkan --prompt 8 --gen 8 --repeats 1 --profile");
  ASSERT_EQ(prof.exit_code, 0) << prof.output;
  EXPECT_THAT(prof.output, HasSubstr("profile of one decode step x 1"));
  EXPECT_THAT(prof.output, HasSubstr("paged_attention"));
}

// A GGUF run directly is compiled in memory; so are the kernels of the GPU
// backend that starts, and only of that one: --backend vulkan compiles
// SPIR-V and runs it (CI: on lavapipe), "auto" compiles nothing for a GPU
// it passes over (lavapipe, no CUDA driver) and says why in the device's
// words, and --backend cuda without a GPU names what is missing.
TEST(KilnRun, GgufCompilesKernelsForTheGpuThatRuns) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(golden_path, "golden/stories260K/p03_one_day_a_cat.json");
  const auto [prompt, want] = PromptAndIds(golden_path);
  const std::string run = "run " + Quote(model.string()) + " -p " + Quote(prompt) + " -n 64 --temp 0 --output-format json";
  const std::filesystem::path cache = testing::ScratchDir("run_kernel_cache");
  const testing::ScopedEnv cache_home("XDG_CACHE_HOME", cache.c_str());

  const testing::CommandResult autorun = RunKiln(run);
  ASSERT_EQ(autorun.exit_code, 0) << autorun.output;
  absl::StatusOr<JsonValue> a = JsonLine(autorun.output);
  ASSERT_TRUE(a.ok()) << autorun.output;
  EXPECT_EQ(Ints(a->Find("ids")), want);
  if (a->Find("backend")->string_value().rfind("cpu", 0) == 0) {
    EXPECT_THAT(autorun.output, ::testing::Not(HasSubstr("kernels in memory"))) << "compiled for a GPU it did not use";
    EXPECT_THAT(autorun.output, ::testing::Not(HasSubstr("has no vulkan kernels"))) << "the reason is not the device's";
  } else {
    EXPECT_THAT(autorun.output, HasSubstr("kernels in memory"));
  }

  const testing::CommandResult vk = RunKiln(run + " --backend vulkan");
  if (vk.exit_code != 0 && vk.output.find("no Vulkan") != std::string::npos) {
    GTEST_SKIP() << "no Vulkan device: " << vk.output;
  }
  ASSERT_EQ(vk.exit_code, 0) << vk.output;
  EXPECT_THAT(vk.output, HasSubstr("kiln: compiling vulkan kernels in memory"));
  absl::StatusOr<JsonValue> v = JsonLine(vk.output);
  ASSERT_TRUE(v.ok()) << vk.output;
  EXPECT_EQ(Ints(v->Find("ids")), want);
  EXPECT_EQ(v->Find("backend")->string_value().rfind("vulkan", 0), 0u) << v->Find("backend")->string_value();

  // Run again: the kernels come from the cache; damaged, they are compiled again.
  const testing::CommandResult again = RunKiln(run + " --backend vulkan");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("kiln: vulkan kernels from the cache"));
  EXPECT_THAT(again.output, ::testing::Not(HasSubstr("compiling vulkan kernels")));
  EXPECT_EQ(Ints(JsonLine(again.output)->Find("ids")), want);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(cache / "kiln" / "kernels")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  const testing::CommandResult damaged = RunKiln(run + " --backend vulkan");
  ASSERT_EQ(damaged.exit_code, 0) << damaged.output;
  EXPECT_THAT(damaged.output, HasSubstr("kiln: compiling vulkan kernels in memory"));
  EXPECT_EQ(Ints(JsonLine(damaged.output)->Find("ids")), want);

  const testing::CommandResult cu = RunKiln(run + " --backend cuda");
  if (cu.exit_code != 0) {
    EXPECT_THAT(cu.output, ::testing::Not(HasSubstr("compile it with --target"))) << cu.output;
    EXPECT_THAT(cu.output, ::testing::AnyOf(HasSubstr("CUDA driver"), HasSubstr("CUDA device"), HasSubstr("unbuilt")))
        << cu.output;
  } else {
    EXPECT_THAT(cu.output, HasSubstr("kiln: compiling cuda:sm_"));
  }
}

TEST(KilnRun, StreamsTextAndReportsSpeed) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const testing::CommandResult r = RunKiln("run " + Quote(model.string()) + " -p 'Once upon a time' -n 16 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Once upon a time, there was a little girl named Lily."));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("prompt: 5 tokens, [0-9.]+ tok/s \\| generation: 16 tokens"));
  EXPECT_THAT(r.output, HasSubstr("backend: cpu"));
}

// -f FILE reads the prompt's bytes from a file (-: standard input), as
// llama.cpp's -f does; -p and -f together, or neither, are refused.
TEST(KilnRun, PromptFromAFileOrStandardInput) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("run_prompt_file");
  const std::string file = (dir / "prompt.txt").string();
  testing::WriteBinaryFile(file, "Once upon a time");
  const std::vector<int64_t> want = Ints(RunJson(model.string(), "Once upon a time", 12).Find("ids"));
  ASSERT_EQ(want.size(), 12u);
  auto ids = [&](const std::string& source) {
    const testing::CommandResult r =
        RunKiln("run " + Quote(model.string()) + " " + source + " -n 12 --temp 0 --output-format json");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    absl::StatusOr<JsonValue> j = JsonLine(r.output);
    return j.ok() ? Ints(j->Find("ids")) : std::vector<int64_t>();
  };
  EXPECT_EQ(ids("-f " + Quote(file)), want);
  EXPECT_EQ(ids("--file=" + Quote(file)), want);
  EXPECT_EQ(ids("-f - < " + Quote(file)), want);

  testing::CommandResult r = RunKiln("run " + Quote(model.string()) + " -f " + Quote(file) + " -p Once -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("give -p TEXT or -f FILE, not both"));
  r = RunKiln("run " + Quote(model.string()) + " -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("missing -p TEXT (or -f FILE)"));
  const std::string missing = (dir / "absent.txt").string();
  r = RunKiln("run " + Quote(model.string()) + " -f " + Quote(missing) + " -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(missing + ": cannot read the prompt file"));
}

// --interactive: each line of standard input is a user message, answered
// with the whole conversation so far (stories260K under the ChatML template,
// greedy). The first reply is what --chat gives for that message alone; the
// second prompt holds the first exchange, whose positions stay cached (the
// replies are the goldens' ids either way: GoldenCheck's
// CachedPrefixContinuesAsLlamaCpp); /exit ends the session (the line
// after it is not answered). Where the conversation and a whole reply outgrow
// the context, the oldest exchange is dropped; a message too long alone is
// refused and the session goes on (exit 1 at its end). Wrong uses are refused.
TEST(KilnRun, InteractiveChatKeepsTheConversation) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("run_interactive");
  const std::string run = "run " + Quote(model.string()) + " --chat-template chatml --temp 0 ";
  // The N of each speed line's "prompt: N tokens (C cached)", or its C.
  auto prompt_tokens = [](const std::string& output, bool cached = false) {
    std::vector<int> tokens;
    for (size_t at = output.find("prompt: "); at != std::string::npos; at = output.find("prompt: ", at + 1)) {
      const size_t number = cached ? output.find("tokens (", at) + 8 : at + 8;
      tokens.push_back(std::atoi(output.c_str() + number));
    }
    return tokens;
  };
  const std::string input = (dir / "two.txt").string();
  testing::WriteBinaryFile(input, "Once upon a time\n\nThe little cat\n/exit\nnot answered\n");
  testing::CommandResult r = RunKiln(run + "--interactive -n 16 < " + Quote(input));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<int> two = prompt_tokens(r.output);
  ASSERT_EQ(two.size(), 2u) << r.output;
  // The second prompt holds the first one's messages, the 16-token reply in
  // its own turn, and the second message's turn: more than the first prompt
  // and a session's prompt of the second message alone.
  testing::WriteBinaryFile(input, "The little cat\n");
  const std::vector<int> second_alone = prompt_tokens(RunKiln(run + "--interactive -n 16 < " + Quote(input)).output);
  ASSERT_EQ(second_alone.size(), 1u);
  EXPECT_GT(two[1], two[0] + second_alone[0]) << r.output;
  // The first prompt's positions (and the reply's) stay in the cache: the
  // second turn runs only what follows them.
  const std::vector<int> cached = prompt_tokens(r.output, true);
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[0], 0);
  EXPECT_GE(cached[1], two[0]) << r.output;
  const testing::CommandResult alone = RunKiln(run + "--chat -p 'Once upon a time' -n 16 --output-format json");
  absl::StatusOr<JsonValue> j = JsonLine(alone.output);
  ASSERT_TRUE(j.ok()) << alone.output;
  EXPECT_THAT(r.output, HasSubstr(j->Find("text")->string_value()));

  // Messages of ~500 tokens with replies of up to 1000 in a context of 2048:
  // the second drops the first exchange (the same prompt again), the third
  // (~3700 tokens) cannot fit, the fourth is answered.
  std::string long_message, too_long;
  for (int k = 0; k < 160; ++k) long_message += "the cat ";
  for (int k = 0; k < 1200; ++k) too_long += "the cat ";
  testing::WriteBinaryFile(input, long_message + "\n" + long_message + "\n" + too_long + "\nOnce upon a time\n");
  r = RunKiln(run + "--interactive -n 1000 < " + Quote(input));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::vector<int> four = prompt_tokens(r.output);
  ASSERT_EQ(four.size(), 3u) << r.output;
  EXPECT_GT(four[0], 400);
  EXPECT_EQ(four[1], four[0]);
  EXPECT_THAT(r.output, ::testing::ContainsRegex("this message makes a prompt of [0-9]+ tokens, which with a reply "
                                                 "of up to 1000 \\(-n\\) exceeds the model's context of 2048"));

  r = RunKiln(run + "--interactive -p Once < " + Quote(input));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--interactive reads the messages from standard input: drop -p and -f"));
  r = RunKiln(run + "--interactive --output-format json < " + Quote(input));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--interactive streams text"));
  r = RunKiln("run " + Quote(model.string()) + " --interactive < " + Quote(input));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("the model has no tokenizer.chat_template"));
  r = RunKiln(run + "--interactive -n 2048 < " + Quote(input));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("-n 2048 leaves no room for a message in the model's context of 2048 tokens"));
}

TEST(KilnRun, SeededSamplingIsReproducible) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  auto sample = [&](const std::string& seed) {
    const testing::CommandResult r = RunKiln("run " + Quote(model.string()) +
                                             " -p 'The little girl' -n 32 --temp 1 --output-format json --seed " +
                                             seed);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    absl::StatusOr<JsonValue> j = JsonLine(r.output);
    return j.ok() ? Ints(j->Find("ids")) : std::vector<int64_t>();
  };
  EXPECT_EQ(sample("7"), sample("7"));
  EXPECT_NE(sample("7"), sample("8"));
}

TEST(KilnRun, CorruptedArtifactsAreRejectedByName) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("run_corrupt");
  const std::string art = (dir / "s.kiln").string();
  ASSERT_EQ(RunKiln("compile " + Quote(model.string()) + " -o " + Quote(art)).exit_code, 0);
  const std::string bytes = testing::ReadFileOrDie(art);

  std::string flipped = bytes;
  flipped[flipped.size() - 1000] ^= 0x01;  // inside the weights, the last section
  const std::string bad = (dir / "flipped.kiln").string();
  testing::WriteBinaryFile(bad, flipped);
  testing::CommandResult r = RunKiln("run " + Quote(bad) + " -p 'Once' -n 4 --temp 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("weights"));
  EXPECT_THAT(r.output, HasSubstr("checksum"));

  const std::string cut = (dir / "cut.kiln").string();
  testing::WriteBinaryFile(cut, bytes.substr(0, bytes.size() / 2));
  r = RunKiln("run " + Quote(cut) + " -p 'Once' -n 4 --temp 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, ::testing::ContainsRegex("truncat|past the end|out of bounds"));
  r = RunKiln("inspect " + Quote(cut));
  EXPECT_EQ(r.exit_code, 1);
}

TEST(KilnRun, PromptLongerThanTheContextIsAnError) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  testing::CommandResult r = RunKiln("run " + Quote(model.string()) + " -p 'Once upon a time' -n 2048 --temp 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("the prompt (5 tokens) plus -n 2048 exceeds the model's context of 2048 tokens"));
  std::string long_prompt;
  for (int k = 0; k < 1200; ++k) long_prompt += "the cat ";
  r = RunKiln("run " + Quote(model.string()) + " -p " + Quote(long_prompt) + " -n 1 --temp 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, ::testing::ContainsRegex("the prompt \\([0-9]+ tokens\\) plus -n 1 exceeds the model's "
                                                 "context of 2048 tokens"));
}

TEST(KilnRun, QuantizedArtifactSaysWhatFellBack) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("run_quant");
  const std::string art = (dir / "q.kiln").string();
  ASSERT_EQ(RunKiln("compile " + Quote(model.string()) + " --quant q4_k -o " + Quote(art)).exit_code, 0);
  const testing::CommandResult r = RunKiln("inspect " + Quote(art));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rows of 64 and 172 are not whole q4_K blocks of 256: q8_0 and f16 instead.
  EXPECT_THAT(r.output, HasSubstr("repacked: blk.0.attn_q.weight f32 -> q8_0"));
  EXPECT_THAT(r.output, HasSubstr("repacked: blk.0.ffn_down.weight f32 -> f16"));
  const JsonValue out = RunJson(art, "Once upon a time", 8);
  EXPECT_EQ(Ints(out.Find("ids")).size(), 8u);
}

TEST(KilnRun, SmolLM2AnswersAndQ4_1MatchesF32ForSixteenTokens) {
  SKIP_WITHOUT_COMPILER();
  const std::filesystem::path model = testing::ModelCacheDir() / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " not fetched";
  const JsonValue native = RunJson(model.string(), "What is the capital of France?", 16, "--chat");
  ASSERT_NE(native.Find("text"), nullptr);
  EXPECT_THAT(native.Find("text")->string_value(), HasSubstr("Paris"));
  // Every tensor dequantised to f32 at load ('.' is in every tensor name).
  const JsonValue f32 = RunJson(model.string(), "What is the capital of France?", 16, "--chat --override .=f32");
  EXPECT_EQ(Ints(native.Find("ids")), Ints(f32.Find("ids")));
}

}  // namespace
}  // namespace kiln

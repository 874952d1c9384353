// `kiln bench` end to end on the CPU: its model accounting against the GGUF
// file's own tensor sizes, the figures it reports, and its argument errors.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/formats/gguf.h"
#include "runtime/util/json.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using testing::Quote;
using testing::RunKiln;

absl::StatusOr<JsonValue> LastJsonLine(const std::string& output) {
  const size_t start = output.rfind("\n{");
  return ParseJson(output.substr(start == std::string::npos ? 0 : start + 1));
}

std::string CompileStories(const std::string& extra) {
  const std::filesystem::path model = testing::TestDataFile("models/stories260K.gguf");
  const std::string out = (testing::ScratchDir("bench") / "stories.kiln").string();
  const testing::CommandResult r = RunKiln("compile " + Quote(model.string()) + " -o " + Quote(out) + " " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

TEST(KilnBench, ReportsTheModelAndEverySizeWithItsLimit) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::string artifact = CompileStories("");
  const testing::CommandResult r =
      RunKiln("bench " + Quote(artifact) + " --backend cpu --prompt 16,40 --gen 8 --repeats 1 --probe --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<JsonValue> j = LastJsonLine(r.output);
  ASSERT_TRUE(j.ok()) << j.status() << r.output;

  // Parameters: every tensor of the file (stories260K's plan uses them all).
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(model.string());
  ASSERT_TRUE(gguf.ok());
  int64_t params = 0;
  for (const GgufTensor& t : (*gguf)->tensors()) params += t.nelements;
  EXPECT_EQ(j->Find("params")->int_value(), params);
  EXPECT_EQ(j->Find("weight_bytes")->int_value(), params * 4);  // all f32
  EXPECT_EQ(j->Find("storage")->string_value(), "f32");
  EXPECT_GT(j->Find("ceiling_bytes_per_second")->number(), 1e8);
  EXPECT_GT(j->Find("ceiling_flops_per_second")->number(), 1e8);
  // stories260K is f32: its prefill's ceiling is the FMAs' peak, not the integer kernels'.
  if (absl::StrContains(j->Find("backend")->string_value(), "avx2")) {
    EXPECT_THAT(j->Find("ceilings_from")->string_value(), HasSubstr("peak of f32 FMAs"));
  }

  const JsonValue* results = j->Find("results");
  ASSERT_NE(results, nullptr);
  ASSERT_EQ(results->array().size(), 3u);
  const std::vector<std::pair<std::string, int64_t>> want = {{"prefill", 16}, {"prefill", 40}, {"decode", 8}};
  for (size_t i = 0; i < want.size(); ++i) {
    const JsonValue& e = results->array()[i];
    EXPECT_EQ(e.Find("phase")->string_value(), want[i].first);
    EXPECT_EQ(e.Find("tokens")->int_value(), want[i].second);
    EXPECT_GT(e.Find("tokens_per_second")->number(), 0);
    EXPECT_GT(e.Find("limit_tokens_per_second")->number(), 0) << "with --probe every figure has a limit";
  }
  EXPECT_EQ(results->array()[2].Find("context")->int_value(), 16);
  EXPECT_EQ(results->array()[2].Find("host_cpu_seconds_per_step"), nullptr) << "the CPU backend waits on no device";
}

// --profile on the CPU: one decode step with every launch of the plan timed
// by the wall clock, summed per kernel; the text says what kind of time.
TEST(KilnBench, CpuProfileTimesEveryLaunchOfTheStep) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::string artifact = CompileStories("");
  const testing::CommandResult inspect = RunKiln("inspect " + Quote(artifact));
  const std::string key = "step function @step, ";
  const size_t at = inspect.output.find(key);
  ASSERT_NE(at, std::string::npos) << inspect.output;
  const int launches = std::atoi(inspect.output.c_str() + at + key.size());
  ASSERT_GT(launches, 0) << inspect.output;
  const std::string bench = "bench " + Quote(artifact) + " --backend cpu --prompt 8 --gen 8 --repeats 1 --profile";
  const testing::CommandResult r = RunKiln(bench + " --output-format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<JsonValue> j = LastJsonLine(r.output);
  ASSERT_TRUE(j.ok()) << j.status() << r.output;
  const JsonValue* profile = j->Find("profile");
  ASSERT_NE(profile, nullptr) << r.output;
  int64_t dispatches = 0;
  double seconds = 0;
  bool attention = false;
  for (const JsonValue& k : profile->array()) {
    dispatches += *k.Find("dispatches")->int_value();
    seconds += k.Find("seconds")->number();
    attention |= absl::StrContains(k.Find("kernel")->string_value(), "paged_attention");
  }
  EXPECT_EQ(dispatches, launches);
  EXPECT_TRUE(attention) << r.output;
  EXPECT_GT(seconds, 0);
  const testing::CommandResult text = RunKiln(bench);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("profile of one decode step x 1 (wall time per kernel, " +
                                     std::to_string(launches) + " dispatches"));
}

TEST(KilnBench, GpuBackendsReportTheHostCpuPerDecodeStep) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::string artifact = CompileStories("--target vulkan");
  const testing::CommandResult r =
      RunKiln("bench " + Quote(artifact) + " --backend vulkan --prompt 8 --gen 6 --repeats 1 --output-format json");
  if (r.exit_code != 0 && absl::StrContains(r.output, "no Vulkan")) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<JsonValue> j = LastJsonLine(r.output);
  ASSERT_TRUE(j.ok()) << j.status() << r.output;
  const JsonValue& decode = j->Find("results")->array().back();
  ASSERT_EQ(decode.Find("phase")->string_value(), "decode");
  const JsonValue* host = decode.Find("host_cpu_seconds_per_step");
  ASSERT_NE(host, nullptr) << r.output;
  // Some CPU work each step (inputs, submit, the ids), and less than the
  // whole step: on lavapipe the step's wall time is the kernels' CPU time on
  // the driver's threads, which this thread only waits for.
  EXPECT_GT(host->number(), 0);
  EXPECT_LT(host->number(), decode.Find("seconds_per_step")->number());
}

// The Vulkan probe times a dispatch boundary on any device, and a device-wide
// barrier inside a dispatch only where every workgroup is resident (a GPU);
// on lavapipe it says why not.
TEST(KilnBench, VulkanProbeTimesADispatchBoundary) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::string artifact = CompileStories("--target vulkan");
  const testing::CommandResult r = RunKiln(
      "bench " + Quote(artifact) + " --backend vulkan --prompt 8 --gen 4 --repeats 1 --probe --output-format json");
  if (r.exit_code != 0 && absl::StrContains(r.output, "no Vulkan")) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  absl::StatusOr<JsonValue> j = LastJsonLine(r.output);
  ASSERT_TRUE(j.ok()) << j.status() << r.output;
  const std::string what = j->Find("ceilings_from")->string_value();
  constexpr std::string_view kBoundary = "dispatch boundary ";
  const size_t at = what.find(kBoundary);
  ASSERT_NE(at, std::string::npos) << what;
  EXPECT_GT(std::stod(what.substr(at + kBoundary.size())), 0) << what;
  if (absl::StrContains(what, "(llvmpipe")) {
    EXPECT_THAT(what, HasSubstr("no device-wide barrier probe (a CPU implementation"));
  } else {
    // Two figures (1 and 4 workgroups a unit), each timed and checked.
    EXPECT_THAT(what, HasSubstr("device-wide barrier in a dispatch "));
    EXPECT_THAT(what, ::testing::Not(HasSubstr("wrong (")));
    EXPECT_THAT(what, ::testing::Not(HasSubstr("did not complete")));
  }
}

TEST(KilnBench, RefusesBadArgumentsWithTheirReason) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::string artifact = CompileStories("");
  struct Case {
    std::string args, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--prompt 0", "is not a length"},
           {"--prompt 8 --gen -1", "--gen must be an integer >= 0"},
           {"--prompt 100000", "exceed the model's context"},
           {"--batch 0", "--batch must be an integer >= 1"},
           {"--backend tpu", "unknown or unbuilt backend 'tpu'"},
           {"--output-format xml", "--output-format takes text or json"},
       }) {
    const testing::CommandResult r = RunKiln("bench " + Quote(artifact) + " " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_THAT(r.output, HasSubstr(c.message)) << c.args;
  }
}

// Peer figures stand beside a run only where they were measured: the
// shared notes are the H200's with Llama-3-8B, so a CPU run of another model
// shows none; notes named with --peers are taken as they are.
TEST(KilnBench, PeerFiguresOnlyWhereTheyWereMeasured) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::string artifact = CompileStories("");
  const std::filesystem::path notes = std::filesystem::path(artifact).parent_path() / "peers.md";
  {
    std::ofstream f(notes);
    f << "| format | pp8 | tg4 |\n|---|---|---|\n| F32 | 1,234 | 567 / 890 |\n";
  }
  const std::string run = "bench " + Quote(artifact) + " --backend cpu --prompt 8 --gen 4 --repeats 1";
  const testing::CommandResult plain = RunKiln(run);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(plain.output, Not(HasSubstr("tok/s (F32"))) << "no peer measured this CPU";
  const testing::CommandResult named = RunKiln(run + " --peers " + Quote(notes.string()));
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_THAT(named.output, HasSubstr("peer 1234 tok/s (F32 pp8)"));
  EXPECT_THAT(named.output, HasSubstr("peer 890 tok/s (F32 tg4)"));
}

TEST(KilnBench, ProgramOnlyArtifactsBindTheirWeightsFromTheModelFile) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::string program = CompileStories("--program-only");
  const testing::CommandResult without = RunKiln("bench " + Quote(program) + " --prompt 8 --gen 2 --repeats 1");
  EXPECT_NE(without.exit_code, 0);
  EXPECT_THAT(without.output, HasSubstr("program-only artifact (no weights)"));
  const testing::CommandResult with = RunKiln("bench " + Quote(program) + " --weights " + Quote(model.string()) +
                                              " --prompt 8 --gen 2 --repeats 1");
  EXPECT_EQ(with.exit_code, 0) << with.output;
  EXPECT_THAT(with.output, HasSubstr("decode      2 tokens x 1"));
  // Without --probe (or an H200's card notes) there is no ceiling to compare with: said, not "0.0 tok/s".
  EXPECT_THAT(with.output, HasSubstr("ceilings: none (use --probe"));
  EXPECT_THAT(with.output, HasSubstr("limit         - (no ceilings)"));
  EXPECT_THAT(with.output, Not(HasSubstr("limit       0.0")));
}

// A program-only artifact (kernels recompiled, say) binds to the weights of
// another artifact as well as to the GGUF; so does a program-only draft.
TEST(KilnRun, ProgramOnlyArtifactsBindTheWeightsOfAFullArtifact) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("weights-from-artifact");
  const std::string full = (dir / "full.kiln").string(), program = (dir / "program.kiln").string();
  ASSERT_EQ(RunKiln("compile " + Quote(model.string()) + " -o " + Quote(full)).exit_code, 0);
  ASSERT_EQ(RunKiln("compile " + Quote(model.string()) + " --program-only -o " + Quote(program)).exit_code, 0);
  const std::string gen = " -p 'Once upon a time' -n 24 --temp 0 --backend cpu --output-format json";
  auto ids = [](const testing::CommandResult& r) -> std::string {
    absl::StatusOr<JsonValue> j = ParseJson(r.output.substr(r.output.find('{')));
    return j.ok() && j->Find("ids") != nullptr ? ToJson(*j->Find("ids")) : "unparsed: " + r.output;
  };
  const testing::CommandResult alone = RunKiln("run " + Quote(full) + gen);
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  const testing::CommandResult bound = RunKiln("run " + Quote(program) + " --weights " + Quote(full) + gen);
  ASSERT_EQ(bound.exit_code, 0) << bound.output;
  EXPECT_EQ(ids(bound), ids(alone));
  EXPECT_NE(ids(alone).find(','), std::string::npos) << ids(alone);
  const testing::CommandResult drafted =
      RunKiln("run " + Quote(full) + " --draft " + Quote(program) + " --draft-weights " + Quote(full) + gen);
  ASSERT_EQ(drafted.exit_code, 0) << drafted.output;
  EXPECT_EQ(ids(drafted), ids(alone));
  const testing::CommandResult hollow = RunKiln("run " + Quote(program) + " --weights " + Quote(program) + gen);
  EXPECT_NE(hollow.exit_code, 0);
  EXPECT_THAT(hollow.output, HasSubstr("is program-only too: it holds no weights"));
}

}  // namespace
}  // namespace kiln

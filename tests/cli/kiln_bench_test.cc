// `kiln bench` end to end on the CPU: its model accounting against the GGUF
// file's own tensor sizes, the figures it reports, and its argument errors.
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
}

}  // namespace
}  // namespace kiln

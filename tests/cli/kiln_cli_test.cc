// End-to-end tests of the kiln binary: exit codes, messages and the output
// contracts that later checks rely on.
#include <algorithm>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using testing::Quote;
using testing::RunKiln;

TEST(KilnCli, NoArgumentsPrintsUsageAndFails) {
  const testing::CommandResult r = RunKiln("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("usage: kiln COMMAND"));
  EXPECT_THAT(r.output, HasSubstr("tokenize"));
}

TEST(KilnCli, UnknownCommand) {
  const testing::CommandResult r = RunKiln("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown command 'frobnicate'"));
}

TEST(KilnCli, EveryBuiltCommandHasHelp) {
  for (const char* cmd : {"inspect", "tokenize", "synth", "compile", "run", "serve", "bench", "perplexity"}) {
    const testing::CommandResult r = RunKiln(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_THAT(r.output, HasSubstr(std::string("usage: kiln ") + cmd)) << cmd;
  }
}

TEST(KilnCli, UnknownOptionIsNamed) {
  const testing::CommandResult r = RunKiln("inspect x.gguf --frob");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("unknown option --frob (known: --metadata, --tensors)"));
}

TEST(KilnCli, InspectStories260K) {
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const testing::CommandResult r = RunKiln("inspect " + Quote(model.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("GGUF v3, alignment 32"));
  EXPECT_THAT(r.output, HasSubstr("architecture: llama"));
  EXPECT_THAT(r.output, HasSubstr("vocab 512, embedding 64, layers 5, heads 8 (kv heads 4, group 2), head dim 8, "
                                  "ffn 172, context 2048"));
  EXPECT_THAT(r.output, HasSubstr("rope: dims 8, theta 10000, scaling none; rms norm eps 1e-05"));
  EXPECT_THAT(r.output, HasSubstr("tokenizer: llama (SentencePiece)"));
  EXPECT_THAT(r.output, HasSubstr("512 tokens"));
  EXPECT_THAT(r.output, HasSubstr("bos 1 '<s>', eos 2 '</s>'"));
  EXPECT_THAT(r.output, HasSubstr("tensors: 48, 292800 parameters"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("f32 +48 +292800 +1171200"));
}

TEST(KilnCli, InspectMixedQuantGroupsByType) {
  KILN_REQUIRE_TESTDATA(model, "models/stories260K-q4_0-mix.gguf");
  const testing::CommandResult r = RunKiln("inspect " + Quote(model.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 5 layers x 6 Q4_0 matrices; token_embd Q5_0; output Q8_0; 5 ffn_down F16; 11 norms F32.
  EXPECT_THAT(r.output, ::testing::ContainsRegex("q4_0 +30 "));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("q5_0 +1 +32768 +22528"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("q8_0 +1 +32768 +34816"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("f16 +5 +55040 +110080"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("f32 +11 +704 +2816"));
}

TEST(KilnCli, InspectMissingAndCorruptFiles) {
  testing::CommandResult r = RunKiln("inspect /nonexistent/m.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/m.gguf: cannot open: No such file or directory"));

  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("cli_corrupt");
  const std::string bytes = testing::ReadFileOrDie(model);
  const std::string cut = (dir / "cut.gguf").string();
  std::ofstream(cut, std::ios::binary).write(bytes.data(), 600000);
  r = RunKiln("inspect " + Quote(cut));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("extends past the end of the tensor data section"));
  const std::string text = (dir / "text.gguf").string();
  std::ofstream(text) << "hello, I am not a model";
  r = RunKiln("inspect " + Quote(text));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("bad magic \"hell\": not a GGUF file"));
}

TEST(KilnCli, SynthTinyThenInspect) {
  const std::filesystem::path dir = testing::ScratchDir("cli_synth_tiny");
  const std::string out = (dir / "tiny.gguf").string();
  testing::CommandResult r = RunKiln("synth --preset tiny --type q4_k --seed 7 -o " + Quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("21 tensors"));
  EXPECT_THAT(r.output, HasSubstr("(random weights)"));
  // Not a terminal: progress a line per tenth of the tensors, no carriage returns.
  EXPECT_THAT(r.output, HasSubstr("synth: tensor 21/21\n"));
  EXPECT_EQ(r.output.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 11) << r.output;
  r = RunKiln("inspect " + Quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("vocab 512, embedding 256, layers 2, heads 4 (kv heads 2, group 2), head dim 64, "
                                  "ffn 512"));
  EXPECT_THAT(r.output, HasSubstr("random weights"));
  // token_embd, output and 2 x 7 matrices in q4_K; 5 norms in f32.
  EXPECT_THAT(r.output, ::testing::ContainsRegex("q4_K +16 "));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("f32 +5 +1280 +5120"));
}

TEST(KilnCli, SynthIsDeterministicPerSeed) {
  const std::filesystem::path dir = testing::ScratchDir("cli_synth_seed");
  for (const char* name : {"a", "b", "c"}) {
    const std::string seed = std::string(name) == "c" ? "2" : "1";
    ASSERT_EQ(RunKiln("synth --type q8_0 --seed " + seed + " -o " + Quote((dir / name).string())).exit_code, 0);
  }
  EXPECT_EQ(testing::ReadFileOrDie(dir / "a"), testing::ReadFileOrDie(dir / "b"));
  EXPECT_NE(testing::ReadFileOrDie(dir / "a"), testing::ReadFileOrDie(dir / "c"));
}

TEST(KilnCli, SynthRejectsBadArguments) {
  testing::CommandResult r = RunKiln("synth --preset gpt5 -o /tmp/x.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("unknown preset 'gpt5' (presets: tiny, llama3-8b, qwen2.5-1.5b, qwen2.5-0.5b)"));
  r = RunKiln("synth --type q9_9 -o /tmp/x.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("unknown --type 'q9_9'"));
  r = RunKiln("synth --preset tiny");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("missing -o FILE"));
  r = RunKiln("synth -o /nonexistent-dir/x.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent-dir/x.gguf: cannot create"));
}

// kiln tokenize reads its text from -p, --text-file FILE or --text-file -
// (standard input) alike: the same ids from the same bytes; a missing file
// is named.
TEST(KilnCli, TokenizeTextFromArgumentFileOrStandardInput) {
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  const std::filesystem::path dir = testing::ScratchDir("cli_tokenize_file");
  const std::string file = (dir / "text.txt").string();
  testing::WriteBinaryFile(file, "Once upon a time");
  const testing::CommandResult from_p = RunKiln("tokenize " + Quote(model.string()) + " -p 'Once upon a time'");
  ASSERT_EQ(from_p.exit_code, 0) << from_p.output;
  ASSERT_THAT(from_p.output, ::testing::MatchesRegex("[0-9]+( [0-9]+)+\n"));
  const testing::CommandResult from_file = RunKiln("tokenize " + Quote(model.string()) + " --text-file " + Quote(file));
  EXPECT_EQ(from_file.output, from_p.output);
  const testing::CommandResult from_stdin =
      RunKiln("tokenize " + Quote(model.string()) + " --text-file - < " + Quote(file));
  EXPECT_EQ(from_stdin.output, from_p.output);
  const std::string missing = (dir / "absent.txt").string();
  const testing::CommandResult r = RunKiln("tokenize " + Quote(model.string()) + " --text-file " + Quote(missing));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(missing + ": cannot read"));
}

}  // namespace
}  // namespace kiln

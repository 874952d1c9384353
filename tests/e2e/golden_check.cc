// kiln against llama.cpp's recorded outputs (../shared/testdata/golden):
// greedy ids, the logits after the prompt, and teacher-forced logits over
// every golden sequence for the quantised files.
#include <cmath>
#include <fstream>

#include "compiler/CompileModel.h"
#include "gtest/gtest.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/util/json.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

struct Golden {
  std::vector<int32_t> prompt, generated;
  std::vector<float> top1, runner_up;  // per generation step
  std::vector<float> logits;           // rows x n_vocab
  int64_t rows = 0, first_position = 0;
};

std::vector<int32_t> Ids(const JsonValue& a) {
  std::vector<int32_t> out;
  for (const JsonValue& v : a.array()) out.push_back(static_cast<int32_t>(*v.int_value()));
  return out;
}

std::vector<float> Floats(const JsonValue& a) {
  std::vector<float> out;
  for (const JsonValue& v : a.array()) out.push_back(static_cast<float>(v.number()));
  return out;
}

Golden ReadGolden(const std::filesystem::path& json_path) {
  Golden g;
  absl::StatusOr<JsonValue> j = ParseJson(testing::ReadFileOrDie(json_path));
  EXPECT_TRUE(j.ok()) << j.status();
  g.prompt = Ids(*j->Find("prompt_token_ids"));
  g.generated = Ids(*j->Find("generated_token_ids"));
  g.top1 = Floats(*j->Find("step_top1_logit"));
  g.runner_up = Floats(*j->Find("step_runner_up_logit"));
  const JsonValue& logits = *j->Find("logits");
  g.rows = *logits.Find("shape")->array()[0].int_value();
  g.first_position = *logits.Find("first_position")->int_value();
  const std::string raw = testing::ReadFileOrDie(json_path.parent_path() / logits.Find("file")->string_value());
  g.logits.resize(raw.size() / 4);
  std::memcpy(g.logits.data(), raw.data(), raw.size());
  return g;
}

double RelativeL2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// One compiled program per model, reused by its cases.
class GoldenCheck : public ::testing::Test {
 protected:
  std::unique_ptr<CpuExecutor> Load(const std::string& tag, int64_t tokens) {
    const std::filesystem::path model = testing::TestDataFile("models/" + tag + ".gguf");
    if (model.empty()) return nullptr;
    compiler::PipelineOptions options;
    options.print_remarks = false;
    absl::StatusOr<compiler::CompiledModel> compiled = compiler::CompileModel(model.string(), options);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    absl::StatusOr<Program> program = LoadGgufProgram(model.string(), compiled->plan_json);
    EXPECT_TRUE(program.ok()) << program.status();
    program_ = std::make_unique<Program>(*std::move(program));
    CpuExecutorOptions exec;
    exec.num_pages = (tokens + program_->plan.pool.page_size - 1) / program_->plan.pool.page_size;
    absl::StatusOr<std::unique_ptr<CpuExecutor>> ex = CpuExecutor::Create(program_->plan, program_->weights, exec);
    EXPECT_TRUE(ex.ok()) << ex.status();
    return ex.ok() ? *std::move(ex) : nullptr;
  }
  std::vector<std::filesystem::path> Cases(const std::string& tag) {
    std::vector<std::filesystem::path> out;
    const std::filesystem::path dir = testing::TestDataDir() / "golden" / tag;
    if (!std::filesystem::exists(dir)) return out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 5 && n.substr(n.size() - 5) == ".json" && n.find("activations") == std::string::npos) {
        out.push_back(e.path());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::unique_ptr<Program> program_;
};

// Greedy ids equal llama.cpp's for every prompt of `tag`; with
// `logit_tolerance` > 0 the logits after the prompt match within that
// relative L2 too.
void CheckGreedy(CpuExecutor& ex, const std::vector<std::filesystem::path>& cases,
                 double logit_tolerance) {
  for (const auto& path : cases) {
    const Golden g = ReadGolden(path);
    GenerateOptions options;
    options.max_new_tokens = static_cast<int64_t>(g.generated.size());
    options.sampling.temperature = 0;
    absl::StatusOr<GenerateResult> r = Generate(ex, g.prompt, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ids, g.generated) << path.filename();
    size_t same = 0;
    while (same < r->ids.size() && same < g.generated.size() && r->ids[same] == g.generated[same]) ++same;
    const size_t v = ex.n_vocab();
    const std::span<const float> golden_row(g.logits.data() + (g.prompt.size() - 1 - g.first_position) * v, v);
    const double err = RelativeL2(r->last_prompt_logits, golden_row);
    if (logit_tolerance > 0) EXPECT_LT(err, logit_tolerance) << path.filename();
    std::printf("%s: %zu/%zu greedy ids equal llama.cpp's; last-prompt logits relative L2 %.2e\n",
                path.filename().c_str(), same, g.generated.size(), err);
  }
}

TEST_F(GoldenCheck, Stories260KGreedyIdsAndPromptLogits) {
  const std::vector<std::filesystem::path> cases = Cases("stories260K");
  if (cases.empty()) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  std::unique_ptr<CpuExecutor> ex = Load("stories260K", 256);
  ASSERT_NE(ex, nullptr);
  CheckGreedy(*ex, cases, 1e-4);
}

TEST_F(GoldenCheck, Stories260KF16GreedyIds) {
  const std::vector<std::filesystem::path> cases = Cases("stories260K-f16");
  if (cases.empty()) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  std::unique_ptr<CpuExecutor> ex = Load("stories260K-f16", 256);
  ASSERT_NE(ex, nullptr);
  // llama.cpp rounds activations to f16 before F16 products, kiln keeps f32:
  // the README expects logit differences up to ~0.02, so only ids are exact.
  CheckGreedy(*ex, cases, 0);
}

// Teacher forcing over prompt + generated ids: every row of the golden logits,
// and the argmax wherever llama.cpp's margin is above 0.5.
void CheckTeacherForced(CpuExecutor& ex, const std::vector<std::filesystem::path>& cases, double max_abs_tolerance) {
  for (const auto& path : cases) {
    const Golden g = ReadGolden(path);
    std::vector<int32_t> seq = g.prompt;
    seq.insert(seq.end(), g.generated.begin(), g.generated.end() - 1);
    absl::StatusOr<std::vector<float>> all = ForwardAllPositions(ex, seq);
    ASSERT_TRUE(all.ok()) << all.status();
    const size_t v = ex.n_vocab();
    double worst = 0;
    for (int64_t r = 0; r < g.rows; ++r) {
      const float* mine = all->data() + (g.first_position + r) * v;
      const float* theirs = g.logits.data() + r * v;
      for (size_t i = 0; i < v; ++i) worst = std::max(worst, std::fabs(double(mine[i]) - theirs[i]));
    }
    int confident = 0, agree = 0;
    for (size_t k = 0; k < g.generated.size(); ++k) {
      if (g.top1[k] - g.runner_up[k] <= 0.5) continue;
      ++confident;
      const float* row = all->data() + (g.prompt.size() - 1 + k) * v;
      const int32_t argmax = static_cast<int32_t>(std::max_element(row, row + v) - row);
      agree += argmax == g.generated[k];
      EXPECT_EQ(argmax, g.generated[k]) << path.filename() << " step " << k;
    }
    EXPECT_LT(worst, max_abs_tolerance) << path.filename();
    std::printf("%s: teacher-forced over %zu positions: max |logit - llama.cpp| %.4f; argmax = golden at %d/%d "
                "steps with margin > 0.5\n",
                path.filename().c_str(), seq.size(), worst, agree, confident);
  }
}

TEST_F(GoldenCheck, QuantisedFilesTeacherForced) {
  int models = 0;
  for (const char* tag : {"stories260K-q8_0-mix", "stories260K-q4_0-mix"}) {
    const std::vector<std::filesystem::path> cases = Cases(tag);
    if (cases.empty()) continue;
    std::unique_ptr<CpuExecutor> ex = Load(tag, 256);
    ASSERT_NE(ex, nullptr);
    // kiln dequantises weights and multiplies in f32; llama.cpp quantises the
    // activations to q8_0 first. The README measured up to ~0.45 between the two.
    CheckTeacherForced(*ex, cases, 0.5);
    ++models;
  }
  if (models == 0) GTEST_SKIP() << "no quantised goldens under " << testing::TestDataDir();
}

TEST_F(GoldenCheck, TinyRandomLlamaPromptLogits) {
  const std::vector<std::filesystem::path> cases = Cases("llama-2-tiny-random");
  if (cases.empty()) GTEST_SKIP() << "no goldens under " << testing::TestDataDir();
  std::unique_ptr<CpuExecutor> ex = Load("llama-2-tiny-random", 256);
  ASSERT_NE(ex, nullptr);
  for (const auto& path : cases) {
    const Golden g = ReadGolden(path);
    absl::StatusOr<std::vector<float>> all = ForwardAllPositions(*ex, g.prompt);
    ASSERT_TRUE(all.ok()) << all.status();
    const size_t v = ex->n_vocab();
    const float* last = all->data() + (g.prompt.size() - 1) * v;
    double worst = 0;
    for (size_t i = 0; i < v; ++i) worst = std::max(worst, std::fabs(double(last[i]) - g.logits[i]));
    // The README: within ~1e-3 of llama.cpp (float64 NumPy got 8e-5).
    EXPECT_LT(worst, 1e-3) << path.filename();
    std::printf("%s: last-prompt logits max |diff| %.2e over %zu entries\n", path.filename().c_str(), worst, v);
  }
}

}  // namespace
}  // namespace kiln

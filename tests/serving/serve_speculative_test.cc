// `kiln serve --draft` / `--lookup` end to end: greedy completions through
// the server are llama.cpp's golden texts with speculation, the same as
// without it, alone and 16 at a time; usage.speculative and the kiln_spec_*
// metrics carry the real counts.
#include <cmath>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "runtime/util/json.h"
#include "tests/serving/serve_client.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using testing::HttpCall;
using testing::HttpReply;
using testing::ServeProcess;

struct GoldenCase {
  std::string prompt, text;
  int64_t tokens = 0;
};

std::vector<GoldenCase> Goldens() {
  std::vector<GoldenCase> out;
  for (const char* name : {"p01_once_upon_a_time", "p02_the_little_girl", "p03_one_day_a_cat", "p04_unicode_mixed"}) {
    const std::filesystem::path p = testing::TestDataFile(std::string("golden/stories260K/") + name + ".json");
    if (p.empty()) continue;
    absl::StatusOr<JsonValue> j = ParseJson(testing::ReadFileOrDie(p));
    if (!j.ok()) continue;
    out.push_back({j->Find("prompt")->string_value(), j->Find("generated_text")->string_value(),
                   static_cast<int64_t>(j->Find("generated_token_ids")->array().size())});
  }
  return out;
}

std::string CompletionBody(const std::string& prompt, int64_t max_tokens, bool speculative) {
  JsonValue body = JsonValue::MakeObject();
  body.Set("prompt", JsonValue::String(prompt));
  body.Set("max_tokens", JsonValue::Int(max_tokens));
  body.Set("temperature", JsonValue::Number(0));
  body.Set("speculative", JsonValue::Bool(speculative));
  return ToJson(body);
}

struct Completion {
  std::string text;
  int64_t drafted = -1, accepted = -1, verifications = -1;
  double mean = -1;
};

Completion Complete(int port, const std::string& prompt, int64_t max_tokens, bool speculative) {
  const HttpReply r = HttpCall(port, "POST", "/v1/completions", CompletionBody(prompt, max_tokens, speculative));
  Completion c;
  absl::StatusOr<JsonValue> j = ParseJson(r.body);
  if (r.status != 200 || !j.ok()) {
    c.text = "<" + std::to_string(r.status) + " " + r.body + ">";
    return c;
  }
  c.text = j->Find("choices")->array()[0].Find("text")->string_value();
  if (const JsonValue* s = j->Find("usage")->Find("speculative"); s != nullptr) {
    c.drafted = *s->Find("drafted")->int_value();
    c.accepted = *s->Find("accepted")->int_value();
    c.verifications = *s->Find("verifications")->int_value();
    c.mean = s->Find("mean_accepted_length")->number();
  }
  return c;
}

// The value of metric `name` (a line "name value"), NaN when absent.
double Metric(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? std::nan("") : std::atof(metrics.c_str() + at + name.size() + 2);
}

TEST(ServeSpeculative, DraftModelGivesTheGoldensAndReportsItsCounts) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(draft, "models/stories260K-q4_0-mix.gguf");
  const std::vector<GoldenCase> goldens = Goldens();
  ASSERT_EQ(goldens.size(), 4u);
  // stories260K on a CPU is compute-bound from two tokens a step on (the
  // measured budget would leave no room to draft): a fixed budget.
  ServeProcess server({model.string(), "--kv-memory", "16", "--draft", draft.string(), "--draft-max", "6",
                       "--spec-budget", "64"});
  ASSERT_GT(server.port(), 0) << server.banner();
  EXPECT_THAT(server.banner(), HasSubstr("speculative decoding with draft-model"));
  int64_t drafted = 0, accepted = 0, verifications = 0;
  for (const GoldenCase& g : goldens) {
    const Completion spec = Complete(server.port(), g.prompt, g.tokens, true);
    EXPECT_EQ(spec.text, g.text) << g.prompt;
    EXPECT_GT(spec.drafted, 0) << g.prompt;
    EXPECT_GT(spec.accepted, 0) << g.prompt;
    EXPECT_LE(spec.accepted, spec.drafted);
    EXPECT_GT(spec.verifications, 0);
    EXPECT_NEAR(spec.mean, static_cast<double>(spec.accepted) / spec.verifications, 1e-9);
    // Each verification keeps at most draft-max drafted tokens.
    EXPECT_LE(spec.accepted, 6 * spec.verifications);
    drafted += spec.drafted;
    accepted += spec.accepted;
    verifications += spec.verifications;

    const Completion plain = Complete(server.port(), g.prompt, g.tokens, false);
    EXPECT_EQ(plain.text, g.text) << g.prompt << " (opted out)";
    EXPECT_EQ(plain.drafted, 0);
    EXPECT_EQ(plain.accepted, 0);
  }
  // Streamed, with stream_options.include_usage: the same text, and the
  // counts in a last chunk that has no choices.
  const GoldenCase& g = goldens[0];
  const HttpReply streamed = HttpCall(
      server.port(), "POST", "/v1/completions",
      absl::StrCat(R"({"prompt": )", ToJson(JsonValue::String(g.prompt)), R"(, "max_tokens": )", g.tokens,
                   R"(, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}})"));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::string text;
  std::vector<JsonValue> events;
  for (size_t at = 0; (at = streamed.body.find("data: ", at)) != std::string::npos;) {
    const size_t end = streamed.body.find("\n\n", at);
    const std::string data = streamed.body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    absl::StatusOr<JsonValue> ev = ParseJson(data);
    ASSERT_TRUE(ev.ok()) << data;
    events.push_back(*std::move(ev));
  }
  ASSERT_FALSE(events.empty());
  for (const JsonValue& ev : events) {
    for (const JsonValue& ch : ev.Find("choices")->array()) text += ch.Find("text")->string_value();
  }
  EXPECT_EQ(text, g.text);
  EXPECT_TRUE(events.back().Find("choices")->array().empty());
  const JsonValue* usage = events.back().Find("usage");
  ASSERT_NE(usage, nullptr);
  EXPECT_EQ(*usage->Find("completion_tokens")->int_value(), g.tokens);
  const JsonValue* spec = usage->Find("speculative");
  ASSERT_NE(spec, nullptr);
  const int64_t streamed_drafted = *spec->Find("drafted")->int_value();
  const int64_t streamed_accepted = *spec->Find("accepted")->int_value();
  EXPECT_GT(streamed_drafted, 0);
  EXPECT_LE(streamed_accepted, streamed_drafted);
  drafted += streamed_drafted;
  accepted += streamed_accepted;
  verifications += *spec->Find("verifications")->int_value();

  const std::string metrics = HttpCall(server.port(), "GET", "/metrics").body;
  EXPECT_EQ(Metric(metrics, "kiln_spec_drafted_tokens_total"), drafted);
  EXPECT_EQ(Metric(metrics, "kiln_spec_accepted_tokens_total"), accepted);
  EXPECT_EQ(Metric(metrics, "kiln_spec_verifications_total"), verifications);
  EXPECT_NEAR(Metric(metrics, "kiln_spec_acceptance_rate"), static_cast<double>(accepted) / drafted, 1e-12);
  EXPECT_NEAR(Metric(metrics, "kiln_spec_mean_accepted_length"), static_cast<double>(accepted) / verifications,
              1e-12);
  EXPECT_EQ(Metric(metrics, "kiln_kv_pages_used"), 0);
  std::printf("4 golden prompts through kiln serve --draft: %lld/%lld drafted tokens accepted (%.1f%%), %.2f per "
              "verification; texts equal the goldens\n",
              (long long)accepted, (long long)drafted, 100.0 * accepted / drafted,
              static_cast<double>(accepted) / verifications);
}

TEST(ServeSpeculative, SixteenConcurrentMixedRequestsWithLookupGetTheirSoloTexts) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  ServeProcess server({model.string(), "--kv-memory", "16", "--lookup", "--spec-budget", "64"});
  ASSERT_GT(server.port(), 0) << server.banner();
  std::vector<std::string> prompts;
  for (const GoldenCase& g : Goldens()) prompts.push_back(g.prompt);
  const char* starts[] = {"Tom had a", "The sun was", "Once there was a big dog who", "Mom said", "A bird"};
  for (int k = 0; prompts.size() < 16; ++k) prompts.push_back(std::string(starts[k % 5]) + (k % 2 ? " very" : " big"));
  constexpr int64_t kNew = 48;
  std::vector<std::string> solo;
  for (const std::string& p : prompts) solo.push_back(Complete(server.port(), p, kNew, false).text);
  std::vector<Completion> together(prompts.size());
  std::vector<std::thread> clients;
  for (size_t k = 0; k < prompts.size(); ++k) {
    clients.emplace_back([&, k] { together[k] = Complete(server.port(), prompts[k], kNew, k % 4 != 3); });
  }
  for (std::thread& t : clients) t.join();
  int64_t drafted = 0, accepted = 0;
  for (size_t k = 0; k < prompts.size(); ++k) {
    EXPECT_EQ(together[k].text, solo[k]) << prompts[k];
    EXPECT_LE(together[k].accepted, together[k].drafted);
    if (k % 4 == 3) EXPECT_EQ(together[k].drafted, 0) << "opted out";
    drafted += together[k].drafted;
    accepted += together[k].accepted;
  }
  EXPECT_GT(drafted, 0);
  const std::string metrics = HttpCall(server.port(), "GET", "/metrics").body;
  EXPECT_EQ(Metric(metrics, "kiln_spec_drafted_tokens_total"), drafted);
  EXPECT_EQ(Metric(metrics, "kiln_spec_accepted_tokens_total"), accepted);
}

TEST(ServeSpeculative, ConflictingOrBadSpeculationOptionsAreErrors) {
  SKIP_WITHOUT_COMPILER();
  KILN_REQUIRE_TESTDATA(model, "models/stories260K.gguf");
  testing::CommandResult both = testing::RunKiln("serve " + testing::Quote(model.string()) + " --lookup --draft " +
                                                 testing::Quote(model.string()) + " --port 0");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_THAT(both.output, HasSubstr("choose one of --draft and --lookup"));
  testing::CommandResult zero =
      testing::RunKiln("serve " + testing::Quote(model.string()) + " --lookup --draft-max 0 --port 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_THAT(zero.output, HasSubstr("--draft-max must be between 1 and 64"));
  testing::CommandResult budget =
      testing::RunKiln("serve " + testing::Quote(model.string()) + " --lookup --spec-budget lots --port 0");
  EXPECT_NE(budget.exit_code, 0);
  EXPECT_THAT(budget.output, HasSubstr("--spec-budget takes a positive number of tokens or auto"));
  ServeProcess server({model.string(), "--kv-memory", "16", "--lookup"});
  ASSERT_GT(server.port(), 0) << server.banner();
  const HttpReply bad = HttpCall(server.port(), "POST", "/v1/completions",
                                 R"({"prompt": "Hi", "max_tokens": 4, "speculative": "yes"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("'speculative' must be a boolean"));
  const HttpReply bad_options = HttpCall(server.port(), "POST", "/v1/completions",
                                         R"({"prompt": "Hi", "stream": true, "stream_options": 3})");
  EXPECT_EQ(bad_options.status, 400);
  EXPECT_THAT(bad_options.body, HasSubstr("'stream_options' must be an object"));
}

}  // namespace
}  // namespace kiln

// golden/tokenize.json: llama-tokenize's ids, with and without BOS, for the
// stories260K and llama-2-tiny-random vocabularies.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/formats/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/util/json.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

std::vector<int32_t> Ids(const JsonValue& array) {
  std::vector<int32_t> ids;
  for (const JsonValue& v : array.array()) ids.push_back(static_cast<int32_t>(v.int_value().value_or(-1)));
  return ids;
}

TEST(GoldenTokenize, IdsWithAndWithoutBos) {
  KILN_REQUIRE_TESTDATA(golden_path, "golden/tokenize.json");
  absl::StatusOr<JsonValue> golden = ParseJson(testing::ReadFileOrDie(golden_path));
  ASSERT_TRUE(golden.ok()) << golden.status();
  const JsonValue* vocabularies = golden->Find("vocabularies");
  ASSERT_NE(vocabularies, nullptr);
  ASSERT_EQ(vocabularies->size(), 2u);

  for (const auto& [vocab_name, vocab] : vocabularies->members()) {
    const JsonValue* model = vocab.Find("model");
    ASSERT_NE(model, nullptr);
    KILN_REQUIRE_TESTDATA(model_path, model->string_value());
    absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(model_path.string());
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**gguf);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

    const JsonValue* cases = vocab.Find("cases");
    ASSERT_NE(cases, nullptr);
    int checked = 0;
    for (const auto& [case_id, c] : cases->members()) {
      const std::string& prompt = c.Find("prompt")->string_value();
      EXPECT_EQ((*tokenizer)->Encode(prompt, {.add_special = true}), Ids(*c.Find("ids_with_bos")))
          << vocab_name << " " << case_id;
      const std::vector<int32_t> no_bos = (*tokenizer)->Encode(prompt);
      EXPECT_EQ(no_bos, Ids(*c.Find("ids_no_bos"))) << vocab_name << " " << case_id;
      EXPECT_EQ((*tokenizer)->Decode(no_bos), prompt) << vocab_name << " " << case_id;
      EXPECT_EQ((*tokenizer)->Decode((*tokenizer)->Encode(prompt, {.add_special = true})), prompt)
          << vocab_name << " " << case_id;
      ++checked;
    }
    std::printf("%s: %d prompts, with and without BOS\n", vocab_name.c_str(), checked);
    EXPECT_EQ(checked, 4);
  }
}

}  // namespace
}  // namespace kiln

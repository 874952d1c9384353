// llama.cpp's tokenizer test vectors (test-tokenizer-0): every .inp/.out pair
// must encode exactly, with no special tokens added and none parsed.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/formats/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

struct VectorSet {
  std::string gguf;     // vocabulary file, relative to the test data folder
  std::string vectors;  // .inp/.out prefix, relative to the test data folder
  // Decode(Encode(s)) == s for every vector (false where normalisation loses
  // information: BERT lowercases, strips accents and drops whitespace).
  bool lossless;
};

void PrintTo(const VectorSet& set, std::ostream* os) { *os << set.vectors; }

std::vector<std::string> ReadInputs(const std::filesystem::path& path) {
  const std::string data = testing::ReadFileOrDie(path);
  constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t start = 0;
  for (size_t hit; (hit = data.find(kSeparator, start)) != std::string::npos; start = hit + kSeparator.size()) {
    inputs.push_back(data.substr(start, hit - start));
  }
  return inputs;
}

std::vector<std::vector<int32_t>> ReadOutputs(const std::filesystem::path& path) {
  std::vector<std::vector<int32_t>> outputs;
  for (absl::string_view line : absl::StrSplit(testing::ReadFileOrDie(path), '\n')) {
    std::vector<int32_t>& ids = outputs.emplace_back();
    for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      int32_t id = 0;
      EXPECT_TRUE(absl::SimpleAtoi(field, &id)) << path << ": bad id '" << field << "'";
      ids.push_back(id);
    }
  }
  if (!outputs.empty() && outputs.back().empty()) outputs.pop_back();  // after the final newline
  return outputs;
}

std::string Escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out;
}

class VocabVectorsTest : public ::testing::TestWithParam<VectorSet> {};

TEST_P(VocabVectorsTest, EncodesExactlyAndRoundTrips) {
  const VectorSet& set = GetParam();
  KILN_REQUIRE_TESTDATA(gguf_path, set.gguf);
  KILN_REQUIRE_TESTDATA(inp_path, set.vectors + ".inp");
  KILN_REQUIRE_TESTDATA(out_path, set.vectors + ".out");
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(gguf_path.string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  const std::vector<std::string> inputs = ReadInputs(inp_path);
  const std::vector<std::vector<int32_t>> expected = ReadOutputs(out_path);
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_FALSE(inputs.empty());

  int exact = 0;
  int round_trips = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = (*tokenizer)->Encode(inputs[i]);
    if (ids == expected[i]) {
      ++exact;
    } else {
      ADD_FAILURE() << set.vectors << " #" << i << " '" << Escaped(inputs[i]) << "'\n  expected "
                    << ::testing::PrintToString(expected[i]) << "\n  got      " << ::testing::PrintToString(ids);
    }
    const std::string decoded = (*tokenizer)->Decode(ids);
    if (decoded == inputs[i]) {
      ++round_trips;
    } else if (set.lossless) {
      ADD_FAILURE() << set.vectors << " #" << i << " does not round-trip: '" << Escaped(inputs[i]) << "' -> '"
                    << Escaped(decoded) << "'";
    }
  }
  std::string name = std::filesystem::path(set.gguf).filename().string();
  if (set.vectors != set.gguf) name += " (vectors of " + std::filesystem::path(set.vectors).filename().string() + ")";
  std::printf("%s: %d/%zu pairs (%s); decode(encode(s)) == s for %d/%zu%s\n", name.c_str(), exact, inputs.size(),
              std::string((*tokenizer)->kind()).c_str(), round_trips, inputs.size(),
              set.lossless ? "" : " (lossy normalisation)");
}

INSTANTIATE_TEST_SUITE_P(
    All, VocabVectorsTest,
    ::testing::Values(
        VectorSet{"vocab/ggml-vocab-bert-bge.gguf", "vocab/ggml-vocab-bert-bge.gguf", false},
        VectorSet{"vocab/ggml-vocab-deepseek-coder.gguf", "vocab/ggml-vocab-deepseek-coder.gguf", true},
        VectorSet{"vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-deepseek-llm.gguf", true},
        VectorSet{"vocab/ggml-vocab-falcon.gguf", "vocab/ggml-vocab-falcon.gguf", true},
        VectorSet{"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-gpt-2.gguf", true},
        VectorSet{"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-spm.gguf", true},
        VectorSet{"vocab/ggml-vocab-starcoder.gguf", "vocab/ggml-vocab-starcoder.gguf", true},
        VectorSet{"models/stories260K.gguf", "models/stories260K.gguf", true},
        // The Llama-2 vocabulary inside a model file; its expected ids are
        // those of ggml-vocab-llama-spm.
        VectorSet{"models/llama-2-tiny-random.gguf", "vocab/ggml-vocab-llama-spm.gguf", true}),
    [](const ::testing::TestParamInfo<VectorSet>& info) {
      std::string name = std::filesystem::path(info.param.gguf).stem().string();
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace kiln

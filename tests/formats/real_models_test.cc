// The real models that scripts/fetch_models.py puts in $KILN_MODELS (files
// llama.cpp's tools wrote): every reader must take them whole. Each case
// skips, naming the file, where the model has not been fetched.
#include <cmath>

#include "gtest/gtest.h"
#include "runtime/formats/gguf.h"
#include "runtime/formats/quant.h"
#include "runtime/model/model_config.h"
#include "runtime/tokenizer/chat_template.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

struct RealModel {
  const char* file;
  const char* arch;
  int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff;
  bool tied, qkv_bias;
  const char* tokenizer_kind;
};

const RealModel kModels[] = {
    {"SmolLM2-135M-Instruct.Q4_1.gguf", "llama", 49152, 576, 30, 9, 3, 1536, true, false,
     "gpt2 (byte-level BPE, pre-tokenizer smollm)"},
    {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2", 151936, 896, 24, 14, 2, 4864, false, true,
     "gpt2 (byte-level BPE, pre-tokenizer qwen2)"},
    {"qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2", 151936, 1536, 28, 12, 2, 8960, false, true,
     "gpt2 (byte-level BPE, pre-tokenizer qwen2)"},
};

class RealModelTest : public ::testing::TestWithParam<RealModel> {};

TEST_P(RealModelTest, ReadsConfigTokenizerAndEveryTensor) {
  const RealModel& m = GetParam();
  const std::filesystem::path path = testing::ModelCacheDir() / m.file;
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " not fetched (python3 scripts/fetch_models.py --all)";
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(path.string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<ModelConfig> c = ModelConfigFromGguf(**gguf);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, m.arch);
  EXPECT_EQ(c->n_vocab, m.n_vocab);
  EXPECT_EQ(c->n_embd, m.n_embd);
  EXPECT_EQ(c->n_layer, m.n_layer);
  EXPECT_EQ(c->n_head, m.n_head);
  EXPECT_EQ(c->n_head_kv, m.n_head_kv);
  EXPECT_EQ(c->n_ff, m.n_ff);
  EXPECT_EQ(c->tied_embeddings, m.tied);
  EXPECT_EQ(c->qkv_bias, m.qkv_bias);

  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), m.tokenizer_kind);
  const std::string text = "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)  # café 🐶";
  const std::vector<int32_t> ids = (*tok)->Encode(text);
  EXPECT_GT(ids.size(), 10u);
  EXPECT_LT(ids.size(), text.size());  // merges happen: fewer tokens than bytes
  EXPECT_EQ((*tok)->Decode(ids), text);
  absl::StatusOr<ChatTemplate> chat = SelectChatTemplate((*tok)->chat_template());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(*chat, ChatTemplate::kChatML);
  // <|im_start|> is one control token when special text is parsed.
  const std::vector<int32_t> turn = (*tok)->Encode("<|im_start|>user", {.parse_special = true});
  ASSERT_FALSE(turn.empty());
  EXPECT_EQ((*tok)->token_text(turn[0]), "<|im_start|>");

  // Every tensor of a type kiln reads dequantises to finite values of a
  // weight-like scale (a wrong block layout gives garbage or NaNs).
  int checked = 0;
  for (const GgufTensor& t : (*gguf)->tensors()) {
    if (!GetGgmlTypeInfo(t.type).dequantizable) continue;
    const int64_t row = t.dims[0];
    const int64_t rows = std::min<int64_t>(t.rows(), 4);
    std::vector<float> out(row * rows);
    const uint64_t bytes = *GgmlRowBytes(t.type, row * rows);
    ASSERT_TRUE(Dequantize(t.type, t.bytes().subspan(0, bytes), out).ok()) << t.name;
    double sum2 = 0;
    for (float x : out) {
      ASSERT_TRUE(std::isfinite(x)) << t.name;
      sum2 += double(x) * x;
    }
    const double rms = std::sqrt(sum2 / out.size());
    EXPECT_GT(rms, 1e-4) << t.name;
    // Matrices sit near the init scale; 1-D tensors (norm gains, Qwen's
    // k biases with entries near 100) may be far larger.
    if (t.dims.size() == 2) EXPECT_LT(rms, 1.0) << t.name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>((*gguf)->tensors().size()));
}

INSTANTIATE_TEST_SUITE_P(Cache, RealModelTest, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<RealModel>& info) {
                           std::string name = info.param.file;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kiln

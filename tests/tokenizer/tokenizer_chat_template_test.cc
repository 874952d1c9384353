#include "runtime/tokenizer/chat_template.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/formats/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello!"},
    {"assistant", "Hi there."},
    {"user", "  What is 2+2?\n"},
};

TEST(ChatTemplate, RendersChatML) {
  EXPECT_EQ(RenderChat(ChatTemplate::kChatML, kConversation),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\nHi there.<|im_end|>\n"
            "<|im_start|>user\n  What is 2+2?\n<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(RenderChat(ChatTemplate::kChatML, std::vector<ChatMessage>{{"user", "x"}}, false),
            "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, RendersLlama3) {
  EXPECT_EQ(RenderChat(ChatTemplate::kLlama3, kConversation),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(RenderChat(ChatTemplate::kLlama3, {}, true), "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, DetectsFromJinjaMarkers) {
  // Abridged from Qwen2.5 and Llama 3.1 tokenizer_config.json.
  const char* qwen =
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
      "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  const char* llama3 =
      "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
      "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}";
  EXPECT_EQ(*SelectChatTemplate(qwen), ChatTemplate::kChatML);
  EXPECT_EQ(*SelectChatTemplate(llama3), ChatTemplate::kLlama3);
  // An explicit name wins over the source.
  EXPECT_EQ(*SelectChatTemplate(qwen, "llama3"), ChatTemplate::kLlama3);
  EXPECT_EQ(*SelectChatTemplate("", "chatml"), ChatTemplate::kChatML);
  EXPECT_EQ(ChatTemplateName(ChatTemplate::kLlama3), "llama3");
}

TEST(ChatTemplate, ErrorsListTheNames) {
  absl::StatusOr<ChatTemplate> none = SelectChatTemplate("");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("chatml, llama3"));
  absl::StatusOr<ChatTemplate> unknown = SelectChatTemplate("{{ messages }}[INST]");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("chatml, llama3"));
  absl::StatusOr<ChatTemplate> bad_name = SelectChatTemplate("", "vicuna");
  EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_name.status().message(), HasSubstr("'vicuna'"));
}

TEST(ChatTemplate, RenderedPromptEncodesControlTokens) {
  // The test vocabularies have no chat tokens, so check the mechanism on
  // GPT-2's <|endoftext|>: control text in a rendered prompt is only a token
  // when parsed, which is how a chat prompt must be encoded.
  KILN_REQUIRE_TESTDATA(path, "vocab/ggml-vocab-gpt-2.gguf");
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(path.string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_TRUE((*tok)->chat_template().empty());
  EXPECT_EQ(SelectChatTemplate((*tok)->chat_template()).status().code(), absl::StatusCode::kNotFound);
  const std::string prompt = RenderChat(ChatTemplate::kChatML, std::vector<ChatMessage>{{"user", "Hi"}}) + "<|endoftext|>";
  const std::vector<int32_t> ids = (*tok)->Encode(prompt, {.add_special = true, .parse_special = true});
  EXPECT_EQ(ids.back(), 50256);
}

}  // namespace
}  // namespace kiln

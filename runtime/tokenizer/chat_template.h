// Chat prompts: the two common template families, recognised from the
// Jinja source in tokenizer.chat_template (by their markers, not by running
// Jinja) or named explicitly, rendered as llama.cpp's
// llama_chat_apply_template renders them.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kiln {

enum class ChatTemplate {
  kChatML,  // <|im_start|>role\ncontent<|im_end|>\n (Qwen, SmolLM, ...)
  kLlama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// "chatml", "llama3".
std::string_view ChatTemplateName(ChatTemplate chat_template);

// The template named `name_override` if that is not empty, else the one the
// Jinja source `jinja_source` is recognised as. NotFound when the source is
// empty, InvalidArgument for an unknown name or unrecognised source; both
// messages list the names that can be passed.
absl::StatusOr<ChatTemplate> SelectChatTemplate(std::string_view jinja_source, std::string_view name_override = "");

// The prompt text for `messages`, followed by the start of an assistant turn
// when `add_assistant_prompt`. It contains control-token text, so encode it
// with parse_special; BOS is not part of it (encode with add_special).
// Llama 3 trims surrounding whitespace from each content, ChatML does not.
std::string RenderChat(ChatTemplate chat_template, std::span<const ChatMessage> messages,
                       bool add_assistant_prompt = true);

}  // namespace kiln

#include "runtime/tokenizer/chat_template.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

constexpr char kKnownNames[] = "chatml, llama3";

std::string_view TrimAsciiWhitespace(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view ChatTemplateName(ChatTemplate chat_template) {
  switch (chat_template) {
    case ChatTemplate::kChatML:
      return "chatml";
    case ChatTemplate::kLlama3:
      return "llama3";
  }
  return "";
}

absl::StatusOr<ChatTemplate> SelectChatTemplate(std::string_view jinja_source, std::string_view name_override) {
  if (!name_override.empty()) {
    for (ChatTemplate t : {ChatTemplate::kChatML, ChatTemplate::kLlama3}) {
      if (name_override == ChatTemplateName(t)) return t;
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown chat template name '", std::string(name_override),
                                                   "' (known: ", kKnownNames, ")"));
  }
  if (jinja_source.empty()) {
    return absl::NotFoundError(absl::StrCat("the model has no tokenizer.chat_template; name a template (",
                                            kKnownNames, ")"));
  }
  if (jinja_source.find("<|im_start|>") != std::string_view::npos) return ChatTemplate::kChatML;
  if (jinja_source.find("<|start_header_id|>") != std::string_view::npos &&
      jinja_source.find("<|end_header_id|>") != std::string_view::npos) {
    return ChatTemplate::kLlama3;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.chat_template has neither ChatML (<|im_start|>) nor Llama 3 (<|start_header_id|>) "
                   "markers; name a template (",
                   kKnownNames, ")"));
}

std::string RenderChat(ChatTemplate chat_template, std::span<const ChatMessage> messages,
                       bool add_assistant_prompt) {
  std::string out;
  switch (chat_template) {
    case ChatTemplate::kChatML:
      for (const ChatMessage& m : messages) absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      if (add_assistant_prompt) out += "<|im_start|>assistant\n";
      break;
    case ChatTemplate::kLlama3:
      for (const ChatMessage& m : messages) {
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n");
        out.append(TrimAsciiWhitespace(m.content));
        out += "<|eot_id|>";
      }
      if (add_assistant_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
  }
  return out;
}

}  // namespace kiln

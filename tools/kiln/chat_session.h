// kiln run --interactive: a conversation with a chat model, read from a
// stream a message a line, each answered with the whole conversation so far
// as its prompt; the positions the turn before left in the cache (the
// conversation up to its reply) are not run again.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/executor/executor.h"
#include "runtime/executor/generator.h"
#include "runtime/tokenizer/chat_template.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln::cli {

struct ChatSessionOptions {
  ChatTemplate chat_template = ChatTemplate::kChatML;
  std::string system;          // a system message; empty for none
  GenerateOptions generate;    // each reply's (max_new_tokens: its most tokens)
  int64_t context_tokens = 0;  // the model's context
};

// Reads user messages from `in`, one a line, until its end or a line
// "/exit"; streams each reply to `out`, and the prompt marker and a speed
// line a reply to `err`. Where the conversation and a whole reply would not
// fit the context, its oldest exchanges are dropped (the system message
// stays); a message that does not fit alone is refused with a message on
// `err`, and the session goes on. Returns the number of replies that failed
// (0 when all were answered).
int RunChatSession(Executor& executor, const Tokenizer& tokenizer, const ChatSessionOptions& options, std::FILE* in,
                   std::FILE* out, std::FILE* err);

}  // namespace kiln::cli

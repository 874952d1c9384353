#include "tools/kiln/chat_session.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "runtime/tokenizer/streaming_decoder.h"

namespace kiln::cli {
namespace {

// The next line of `in` without its line break; false at the end of input.
bool ReadLine(std::FILE* in, std::string* line) {
  line->clear();
  int c;
  while ((c = std::fgetc(in)) != EOF && c != '\n') line->push_back(static_cast<char>(c));
  if (c == EOF && line->empty()) return false;
  if (!line->empty() && line->back() == '\r') line->pop_back();
  return true;
}

}  // namespace

int RunChatSession(Executor& executor, const Tokenizer& tokenizer, const ChatSessionOptions& options, std::FILE* in,
                   std::FILE* out, std::FILE* err) {
  const EncodeOptions encode{.add_special = true, .parse_special = true};
  const int64_t reply_tokens = options.generate.max_new_tokens;
  std::vector<ChatMessage> turns;  // user, assistant, user, ...
  std::vector<int32_t> cached;     // the ids whose positions the executor's cache holds
  int failed = 0;
  std::string line;
  for (;;) {
    std::fputs("> ", err);
    std::fflush(err);
    if (!ReadLine(in, &line) || line == "/exit") break;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    turns.push_back({"user", line});
    // The prompt: the system message and the turns, the oldest exchanges
    // dropped until it and a whole reply fit the context.
    std::vector<int32_t> prompt;
    for (;;) {
      std::vector<ChatMessage> messages;
      if (!options.system.empty()) messages.push_back({"system", options.system});
      messages.insert(messages.end(), turns.begin(), turns.end());
      prompt = tokenizer.Encode(RenderChat(options.chat_template, messages), encode);
      if (static_cast<int64_t>(prompt.size()) + reply_tokens <= options.context_tokens || turns.size() == 1) break;
      turns.erase(turns.begin(), turns.begin() + 2);
    }
    if (static_cast<int64_t>(prompt.size()) + reply_tokens > options.context_tokens) {
      std::fprintf(err,
                   "kiln: this message makes a prompt of %zu tokens, which with a reply of up to %lld (-n) exceeds "
                   "the model's context of %lld tokens: send a shorter one or lower -n\n",
                   prompt.size(), static_cast<long long>(reply_tokens), static_cast<long long>(options.context_tokens));
      turns.pop_back();
      ++failed;
      continue;
    }
    StreamingDecoder decoder(tokenizer);
    std::string reply;
    auto on_token = [&](int32_t id) {
      const std::string piece = decoder.Push(id);  // control tokens (the end of a turn) render as nothing
      reply += piece;
      std::fwrite(piece.data(), 1, piece.size(), out);
      std::fflush(out);
    };
    // The conversation so far is the start of this prompt up to the last
    // reply's end: its positions are not run again.
    GenerateOptions generate = options.generate;
    while (generate.cached_prefix < static_cast<int64_t>(std::min(cached.size(), prompt.size())) &&
           cached[generate.cached_prefix] == prompt[generate.cached_prefix]) {
      ++generate.cached_prefix;
    }
    absl::StatusOr<GenerateResult> result = Generate(executor, prompt, generate, on_token);
    cached = result.ok() ? result->CachedIds() : std::vector<int32_t>();
    const std::string rest = decoder.Finish();
    reply += rest;
    std::fwrite(rest.data(), 1, rest.size(), out);
    std::fputs("\n", out);
    std::fflush(out);
    if (!result.ok()) {
      std::fprintf(err, "kiln: %s\n", std::string(result.status().message()).c_str());
      turns.pop_back();
      ++failed;
      continue;
    }
    turns.push_back({"assistant", reply});
    const size_t decoded = result->ids.size() > 1 ? result->ids.size() - 1 : 0;  // the first comes from prefill
    const size_t run = result->prompt_ids.size() - result->reused_prompt_tokens;
    std::fprintf(err, "prompt: %zu tokens (%lld cached), %.2f tok/s | reply: %zu tokens, %.2f tok/s%s\n",
                 result->prompt_ids.size(), static_cast<long long>(result->reused_prompt_tokens),
                 run / std::max(result->prompt_seconds, 1e-9), result->ids.size(),
                 decoded / std::max(result->generate_seconds, 1e-9),
                 result->stop_reason == "length" ? " (cut at -n)" : "");
  }
  std::fputs("\n", err);
  return failed;
}

}  // namespace kiln::cli

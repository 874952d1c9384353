#include <cstdio>

#include "absl/strings/str_format.h"
#include "runtime/formats/gguf.h"
#include "runtime/tokenizer/chat_template.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/input_file.h"

namespace kiln::cli {
namespace {

// Control bytes and the vocabulary's space marks made visible for --show-pieces.
std::string Visible(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += absl::StrFormat("\\x%02x", c);
    else out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

int RunTokenize(int argc, char** argv) {
  ArgParser args("tokenize", "Prints the token ids of a text with the model's own tokenizer, space-separated on\n"
                             "one line. No BOS is added unless --bos; control-token text is plain text unless\n"
                             "--parse-special.");
  args.Positional("MODEL", "a GGUF file (a vocabulary-only GGUF is enough)")
      .Option("text-file", "FILE",
              "read the text from FILE (bytes as they are, no newline stripped; -: standard input)")
      .Option("prompt", "TEXT", "the text itself", "", "-p")
      .Flag("bos", "add the vocabulary's BOS/EOS/[CLS] as the model expects")
      .Flag("parse-special", "treat control-token text such as <|im_start|> as those tokens")
      .Flag("chat", "wrap the text as a user message in the model's chat template (implies --parse-special)")
      .Option("chat-template", "NAME", "chatml|llama3, overriding what the model's metadata names")
      .Option("system", "TEXT", "with --chat: a system message before the user message")
      .Flag("show-pieces", "after the ids, print each token's id and text, one per line");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;
  if (args.Has("text-file") == args.Has("prompt")) return Fail("tokenize", "give exactly one of --text-file and -p");
  std::string text;
  if (args.Has("text-file")) {
    absl::StatusOr<std::string> read = ReadInputFile(args.Get("text-file"));
    if (!read.ok()) return Fail("tokenize", std::string(read.status().message()));
    text = *std::move(read);
  } else {
    text = args.Get("prompt");
  }

  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(args.Get("MODEL"));
  if (!file.ok()) return Fail("tokenize", std::string(file.status().message()));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) return Fail("tokenize", std::string(tok.status().message()));

  EncodeOptions options{args.GetFlag("bos"), args.GetFlag("parse-special")};
  if (args.GetFlag("chat")) {
    absl::StatusOr<ChatTemplate> tmpl = SelectChatTemplate((*tok)->chat_template(), args.Get("chat-template"));
    if (!tmpl.ok()) return Fail("tokenize", std::string(tmpl.status().message()));
    std::vector<ChatMessage> messages;
    if (args.Has("system")) messages.push_back({"system", args.Get("system")});
    messages.push_back({"user", text});
    text = RenderChat(*tmpl, messages);
    options.parse_special = true;
  } else if (args.Has("chat-template") || args.Has("system")) {
    return Fail("tokenize", "--chat-template and --system need --chat");
  }

  const std::vector<int32_t> ids = (*tok)->Encode(text, options);
  std::string line;
  for (size_t k = 0; k < ids.size(); ++k) absl::StrAppend(&line, k ? " " : "", ids[k]);
  std::printf("%s\n", line.c_str());
  if (args.GetFlag("show-pieces")) {
    for (int32_t id : ids) {
      std::printf("%8d  %s\n", id, Visible((*tok)->token_text(id)).c_str());
    }
    std::printf("%zu tokens (%s)\n", ids.size(), std::string((*tok)->kind()).c_str());
  }
  return 0;
}

}  // namespace kiln::cli

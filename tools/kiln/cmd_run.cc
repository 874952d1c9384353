#include <chrono>
#include <cstdio>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/generator.h"
#include "runtime/executor/program.h"
#include "runtime/executor/speculative.h"
#include "runtime/tokenizer/chat_template.h"
#include "runtime/tokenizer/streaming_decoder.h"
#include "runtime/util/json.h"
#include "tools/kiln/args.h"
#include "tools/kiln/chat_session.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/input_file.h"
#include "tools/kiln/load_program.h"

namespace kiln::cli {
namespace {

JsonValue IdArray(const std::vector<int32_t>& ids) {
  JsonValue a = JsonValue::MakeArray();
  for (int32_t id : ids) a.array().push_back(JsonValue::Int(id));
  return a;
}

}  // namespace

int RunRun(int argc, char** argv) {
  ArgParser args("run", "Generates text with a model on the fastest backend present (or --backend's). MODEL\n"
                        "is a compiled artifact (.kiln) or a GGUF file, compiled in memory first. Streams the\n"
                        "text as it is generated and ends with prompt and generation speed.");
  args.Positional("MODEL", "a .kiln artifact or a .gguf file")
      .Option("prompt", "TEXT", "the prompt", "", "-p")
      .Option("file", "FILE", "read the prompt from FILE instead (-: standard input)", "", "-f")
      .Option("n-predict", "N", "tokens to generate (with --interactive: the most a reply takes)", "64", "-n")
      .Option("temp", "T", "temperature; 0 is greedy", "0.8")
      .Option("top-k", "K", "keep the K most likely tokens (0: off)", "40")
      .Option("top-p", "P", "nucleus sampling threshold (1: off)", "0.95")
      .Option("min-p", "P", "drop tokens below P times the top probability (0: off)", "0.05")
      .Option("repeat-penalty", "R", "repetition penalty over the last 64 tokens (1: off)", "1.0")
      .Option("seed", "N", "random seed", "0")
      .Flag("chat", "wrap the prompt as a user turn of the model's chat template")
      .Option("system", "TEXT", "with --chat or --interactive: a system message")
      .Option("chat-template", "NAME", "with --chat or --interactive: chatml | llama3, overriding the model's")
      .Flag("interactive",
            "chat with the model: each line of standard input is a user message, answered with the whole "
            "conversation so far (the oldest exchanges dropped when it outgrows the context); /exit or the end of "
            "input ends it");
  AddModelOptions(args)
      .Option("output-format", "FORMAT", "text (streamed) or json (one object at the end)", "text")
      .Flag("ignore-eos", "keep generating after an end-of-generation token")
      .Option("draft", "MODEL", "speculative decoding with this smaller model (same vocabulary) as the draft")
      .Option("draft-weights", "FILE", "for a program-only draft artifact: the model file to bind its weights from")
      .Flag("lookup", "speculative decoding with n-gram lookup in the prompt and the text so far as the draft")
      .Option("draft-max", "N",
              "longest draft per step (the draft length adapts below it; at --temp 0 drafting pauses while it "
              "measures slower than plain steps)",
              "8");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;
  const std::string format = args.Get("output-format");
  const bool interactive = args.GetFlag("interactive");
  if (interactive) {
    if (args.Has("prompt") || args.Has("file")) {
      return Fail("run", "--interactive reads the messages from standard input: drop -p and -f");
    }
    if (format == "json") return Fail("run", "--interactive streams text; --output-format json is for one prompt");
    if (args.Has("draft") || args.GetFlag("lookup")) return Fail("run", "--interactive takes no --draft or --lookup");
  } else if (args.Has("prompt") == args.Has("file")) {
    return Fail("run", args.Has("prompt") ? "give -p TEXT or -f FILE, not both" : "missing -p TEXT (or -f FILE)");
  }
  std::string text;
  if (args.Has("file")) {
    absl::StatusOr<std::string> read = ReadInputFile(args.Get("file"), "prompt file");
    if (!read.ok()) return Fail("run", std::string(read.status().message()));
    text = *std::move(read);
  } else {
    text = args.Get("prompt");
  }
  GenerateOptions gen;
  absl::StatusOr<int64_t> n = args.GetInt("n-predict");
  absl::StatusOr<int64_t> top_k = args.GetInt("top-k");
  absl::StatusOr<int64_t> seed = args.GetInt("seed");
  absl::StatusOr<int64_t> threads = args.GetInt("threads");
  absl::StatusOr<double> temp = args.GetDouble("temp");
  absl::StatusOr<double> top_p = args.GetDouble("top-p");
  absl::StatusOr<double> min_p = args.GetDouble("min-p");
  absl::StatusOr<double> penalty = args.GetDouble("repeat-penalty");
  for (const absl::Status& s : {n.status(), top_k.status(), seed.status(), threads.status(), temp.status(),
                                top_p.status(), min_p.status(), penalty.status()}) {
    if (!s.ok()) return Fail("run", std::string(s.message()));
  }
  if (*n < 1) return Fail("run", "-n must be at least 1");
  gen.max_new_tokens = *n;
  gen.sampling.temperature = static_cast<float>(*temp);
  gen.sampling.top_k = static_cast<int32_t>(*top_k);
  gen.sampling.top_p = static_cast<float>(*top_p);
  gen.sampling.min_p = static_cast<float>(*min_p);
  gen.sampling.repetition_penalty = static_cast<float>(*penalty);
  gen.sampling.seed = static_cast<uint64_t>(*seed);
  if (absl::Status s = ValidateSamplingParams(gen.sampling); !s.ok()) return Fail("run", std::string(s.message()));

  const std::string model = args.Get("MODEL");
  absl::StatusOr<Program> program =
      LoadProgram(model, {args.Get("quant"), args.Get("override"), args.Get("kv-type")}, args.Get("weights"));
  if (!program.ok()) return Fail("run", std::string(program.status().message()));
  if (args.Has("draft") && args.GetFlag("lookup")) return Fail("run", "choose one of --draft and --lookup");
  absl::StatusOr<int64_t> draft_max = args.GetInt("draft-max");
  if (!draft_max.ok() || *draft_max < 1) return Fail("run", "--draft-max must be a positive integer");
  absl::StatusOr<Program> draft_program = absl::NotFoundError("no draft");
  if (args.Has("draft")) {
    draft_program = LoadProgram(args.Get("draft"), {}, args.Get("draft-weights"));
    if (!draft_program.ok()) return Fail("run", std::string(draft_program.status().message()));
    const Tokenizer& a = *program->tokenizer;
    const Tokenizer& b = *draft_program->tokenizer;
    if (!a.SameVocabulary(b)) {
      return Fail("run", absl::StrFormat("the draft's vocabulary (%d tokens) differs from the target's (%d tokens): "
                                         "speculative decoding needs the same vocabulary",
                                         b.vocab_size(), a.vocab_size()));
    }
  }
  const Tokenizer& tok = *program->tokenizer;

  if (!args.GetFlag("ignore-eos")) gen.is_end_of_generation = [&tok](int32_t id) { return tok.IsEndOfGeneration(id); };
  std::optional<ChatTemplate> chat;
  if (args.GetFlag("chat") || interactive) {
    absl::StatusOr<ChatTemplate> tmpl = SelectChatTemplate(tok.chat_template(), args.Get("chat-template"));
    if (!tmpl.ok()) return Fail("run", std::string(tmpl.status().message()));
    chat = *tmpl;
  }
  const int64_t context = program->plan.pool.max_tokens;
  std::vector<int32_t> prompt;
  int64_t total = context;  // the KV pages to hold: --interactive's conversation may fill the context
  if (!interactive) {
    EncodeOptions encode{.add_special = true, .parse_special = false};
    if (chat) {
      std::vector<ChatMessage> messages;
      if (args.Has("system")) messages.push_back({"system", args.Get("system")});
      messages.push_back({"user", text});
      text = RenderChat(*chat, messages);
      encode.parse_special = true;
    }
    prompt = tok.Encode(text, encode);
    if (prompt.empty()) return Fail("run", "the prompt encodes to no tokens");
    total = static_cast<int64_t>(prompt.size()) + gen.max_new_tokens;
    if (total > context) {
      return Fail("run", absl::StrFormat("the prompt (%d tokens) plus -n %d exceeds the model's context of %d tokens",
                                         prompt.size(), gen.max_new_tokens, context));
    }
  } else if (gen.max_new_tokens >= context) {
    return Fail("run", absl::StrFormat("-n %d leaves no room for a message in the model's context of %d tokens",
                                       gen.max_new_tokens, context));
  }
  absl::StatusOr<int64_t> device = args.GetInt("device");
  if (!device.ok() || *device < 0) return Fail("run", "--device takes a GPU index (0, 1, ...)");
  BackendOptions exec_options;
  exec_options.backend = args.Get("backend");
  exec_options.device = static_cast<int>(*device);
  exec_options.threads = static_cast<int>(*threads);
  exec_options.num_pages = (total + program->plan.pool.page_size - 1) / program->plan.pool.page_size;
  absl::StatusOr<SelectedBackend> selected = StartBackend(*program, exec_options);
  if (!selected.ok()) return Fail("run", std::string(selected.status().message()));
  if (!selected->reason.empty()) {
    std::fprintf(stderr, "kiln: backend %s (%s)\n", selected->executor->Describe().c_str(), selected->reason.c_str());
  }
  std::unique_ptr<Executor>* executor = &selected->executor;
  if (interactive) {
    const ChatSessionOptions session{*chat, args.Get("system"), gen, context};
    return RunChatSession(**executor, tok, session, stdin, stdout, stderr) == 0 ? 0 : 1;
  }

  StreamingDecoder decoder(tok);
  const bool stream = format == "text";
  if (stream) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  // The generated text is what streaming shows: a continuation keeps its
  // leading space (as llama.cpp's pieces do).
  std::string generated_text;
  auto on_token = [&](int32_t id) {
    const std::string piece = decoder.Push(id);
    generated_text += piece;
    if (!stream) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  absl::StatusOr<GenerateResult> result;
  std::optional<SpeculativeStats> spec_stats;
  std::unique_ptr<Executor> draft_executor;
  if (args.Has("draft") || args.GetFlag("lookup")) {
    std::unique_ptr<DraftSource> source;
    if (args.Has("draft")) {
      // The draft runs on the target's backend (same device).
      BackendOptions draft_options = exec_options;
      draft_options.backend = (*executor)->BackendName();
      draft_options.num_pages =
          (total + *draft_max + draft_program->plan.pool.page_size) / draft_program->plan.pool.page_size;
      absl::StatusOr<SelectedBackend> d = StartBackend(*draft_program, draft_options);
      if (!d.ok()) return Fail("run", absl::StrCat("draft: ", d.status().message()));
      draft_executor = std::move(d->executor);
      source = std::make_unique<DraftModel>(*draft_executor, gen.sampling);
    } else {
      source = std::make_unique<NgramLookupDraft>();
    }
    SpeculativeOptions spec{gen, static_cast<int>(*draft_max)};
    absl::StatusOr<SpeculativeResult> r = GenerateSpeculative(**executor, *source, prompt, spec, on_token);
    if (!r.ok()) return Fail("run", std::string(r.status().message()));
    spec_stats = r->stats;
    result = std::move(r->result);
  } else {
    result = Generate(**executor, prompt, gen, on_token);
  }
  if (!result.ok()) return Fail("run", std::string(result.status().message()));
  const std::string backend = (*executor)->Describe();
  const double prompt_tps = result->prompt_ids.size() / std::max(result->prompt_seconds, 1e-9);
  const size_t decoded = result->ids.size() > 1 ? result->ids.size() - 1 : 0;  // the first comes from prefill
  const double gen_tps = decoded / std::max(result->generate_seconds, 1e-9);
  const std::string rest = decoder.Finish();
  generated_text += rest;
  if (stream) {
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "prompt: %zu tokens, %.2f tok/s | generation: %zu tokens, %.2f tok/s | backend: %s\n",
                 result->prompt_ids.size(), prompt_tps, result->ids.size(), gen_tps, backend.c_str());
    if (spec_stats) {
      std::fprintf(stderr,
                   "speculative: %lld drafted, %lld accepted (%.1f%%), %.2f accepted per drafted step; %lld steps, "
                   "%lld of them plain (drafting did not pay)\n",
                   static_cast<long long>(spec_stats->drafted), static_cast<long long>(spec_stats->accepted),
                   100 * spec_stats->acceptance_rate(), spec_stats->mean_accepted_length(),
                   static_cast<long long>(spec_stats->steps), static_cast<long long>(spec_stats->plain_steps));
    }
    return 0;
  }
  JsonValue out = JsonValue::MakeObject();
  out.Set("prompt_ids", IdArray(result->prompt_ids));
  out.Set("ids", IdArray(result->ids));
  out.Set("text", JsonValue::String(generated_text));
  out.Set("stop_reason", JsonValue::String(result->stop_reason));
  JsonValue timings = JsonValue::MakeObject();
  timings.Set("prompt_seconds", JsonValue::Number(result->prompt_seconds));
  timings.Set("generate_seconds", JsonValue::Number(result->generate_seconds));
  timings.Set("prompt_tokens_per_second", JsonValue::Number(prompt_tps));
  timings.Set("generate_tokens_per_second", JsonValue::Number(gen_tps));
  out.Set("timings", std::move(timings));
  out.Set("backend", JsonValue::String(backend));
  out.Set("kv_type", JsonValue::String(program->plan.pool.f16 ? "f16" : "f32"));
  if (spec_stats) {
    JsonValue spec = JsonValue::MakeObject();
    spec.Set("draft", JsonValue::String(args.Has("draft") ? args.Get("draft") : "ngram-lookup"));
    spec.Set("steps", JsonValue::Int(spec_stats->steps));
    spec.Set("plain_steps", JsonValue::Int(spec_stats->plain_steps));
    spec.Set("drafted", JsonValue::Int(spec_stats->drafted));
    spec.Set("accepted", JsonValue::Int(spec_stats->accepted));
    spec.Set("acceptance_rate", JsonValue::Number(spec_stats->acceptance_rate()));
    spec.Set("mean_accepted_length", JsonValue::Number(spec_stats->mean_accepted_length()));
    out.Set("speculative", std::move(spec));
  }
  std::printf("%s\n", ToJson(out).c_str());
  return 0;
}

}  // namespace kiln::cli

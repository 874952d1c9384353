#include <csignal>
#include <cstdio>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/backend/backend.h"
#include "runtime/serving/engine.h"
#include "runtime/serving/http_server.h"
#include "runtime/serving/kv_page_manager.h"
#include "runtime/serving/model_drafter.h"
#include "runtime/serving/openai_api.h"
#include "runtime/serving/verify_budget.h"
#include "runtime/tokenizer/chat_template.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/load_program.h"

namespace kiln::cli {

int RunServe(int argc, char** argv) {
  ArgParser args("serve", "Serves a model over an OpenAI-compatible HTTP API (/v1/completions,\n"
                          "/v1/chat/completions with streaming, /v1/models, /health, /metrics, a chat page at /),\n"
                          "batching concurrent requests continuously on the chosen backend.");
  args.Positional("MODEL", "a .kiln artifact or a .gguf file")
      .Option("host", "ADDR", "address to listen on (loopback unless you mean otherwise)", "127.0.0.1")
      .Option("port", "N", "TCP port (0: any free port, printed)", "8080")
      .Option("api-key", "KEY", "require 'Authorization: Bearer KEY'")
      .Option("kv-memory", "MIB|P%|auto",
              "KV cache memory: MiB, or % of what is free after the weights (auto: 90% on a GPU, 25% of RAM "
              "on the CPU, at most --max-running full contexts)",
              "auto")
      .Option("token-budget", "N", "tokens per step (chunked prefill size)", "256")
      .Option("decoding-step-budget", "N",
              "while sequences decode, tokens per step (prefill chunks shrink so their next token is not held up; "
              "0: --token-budget)",
              "0")
      .Option("max-running", "N", "sequences batched at once", "64")
      .Option("max-tokens", "N", "largest max_tokens a request may ask for", "4096")
      .Option("max-body", "BYTES", "largest request body", "1048576")
      .Option("threads", "N", "CPU threads (0: all cores)", "0")
      .Option("backend", "NAME", "auto (the fastest present: cuda, vulkan, then cpu) | cpu | cuda | vulkan", "auto")
      .Option("device", "N", "GPU index for the cuda and vulkan backends", "0")
      .Option("weights", "FILE", "for a program-only artifact: the model file to bind the weights from")
      .Option("quant", "TYPE", "when compiling a GGUF: weight storage policy")
      .Option("kv-type", "TYPE",
              "when compiling a GGUF: KV cache element type, f32 | f16 (f16: twice the positions in the same "
              "--kv-memory)")
      .Option("chat-template", "NAME",
              "chat template (chatml, llama3) instead of the model's, or for a model without one")
      .Option("draft", "MODEL", "speculative decoding with this smaller model (same vocabulary) as the draft")
      .Option("draft-weights", "FILE", "for a program-only draft artifact: the model file to bind its weights from")
      .Flag("lookup", "speculative decoding with n-gram lookup in each request's text as the draft")
      .Option("draft-max", "N", "longest draft per sequence and step (it adapts below this)", "8")
      .Option("spec-budget", "N",
              "tokens a step may hold with drafts (auto: the memory-bound range, measured at startup)", "auto");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;
  int64_t port, budget, decoding_budget, running, max_tokens, max_body, threads, draft_max, spec_budget = 0;
  for (auto [flag, out] : {std::pair<const char*, int64_t*>{"port", &port},
                           {"token-budget", &budget}, {"decoding-step-budget", &decoding_budget},
                           {"max-running", &running}, {"max-tokens", &max_tokens},
                           {"max-body", &max_body}, {"threads", &threads}, {"draft-max", &draft_max}}) {
    absl::StatusOr<int64_t> v = args.GetInt(flag);
    if (!v.ok() || *v < 0) return Fail("serve", absl::StrFormat("--%s must be a non-negative integer", flag));
    *out = *v;
  }
  if (port > 65535) return Fail("serve", "--port must be at most 65535");
  if (draft_max < 1 || draft_max > 64) return Fail("serve", "--draft-max must be between 1 and 64");
  if (args.Get("spec-budget") != "auto") {
    absl::StatusOr<int64_t> v = args.GetInt("spec-budget");
    if (!v.ok() || *v < 1) return Fail("serve", "--spec-budget takes a positive number of tokens or auto");
    spec_budget = *v;
  }
  if (args.Has("draft") && args.GetFlag("lookup")) return Fail("serve", "choose one of --draft and --lookup");
  if (args.Has("chat-template")) {
    absl::StatusOr<ChatTemplate> named = SelectChatTemplate("", args.Get("chat-template"));
    if (!named.ok()) return Fail("serve", absl::StrCat("--chat-template: ", named.status().message()));
  }
  absl::StatusOr<Program> program =
      LoadProgram(args.Get("MODEL"), {args.Get("quant"), "", args.Get("kv-type")}, args.Get("weights"));
  if (!program.ok()) return Fail("serve", std::string(program.status().message()));
  const PlanPagePool& pool = program->plan.pool;
  const int64_t page_bytes = pool.page_bytes();
  BackendOptions exec_options;
  const std::string kv_memory = args.Get("kv-memory");
  std::string kv_how;
  if (kv_memory == "auto") {
    exec_options.gpu_kv_fraction = 0.9;
    exec_options.cpu_kv_fraction = 0.25;
    exec_options.max_kv_pages = running * ((pool.max_tokens + pool.page_size - 1) / pool.page_size);
    kv_how = "auto";
  } else if (!kv_memory.empty() && kv_memory.back() == '%') {
    double percent = 0;
    if (!absl::SimpleAtod(kv_memory.substr(0, kv_memory.size() - 1), &percent) || !(percent > 0 && percent <= 100)) {
      return Fail("serve", "--kv-memory P% takes a percentage in (0, 100]");
    }
    exec_options.gpu_kv_fraction = exec_options.cpu_kv_fraction = percent / 100;
    kv_how = absl::StrCat(kv_memory, " of free memory");
  } else {
    absl::StatusOr<int64_t> mib = args.GetInt("kv-memory");
    if (!mib.ok() || *mib < 1) return Fail("serve", "--kv-memory takes MiB (a positive integer), P% or auto");
    exec_options.num_pages = *mib * 1024 * 1024 / page_bytes;
    if (exec_options.num_pages < 1) {
      return Fail("serve", absl::StrFormat("--kv-memory %d MiB is less than one KV page (%.2f MiB)", *mib,
                                           page_bytes / 1048576.0));
    }
    kv_how = absl::StrCat(*mib, " MiB asked");
  }
  absl::StatusOr<int64_t> device = args.GetInt("device");
  if (!device.ok() || *device < 0) return Fail("serve", "--device takes a GPU index (0, 1, ...)");
  exec_options.backend = args.Get("backend");
  exec_options.device = static_cast<int>(*device);
  exec_options.threads = static_cast<int>(threads);
  std::optional<Program> draft_program;
  if (args.Has("draft")) {
    absl::StatusOr<Program> loaded = LoadProgram(args.Get("draft"), {}, args.Get("draft-weights"));
    if (!loaded.ok()) return Fail("serve", absl::StrCat("draft: ", loaded.status().message()));
    draft_program = *std::move(loaded);
    // The draft's pool holds as many tokens as the target's: a pool sized
    // from free memory leaves the draft its share.
    const PlanPagePool& d = draft_program->plan.pool;
    const double share = static_cast<double>(pool.bytes_per_token()) / (pool.bytes_per_token() + d.bytes_per_token());
    exec_options.gpu_kv_fraction *= share;
    exec_options.cpu_kv_fraction *= share;
  }
  absl::StatusOr<SelectedBackend> selected = StartBackend(*program, exec_options);
  if (!selected.ok()) return Fail("serve", std::string(selected.status().message()));
  const int64_t pages = selected->executor->num_pages();
  if (!selected->reason.empty()) {
    std::fprintf(stderr, "kiln: backend %s (%s)\n", selected->executor->Describe().c_str(), selected->reason.c_str());
  }
  std::unique_ptr<Executor>* executor = &selected->executor;
  KvPageManager kv(pages, pool.page_size);

  // Speculation: the draft model runs on the target's backend with a pool
  // for as many tokens as the target's plus every sequence's longest draft.
  std::unique_ptr<StepDrafter> drafter;
  std::unique_ptr<Executor> draft_executor;
  std::unique_ptr<KvPageManager> draft_kv;
  if (draft_program) {
    const Tokenizer& a = *program->tokenizer;
    const Tokenizer& b = *draft_program->tokenizer;
    if (!a.SameVocabulary(b)) {
      return Fail("serve", absl::StrFormat("the draft's vocabulary (%d tokens) differs from the target's (%d "
                                           "tokens): speculative decoding needs the same vocabulary",
                                           b.vocab_size(), a.vocab_size()));
    }
    const int64_t draft_page = draft_program->plan.pool.page_size;
    BackendOptions draft_options = exec_options;
    draft_options.backend = (*executor)->BackendName();
    draft_options.gpu_kv_fraction = draft_options.cpu_kv_fraction = 0;
    draft_options.num_pages = (pages * pool.page_size + running * draft_max + draft_page - 1) / draft_page;
    absl::StatusOr<SelectedBackend> d = StartBackend(*draft_program, draft_options);
    if (!d.ok()) return Fail("serve", absl::StrCat("draft: ", d.status().message()));
    draft_executor = std::move(d->executor);
    draft_kv = std::make_unique<KvPageManager>(draft_options.num_pages, draft_page);
    drafter = std::make_unique<ModelDrafter>(*draft_executor, *draft_kv);
  } else if (args.GetFlag("lookup")) {
    drafter = std::make_unique<LookupStepDrafter>();
  }
  std::string budget_note;
  if (drafter != nullptr && spec_budget == 0) {
    absl::StatusOr<VerifyBudget> measured = MeasureVerifyBudget(**executor, kv, std::max<int64_t>(budget, 1));
    if (!measured.ok()) return Fail("serve", std::string(measured.status().message()));
    spec_budget = measured->tokens;
    budget_note = "; measured step times:";
    for (const StepTiming& t : measured->timings) {
      absl::StrAppend(&budget_note, t.tokens == 1 ? " " : ", ", t.tokens, t.tokens == 1 ? " token " : " tokens ",
                      absl::StrFormat("%.2f", t.seconds * 1e3), " ms");
      if (t.tokens > spec_budget) break;
    }
  }
  SchedulerOptions scheduling{budget, running};
  scheduling.draft_max = static_cast<int>(draft_max);
  scheduling.verify_budget = spec_budget;
  scheduling.decoding_step_budget = decoding_budget;
  Engine engine(**executor, kv, scheduling, drafter.get());
  std::string name = args.Get("MODEL");
  name = name.substr(name.find_last_of('/') + 1);
  OpenAiApi api(engine, *program->tokenizer, name, pool.max_tokens, ApiLimits{max_tokens, 8},
                args.Get("chat-template"));

  HttpServerOptions http;
  http.host = args.Get("host");
  http.port = static_cast<int>(port);
  http.api_key = args.Get("api-key");
  http.limits.max_body_bytes = static_cast<size_t>(max_body);
  HttpServer server(http);
  api.Register(server);

  // SIGINT/SIGTERM end the server; block them before threads start so only
  // sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (absl::Status s = server.Start(); !s.ok()) return Fail("serve", std::string(s.message()));
  if (drafter != nullptr) {
    std::printf("kiln serve: speculative decoding with %s%s (drafts up to %lld tokens, verified within %lld-token "
                "steps%s)\n",
                drafter->name().c_str(), args.Has("draft") ? (" " + args.Get("draft")).c_str() : "",
                static_cast<long long>(draft_max), static_cast<long long>(spec_budget), budget_note.c_str());
  }
  std::printf(
      "kiln serve: listening on http://%s:%d (model %s, backend %s, %lld KV pages of %lld tokens in %s: "
      "%.1f MiB, %s)\n",
      http.host.c_str(), server.port(), name.c_str(), (*executor)->Describe().c_str(), static_cast<long long>(pages),
      static_cast<long long>(pool.page_size), pool.f16 ? "f16" : "f32", pages * page_bytes / 1048576.0, kv_how.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("kiln serve: signal %d, shutting down\n", sig);
  server.Stop();
  engine.Stop();
  return 0;
}

}  // namespace kiln::cli

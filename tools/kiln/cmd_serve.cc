#include <csignal>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "runtime/backend/backend.h"
#include "runtime/serving/engine.h"
#include "runtime/serving/http_server.h"
#include "runtime/serving/kv_page_manager.h"
#include "runtime/serving/openai_api.h"
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
      .Option("kv-memory", "MIB", "memory for the paged KV cache", "256")
      .Option("token-budget", "N", "tokens per step (chunked prefill size)", "256")
      .Option("max-running", "N", "sequences batched at once", "64")
      .Option("max-tokens", "N", "largest max_tokens a request may ask for", "4096")
      .Option("max-body", "BYTES", "largest request body", "1048576")
      .Option("threads", "N", "CPU threads (0: all cores)", "0")
      .Option("backend", "NAME", "auto (the fastest present: cuda, vulkan, then cpu) | cpu | cuda | vulkan", "auto")
      .Option("device", "N", "GPU index for the cuda and vulkan backends", "0")
      .Option("weights", "FILE", "for a program-only artifact: the model file to bind the weights from")
      .Option("quant", "TYPE", "when compiling a GGUF: weight storage policy");
  if (absl::Status s = args.Parse(argc, argv); !s.ok()) return Fail("serve", std::string(s.message()));
  if (args.help_requested()) {
    std::printf("%s", args.Help().c_str());
    return 0;
  }
  int64_t port, kv_mib, budget, running, max_tokens, max_body, threads;
  for (auto [flag, out] : {std::pair<const char*, int64_t*>{"port", &port}, {"kv-memory", &kv_mib},
                           {"token-budget", &budget}, {"max-running", &running}, {"max-tokens", &max_tokens},
                           {"max-body", &max_body}, {"threads", &threads}}) {
    absl::StatusOr<int64_t> v = args.GetInt(flag);
    if (!v.ok() || *v < 0) return Fail("serve", absl::StrFormat("--%s must be a non-negative integer", flag));
    *out = *v;
  }
  if (port > 65535) return Fail("serve", "--port must be at most 65535");
  absl::StatusOr<Program> program = LoadProgram(args.Get("MODEL"), args.Get("quant"), "", args.Get("weights"));
  if (!program.ok()) return Fail("serve", std::string(program.status().message()));
  const PlanPagePool& pool = program->plan.pool;
  const int64_t page_bytes = 2 * pool.layers * pool.page_size * pool.kv_heads * pool.head_dim * 4;
  const int64_t pages = kv_mib * 1024 * 1024 / page_bytes;
  if (pages < 1) return Fail("serve", "--kv-memory is too small for one page");
  absl::StatusOr<int64_t> device = args.GetInt("device");
  if (!device.ok() || *device < 0) return Fail("serve", "--device takes a GPU index (0, 1, ...)");
  BackendOptions exec_options;
  exec_options.backend = args.Get("backend");
  exec_options.device = static_cast<int>(*device);
  exec_options.threads = static_cast<int>(threads);
  exec_options.num_pages = pages;
  absl::StatusOr<SelectedBackend> selected = CreateExecutor(*program, exec_options);
  if (!selected.ok()) return Fail("serve", std::string(selected.status().message()));
  if (!selected->reason.empty()) {
    std::fprintf(stderr, "kiln: backend %s (%s)\n", selected->executor->Describe().c_str(), selected->reason.c_str());
  }
  std::unique_ptr<Executor>* executor = &selected->executor;
  KvPageManager kv(pages, pool.page_size);
  Engine engine(**executor, kv, SchedulerOptions{budget, running});
  std::string name = args.Get("MODEL");
  name = name.substr(name.find_last_of('/') + 1);
  OpenAiApi api(engine, *program->tokenizer, name, pool.max_tokens, ApiLimits{max_tokens, 8});

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
  std::printf("kiln serve: listening on http://%s:%d (model %s, backend %s, %lld KV pages of %lld tokens)\n",
              http.host.c_str(), server.port(), name.c_str(), (*executor)->Describe().c_str(),
              static_cast<long long>(pages), static_cast<long long>(pool.page_size));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("kiln serve: signal %d, shutting down\n", sig);
  server.Stop();
  engine.Stop();
  return 0;
}

}  // namespace kiln::cli

// kiln perplexity: how well a model predicts a text, measured as
// llama.cpp's llama-perplexity does (runtime/executor/perplexity.h), so that
// a model compiled with kiln's quantisation compares with the same file in
// llama.cpp and with its own f16 form.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/perplexity.h"
#include "runtime/util/json.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/input_file.h"
#include "tools/kiln/load_program.h"

namespace kiln::cli {

int RunPerplexity(int argc, char** argv) {
  ArgParser args("perplexity",
                 "Measures a model's perplexity on a text as llama.cpp's llama-perplexity does: the text's tokens\n"
                 "(with BOS where the model adds one) in chunks of -c tokens, each from an empty cache (with BOS\n"
                 "first), the second half of each chunk scored. Prints the running perplexity after each chunk\n"
                 "and the final estimate.");
  args.Positional("MODEL", "a .kiln artifact or a .gguf file")
      .Option("file", "FILE", "the text (-: standard input)", "", "-f")
      .Option("ctx-size", "N", "tokens a chunk (at most the model's context)", "512", "-c")
      .Option("chunks", "N", "evaluate at most N chunks (0: all)", "0")
      .Flag("whole", "the whole text as one sequence, every position scored (it must fit the model's context)")
      .Option("reference", "MODEL",
              "also run this model (same vocabulary; e.g. MODEL's f16 form) and report the mean KL divergence of "
              "MODEL's next-token distributions from its, and how often their most likely tokens agree")
      .Option("reference-weights", "FILE", "for a program-only reference artifact: the model file of its weights");
  AddModelOptions(args).Option("output-format", "FORMAT", "text or json (one object at the end)", "text");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;
  const std::string format = args.Get("output-format");
  if (!args.Has("file")) return Fail("perplexity", "missing -f FILE (the text to score)");
  absl::StatusOr<int64_t> ctx = args.GetInt("ctx-size");
  absl::StatusOr<int64_t> chunks = args.GetInt("chunks");
  absl::StatusOr<int64_t> threads = args.GetInt("threads");
  absl::StatusOr<int64_t> device = args.GetInt("device");
  for (const absl::Status& s : {ctx.status(), chunks.status(), threads.status(), device.status()}) {
    if (!s.ok()) return Fail("perplexity", std::string(s.message()));
  }
  if (*chunks < 0) return Fail("perplexity", "--chunks must be 0 (all) or more");
  if (*device < 0) return Fail("perplexity", "--device takes a GPU index (0, 1, ...)");
  absl::StatusOr<std::string> text = ReadInputFile(args.Get("file"), "text file");
  if (!text.ok()) return Fail("perplexity", std::string(text.status().message()));

  absl::StatusOr<Program> program = LoadProgram(
      args.Get("MODEL"), {args.Get("quant"), args.Get("override"), args.Get("kv-type")}, args.Get("weights"));
  if (!program.ok()) return Fail("perplexity", std::string(program.status().message()));
  const Tokenizer& tok = *program->tokenizer;
  const std::vector<int32_t> ids = PerplexityTokens(tok, *text);
  PerplexityOptions options;
  options.whole = args.GetFlag("whole");
  options.context = options.whole ? static_cast<int64_t>(ids.size()) : *ctx;
  options.max_chunks = *chunks;
  options.bos = PerplexityChunkBos(tok);
  const int64_t model_context = program->plan.pool.max_tokens;
  if (options.context > model_context) {
    return Fail("perplexity", absl::StrFormat("%s (%d tokens) exceeds the model's context of %d tokens%s",
                                              options.whole ? "the text" : "-c", options.context, model_context,
                                              options.whole ? ": drop --whole to score it in chunks" : ""));
  }

  BackendOptions exec_options;
  exec_options.backend = args.Get("backend");
  exec_options.device = static_cast<int>(*device);
  exec_options.threads = static_cast<int>(*threads);
  exec_options.num_pages =
      (std::max<int64_t>(options.context, 1) + program->plan.pool.page_size - 1) / program->plan.pool.page_size;
  absl::StatusOr<SelectedBackend> selected = StartBackend(*program, exec_options);
  if (!selected.ok()) return Fail("perplexity", std::string(selected.status().message()));
  Executor& executor = *selected->executor;
  if (!selected->reason.empty()) {
    std::fprintf(stderr, "kiln: backend %s (%s)\n", executor.Describe().c_str(), selected->reason.c_str());
  }
  absl::StatusOr<Program> reference_program = absl::NotFoundError("no reference");
  std::unique_ptr<Executor> reference;
  if (args.Has("reference")) {
    reference_program = LoadProgram(args.Get("reference"), {}, args.Get("reference-weights"));
    if (!reference_program.ok()) {
      return Fail("perplexity", absl::StrCat("reference: ", reference_program.status().message()));
    }
    const Tokenizer& ref_tok = *reference_program->tokenizer;
    if (!tok.SameVocabulary(ref_tok)) {
      return Fail("perplexity", absl::StrFormat("the reference's vocabulary (%d tokens) differs from the model's (%d "
                                                "tokens): KL divergence compares distributions over one vocabulary",
                                                ref_tok.vocab_size(), tok.vocab_size()));
    }
    // The reference runs on the model's backend (same device).
    BackendOptions ref_options = exec_options;
    ref_options.backend = executor.BackendName();
    ref_options.num_pages = (std::max<int64_t>(options.context, 1) + reference_program->plan.pool.page_size - 1) /
                            reference_program->plan.pool.page_size;
    absl::StatusOr<SelectedBackend> r = StartBackend(*reference_program, ref_options);
    if (!r.ok()) return Fail("perplexity", absl::StrCat("reference: ", r.status().message()));
    reference = std::move(r->executor);
  }
  int64_t chunks_to_run = 1;
  if (!options.whole) {
    const int64_t all = static_cast<int64_t>(ids.size()) / std::max<int64_t>(options.context, 1);
    chunks_to_run = options.max_chunks > 0 ? std::min(all, options.max_chunks) : all;
    std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld, scoring positions %lld..%lld of each\n",
                 ids.size(), static_cast<long long>(chunks_to_run), static_cast<long long>(options.context),
                 static_cast<long long>(options.context / 2), static_cast<long long>(options.context - 2));
  }
  const bool text_out = format == "text";
  const auto start = std::chrono::steady_clock::now();
  auto on_chunk = [&](int64_t chunk, double running) {
    if (chunk == 0 && chunks_to_run > 1) {  // long runs: say how long, as llama-perplexity does
      const double per_chunk = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "perplexity: %.2f s a chunk, ETA %.1f min\n", per_chunk,
                   per_chunk * static_cast<double>(chunks_to_run - 1) / 60.0);
    }
    if (!text_out) return;
    std::printf("[%lld]%.4f,", static_cast<long long>(chunk + 1), running);
    std::fflush(stdout);
  };
  absl::StatusOr<PerplexityResult> r = absl::UnknownError("not run");
  std::optional<KlDivergenceResult> kld;
  if (reference) {
    absl::StatusOr<KlDivergenceResult> k = KlDivergence(*reference, executor, ids, options, on_chunk);
    if (k.ok()) {
      kld = *k;
      r = k->test;
    } else {
      r = k.status();
    }
  } else {
    r = Perplexity(executor, ids, options, on_chunk);
  }
  if (!r.ok()) {
    if (text_out) std::printf("\n");
    return Fail("perplexity", std::string(r.status().message()));
  }
  const double tps = static_cast<double>(r->chunks * options.context) / std::max(r->seconds, 1e-9);
  if (text_out) {
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_error);
    if (kld) {
      std::printf("Reference:      PPL = %.4f +/- %.5f\n", kld->reference.ppl, kld->reference.ppl_error);
      std::printf("Mean KLD: %.6f +/- %.6f\n", kld->mean_kld, kld->kld_error);
      std::printf("Same top: %.3f %%\n", 100 * kld->same_top);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "perplexity: %lld predictions scored in %.2f s (%.1f tokens/s) | backend: %s\n",
                 static_cast<long long>(r->scored), r->seconds, tps, executor.Describe().c_str());
    return 0;
  }
  JsonValue out = JsonValue::MakeObject();
  out.Set("tokens", JsonValue::Int(r->tokens));
  out.Set("context", JsonValue::Int(options.context));
  out.Set("chunks", JsonValue::Int(r->chunks));
  out.Set("scored", JsonValue::Int(r->scored));
  JsonValue running = JsonValue::MakeArray();
  for (double p : r->running_ppl) running.array().push_back(JsonValue::Number(p));
  out.Set("running_ppl", std::move(running));
  out.Set("mean_nll", JsonValue::Number(r->mean_nll));
  out.Set("ppl", JsonValue::Number(r->ppl));
  out.Set("ppl_error", JsonValue::Number(r->ppl_error));
  if (kld) {
    out.Set("reference_ppl", JsonValue::Number(kld->reference.ppl));
    out.Set("reference_ppl_error", JsonValue::Number(kld->reference.ppl_error));
    out.Set("mean_kld", JsonValue::Number(kld->mean_kld));
    out.Set("kld_error", JsonValue::Number(kld->kld_error));
    out.Set("same_top", JsonValue::Number(kld->same_top));
  }
  out.Set("backend", JsonValue::String(executor.Describe()));
  out.Set("seconds", JsonValue::Number(r->seconds));
  out.Set("tokens_per_second", JsonValue::Number(tps));
  std::printf("%s\n", ToJson(out).c_str());
  return 0;
}

}  // namespace kiln::cli

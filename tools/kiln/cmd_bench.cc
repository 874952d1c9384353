// kiln bench: prefill and decode speed of a compiled model on a backend,
// printed beside the physical limit (FLOPs over peak for prefill, bytes over
// bandwidth for decode) and beside the peers' figures on the same card.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/plan_cost.h"
#include "runtime/util/json.h"
#include "runtime/util/thread_cpu_time.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/input_file.h"
#include "tools/kiln/load_program.h"
#include "tools/kiln/peer_figures.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// B sequences, each owning `pages_per_seq` consecutive pages of the pool.
class BenchSequences {
 public:
  BenchSequences(Executor& ex, int64_t batch, int64_t positions)
      : ex_(ex), batch_(batch), pages_per_seq_((positions + ex.page_size() - 1) / ex.page_size()) {}

  // Prefills `prompt` random tokens into every sequence, in steps of at most
  // the largest bucket (one sequence at a time, as chunked prefill does);
  // returns the first generated token of each sequence.
  absl::StatusOr<std::vector<int32_t>> Prefill(int64_t prompt, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(ex_.n_vocab() - 1));
    std::vector<int32_t> next(batch_);
    for (int64_t s = 0; s < batch_; ++s) {
      for (int64_t begin = 0; begin < prompt; begin += ex_.max_step_tokens()) {
        const int64_t end = std::min(prompt, begin + ex_.max_step_tokens());
        std::vector<int32_t> tokens;
        for (int64_t p = begin; p < end; ++p) tokens.push_back(token(rng));
        absl::StatusOr<std::span<const int32_t>> ids = ex_.StepGreedy(PrefillBatch(s, begin, tokens));
        if (!ids.ok()) return ids.status();
        if (end == prompt) next[s] = (*ids)[0];
      }
    }
    return next;
  }

  // One prefill step of sequence s: `tokens` at positions begin, begin + 1...
  StepBatch PrefillBatch(int64_t s, int64_t begin, const std::vector<int32_t>& tokens) const {
    StepBatch b;
    b.tokens = tokens;
    for (size_t i = 0; i < tokens.size(); ++i) b.positions.push_back(static_cast<int32_t>(begin + i));
    const int64_t end = begin + static_cast<int64_t>(tokens.size());
    b.query_starts = {0, static_cast<int32_t>(tokens.size())};
    b.context_lens = {static_cast<int32_t>(end)};
    b.pages_per_seq = static_cast<int32_t>(pages_per_seq_);
    for (int64_t i = 0; i < pages_per_seq_; ++i) b.block_tables.push_back(static_cast<int32_t>(s * pages_per_seq_ + i));
    b.logit_rows = {static_cast<int32_t>(tokens.size() - 1)};
    return b;
  }

  // `steps` decode steps of all sequences together, greedy, starting after
  // `context` positions.
  absl::Status Decode(std::vector<int32_t> next, int64_t context, int64_t steps) {
    for (int64_t step = 0; step < steps; ++step) {
      absl::StatusOr<std::span<const int32_t>> ids = ex_.StepGreedy(DecodeBatch(next, context + step));
      if (!ids.ok()) return ids.status();
      next.assign(ids->begin(), ids->end());
    }
    return absl::OkStatus();
  }

  // One decode step of all sequences: token next[s] at position `position`.
  StepBatch DecodeBatch(const std::vector<int32_t>& next, int64_t position) const {
    StepBatch b;
    b.pages_per_seq = static_cast<int32_t>(pages_per_seq_);
    for (int64_t i = 0; i < batch_ * pages_per_seq_; ++i) b.block_tables.push_back(static_cast<int32_t>(i));
    for (int64_t s = 0; s <= batch_; ++s) b.query_starts.push_back(static_cast<int32_t>(s));
    for (int64_t s = 0; s < batch_; ++s) b.logit_rows.push_back(static_cast<int32_t>(s));
    b.tokens = next;
    b.positions.assign(batch_, static_cast<int32_t>(position));
    b.context_lens.assign(batch_, static_cast<int32_t>(position + 1));
    return b;
  }

 private:
  Executor& ex_;
  int64_t batch_;
  int64_t pages_per_seq_;
};

// "limit 968.4 tok/s (36%)", or where no ceiling is known (no --probe,
// no card notes) "limit - (no ceilings)".
std::string LimitText(double value, double limit) {
  return limit > 0 ? absl::StrFormat("limit %9.1f tok/s (%.0f%%)", limit, 100.0 * value / limit)
                   : std::string("limit         - (no ceilings)");
}

}  // namespace

int RunBench(int argc, char** argv) {
  ArgParser args("bench", "Measures prefill and decode speed of a model on a backend: warm-up, then the median of\n"
                          "--repeats runs. Prints each figure beside its physical limit (prefill: FLOPs over the\n"
                          "matrix peak; decode: bytes of weights and KV cache over the bandwidth) and beside the\n"
                          "peers' figures measured on the same card (../shared/peers). --probe measures the two\n"
                          "ceilings on the device itself; without it they come from the peers' notes.");
  args.Positional("MODEL", "a .kiln artifact (or a .gguf when this kiln has the compiler)")
      .Option("weights", "FILE", "for a program-only artifact: the model file to bind the weights from")
      .Option("backend", "NAME", "auto | cpu | cuda | vulkan", "auto")
      .Option("device", "N", "GPU index", "0")
      .Option("threads", "N", "CPU threads (0: all cores)", "0")
      .Option("prompt", "LIST", "prompt lengths to measure prefill at, comma-separated", "512")
      .Option("gen", "N", "decode steps to time after the first prompt", "128")
      .Option("batch", "N", "sequences decoded together", "1")
      .Option("repeats", "N", "timed runs (the median is reported)", "3")
      .Option("peers", "FILE", "peer figures (markdown tables); default: ../shared/peers/llama.cpp-<backend>-h200.md")
      .Option("output-format", "FORMAT", "text or json", "text")
      .Flag("probe", "measure the device's bandwidth and matrix rate first")
      .Flag("profile", "after decode, time each kernel of one decode step on the GPU (vulkan: timestamps)");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;
  const std::string format = args.Get("output-format");
  std::vector<int64_t> prompts;
  for (absl::string_view p : absl::StrSplit(args.Get("prompt"), ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(p, &n) || n < 1) return Fail("bench", absl::StrCat("--prompt: '", p, "' is not a length"));
    prompts.push_back(n);
  }
  if (prompts.empty()) return Fail("bench", "--prompt needs at least one length");
  int64_t gen = 0, batch = 0, repeats = 0, device = 0, threads = 0;
  for (auto [flag, out, min] : {std::tuple<const char*, int64_t*, int64_t>{"gen", &gen, 0}, {"batch", &batch, 1},
                                {"repeats", &repeats, 1}, {"device", &device, 0}, {"threads", &threads, 0}}) {
    absl::StatusOr<int64_t> v = args.GetInt(flag);
    if (!v.ok() || *v < min) return Fail("bench", absl::StrFormat("--%s must be an integer >= %d", flag, min));
    *out = *v;
  }

  absl::StatusOr<Program> program = LoadProgram(args.Get("MODEL"), {}, args.Get("weights"));
  if (!program.ok()) return Fail("bench", std::string(program.status().message()));
  absl::StatusOr<PlanCost> cost = CostOfPlan(program->plan);
  if (!cost.ok()) return Fail("bench", std::string(cost.status().message()));
  const int64_t longest = *std::max_element(prompts.begin(), prompts.end());
  const int64_t positions = std::max(longest, prompts.front() + gen);
  if (positions > program->plan.pool.max_tokens) {
    return Fail("bench", absl::StrFormat("%d positions exceed the model's context of %d", positions,
                                         program->plan.pool.max_tokens));
  }
  BackendOptions options;
  options.backend = args.Get("backend");
  options.device = static_cast<int>(device);
  options.threads = static_cast<int>(threads);
  const int64_t pages_per_seq = (positions + program->plan.pool.page_size - 1) / program->plan.pool.page_size;
  options.num_pages = batch * pages_per_seq;
  const auto load_start = Clock::now();
  absl::StatusOr<SelectedBackend> selected = StartBackend(*program, options);
  if (!selected.ok()) return Fail("bench", std::string(selected.status().message()));
  Executor& ex = *selected->executor;
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  const bool text = format == "text";
  if (text) {
    std::printf("kiln bench: %s\nbackend: %s%s (loaded in %.2f s)\n", program->description.c_str(), ex.Describe().c_str(),
                selected->reason.empty() ? "" : absl::StrCat(" (", selected->reason, ")").c_str(), load_s);
    std::printf("model: %.3f B parameters, %.2f GB of weights (mostly %s); a decode step streams %.2f GB of "
                "weights + %.1f KB of KV per position\n",
                cost->params / 1e9, cost->weight_bytes / 1e9, cost->dominant_storage.c_str(),
                cost->streamed_weight_bytes / 1e9, cost->kv_bytes_per_position / 1e3);
    std::fflush(stdout);
  }

  // Ceilings: measured here with --probe, else the card's measured figures in the peers' notes.
  const std::string backend = ex.BackendName();
  std::string peers_path = args.Get("peers");
  if (peers_path.empty()) {
    peers_path = backend == "vulkan" ? "../shared/peers/llama.cpp-vulkan-h200.md" : "../shared/peers/llama.cpp-h200.md";
  }
  // The peers' figures hold for their card and model: the H200 and the
  // Llama-3-8B shape (8.03 B parameters) unless --peers names other notes.
  // A CPU run, or another model, has no peer figure to stand beside.
  const bool peers_apply =
      !args.Get("peers").empty() ||
      (backend != "cpu" && absl::StrContains(ex.Describe(), "H200") && std::abs(cost->params / 8.03e9 - 1.0) < 0.02);
  const std::string peers = peers_apply ? ReadInputFile(peers_path).value_or("") : std::string();
  // The card's ceilings live in the CUDA peer's notes, beside the peers file.
  const size_t slash = peers_path.rfind('/');
  const std::string card_path =
      (slash == std::string::npos ? std::string() : peers_path.substr(0, slash + 1)) + "llama.cpp-h200.md";
  const std::string card_notes = ReadInputFile(card_path).value_or("");
  Ceilings ceilings;
  if (args.GetFlag("probe")) {
    absl::StatusOr<Ceilings> probed = ProbeCeilings(ex, options);
    if (!probed.ok()) return Fail("bench", absl::StrCat("--probe: ", probed.status().message()));
    ceilings = *probed;
    ceilings.what = absl::StrCat("measured now: ", ceilings.what);
  } else if (backend != "cpu" && !card_notes.empty() && absl::StrContains(ex.Describe(), "H200")) {
    ceilings.bytes_per_second = FindPeerFigure(card_notes, "device-to-device copy", "median", true).value_or(0) * 1e12;
    ceilings.flops_per_second = FindPeerFigure(card_notes, "bf16 GEMM", "median", true).value_or(0) * 1e12;
    ceilings.what = absl::StrCat("the H200's measured ceilings in ", card_path, " (use --probe to measure)");
  } else {
    ceilings.what = "none (use --probe to measure this machine's)";
  }
  if (text && ceilings.bytes_per_second <= 0 && ceilings.flops_per_second <= 0) {
    std::printf("ceilings: %s\n", ceilings.what.c_str());
  } else if (text) {
    std::printf("ceilings: %.3g GB/s, %.3g TFLOP/s (%s)\n", ceilings.bytes_per_second / 1e9,
                ceilings.flops_per_second / 1e12, ceilings.what.c_str());
  }
  const std::string peer_row = PeerFormatName(cost->dominant_storage);

  JsonValue results = JsonValue::MakeArray();
  BenchSequences seqs(ex, batch, positions);
  // Warm-up: one short prefill and a few decode steps load modules and capture graphs.
  {
    absl::StatusOr<std::vector<int32_t>> next = seqs.Prefill(std::min<int64_t>(prompts.front(), 8), 7);
    if (!next.ok()) return Fail("bench", std::string(next.status().message()));
    if (absl::Status s = seqs.Decode(*next, std::min<int64_t>(prompts.front(), 8), 4); !s.ok()) {
      return Fail("bench", std::string(s.message()));
    }
    if (args.GetFlag("profile")) {
      // Whether the backend can, before the timed runs.
      absl::StatusOr<std::vector<KernelTime>> probe =
          ex.ProfileStep(seqs.DecodeBatch(*next, std::min<int64_t>(prompts.front(), 8) + 4));
      if (!probe.ok()) return Fail("bench", absl::StrCat("--profile: ", probe.status().message()));
    }
  }
  std::vector<int32_t> first_tokens;
  for (int64_t prompt : prompts) {
    std::vector<double> times;
    for (int64_t r = 0; r < repeats; ++r) {
      const auto start = Clock::now();
      absl::StatusOr<std::vector<int32_t>> next = seqs.Prefill(prompt, static_cast<uint32_t>(100 + r));
      if (!next.ok()) return Fail("bench", std::string(next.status().message()));
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      if (prompt == prompts.front()) first_tokens = *next;
    }
    const double s = Median(times);
    const double tps = batch * prompt / s;
    double flops = 0;
    for (int64_t p = 0; p < prompt; ++p) flops += cost->PrefillFlopsPerToken(p);
    const double limit = ceilings.flops_per_second > 0 ? ceilings.flops_per_second * prompt / flops : 0;
    const std::optional<double> peer =
        batch == 1 ? FindPeerFigure(peers, peer_row, absl::StrCat("pp", prompt)) : std::nullopt;
    if (text) {
      std::printf("prefill %5lld tokens x %lld: %9.1f tok/s (%.2f ms)   %s   peer %s\n",
                  static_cast<long long>(prompt), static_cast<long long>(batch), tps, s * 1e3,
                  LimitText(tps, limit).c_str(),
                  peer ? absl::StrFormat("%.0f tok/s (%s pp%d)", *peer, peer_row, prompt).c_str() : "-");
      std::fflush(stdout);
    }
    JsonValue r = JsonValue::MakeObject();
    r.Set("phase", JsonValue::String("prefill"));
    r.Set("tokens", JsonValue::Int(prompt));
    r.Set("batch", JsonValue::Int(batch));
    r.Set("tokens_per_second", JsonValue::Number(tps));
    r.Set("seconds", JsonValue::Number(s));
    r.Set("limit_tokens_per_second", JsonValue::Number(limit));
    if (peer) r.Set("peer_tokens_per_second", JsonValue::Number(*peer));
    results.array().push_back(std::move(r));
  }
  if (gen > 0) {
    std::vector<double> times, host_times;
    for (int64_t r = 0; r < repeats; ++r) {
      const auto start = Clock::now();
      const double cpu_start = ThreadCpuSeconds();
      const std::optional<double> wait_start = ex.DeviceWaitCpuSeconds();
      if (absl::Status st = seqs.Decode(first_tokens, prompts.front(), gen); !st.ok()) {
        return Fail("bench", std::string(st.message()));
      }
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      // The host's own work per step (inputs, launch or submit, reading the
      // ids back): this thread's CPU time less what it spent in device waits.
      if (wait_start) {
        host_times.push_back((ThreadCpuSeconds() - cpu_start - (*ex.DeviceWaitCpuSeconds() - *wait_start)) / gen);
      }
    }
    const double s = Median(times);
    const double tps = batch * gen / s;
    // Bytes of the average step: the weights once, each sequence's KV over its context.
    const double bytes = cost->DecodeBytes(batch, prompts.front() + gen / 2);
    const double limit = ceilings.bytes_per_second > 0 ? batch * ceilings.bytes_per_second / bytes : 0;
    const std::optional<double> peer =
        batch == 1 ? FindPeerFigure(peers, peer_row, absl::StrCat("tg", gen))
                   : FindPeerFigure(peers, peer_row, absl::StrCat("B=", batch));
    if (text) {
      std::printf("decode  %5lld tokens x %lld: %9.1f tok/s (%.3f ms/step)   %s   peer %s\n",
                  static_cast<long long>(gen), static_cast<long long>(batch), tps, s * 1e3 / gen,
                  LimitText(tps, limit).c_str(),
                  peer ? absl::StrFormat("%.0f tok/s (%s %s)", *peer, peer_row,
                                         batch == 1 ? absl::StrCat("tg", gen) : absl::StrCat("B=", batch))
                             .c_str()
                       : "-");
    }
    if (text && !host_times.empty()) {
      std::printf("host CPU per decode step: %.1f us (inputs, %s submit, ids back: the thread's CPU time less "
                  "its waits for the device)\n",
                  Median(host_times) * 1e6, ex.BackendName().c_str());
    }
    JsonValue r = JsonValue::MakeObject();
    r.Set("phase", JsonValue::String("decode"));
    r.Set("tokens", JsonValue::Int(gen));
    r.Set("context", JsonValue::Int(prompts.front()));
    r.Set("batch", JsonValue::Int(batch));
    r.Set("tokens_per_second", JsonValue::Number(tps));
    r.Set("seconds_per_step", JsonValue::Number(s / gen));
    if (!host_times.empty()) r.Set("host_cpu_seconds_per_step", JsonValue::Number(Median(host_times)));
    r.Set("limit_tokens_per_second", JsonValue::Number(limit));
    if (peer) r.Set("peer_tokens_per_second", JsonValue::Number(*peer));
    results.array().push_back(std::move(r));
  }
  JsonValue profile = JsonValue::MakeArray();
  if (args.GetFlag("profile")) {
    // The last timed decode step's position once more (the sequences hold no
    // position past it), with a timestamp per kernel; the kernels summed per
    // template, largest first.
    absl::StatusOr<std::vector<KernelTime>> times =
        ex.ProfileStep(seqs.DecodeBatch(first_tokens, prompts.front() + gen - 1));
    if (!times.ok()) return Fail("bench", absl::StrCat("--profile: ", times.status().message()));
    // Seconds and dispatches per key (largest first) and the total.
    using Rows = std::vector<std::pair<std::string, std::pair<int64_t, double>>>;
    auto summarise = [](const std::vector<KernelTime>& ts, bool by_launch, double* total) {
      std::map<std::string, std::pair<int64_t, double>> m;
      *total = 0;
      for (const KernelTime& t : ts) {
        auto& [count, seconds] = m[by_launch ? absl::StrCat(t.kernel, t.launch.empty() ? "" : ": ", t.launch,
                                                            t.shape.empty() ? "" : " ", t.shape)
                                             : t.kernel];
        ++count;
        seconds += t.seconds;
        *total += t.seconds;
      }
      Rows rows(m.begin(), m.end());
      std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
      return rows;
    };
    auto print = [](const Rows& r, size_t most, double total) {
      for (size_t i = 0; i < r.size() && i < most; ++i) {
        const auto& [kernel, cs] = r[i];
        std::printf("  %-32s %5lld x  %9.1f us  %5.1f%%\n", kernel.c_str(), static_cast<long long>(cs.first),
                    cs.second * 1e6, total > 0 ? 100.0 * cs.second / total : 0.0);
      }
    };
    double total = 0;
    const Rows rows = summarise(*times, false, &total);
    if (text) {
      std::printf("profile of one decode step x %lld (%s time per kernel, %zu dispatches, %.3f ms in all):\n",
                  static_cast<long long>(batch), ex.BackendName() == "cpu" ? "wall" : "GPU", times->size(),
                  total * 1e3);
      print(rows, rows.size(), total);
      std::printf("by launch (largest 10):\n");
      print(summarise(*times, true, &total), 10, total);
      // And a prefill step: sequence 0's first max-step tokens again.
      const int64_t n = std::min<int64_t>(prompts.front(), ex.max_step_tokens());
      absl::StatusOr<std::vector<KernelTime>> prefill =
          ex.ProfileStep(seqs.PrefillBatch(0, 0, std::vector<int32_t>(n, first_tokens[0])));
      if (!prefill.ok()) return Fail("bench", absl::StrCat("--profile: ", prefill.status().message()));
      const Rows prefill_rows = summarise(*prefill, true, &total);
      std::printf("profile of one prefill step of %lld tokens (%.3f ms in all), by launch (largest 10):\n",
                  static_cast<long long>(n), total * 1e3);
      print(prefill_rows, 10, total);
    }
    for (const auto& [kernel, cs] : rows) {
      JsonValue k = JsonValue::MakeObject();
      k.Set("kernel", JsonValue::String(kernel));
      k.Set("dispatches", JsonValue::Int(cs.first));
      k.Set("seconds", JsonValue::Number(cs.second));
      profile.array().push_back(std::move(k));
    }
  }
  if (!text) {
    JsonValue out = JsonValue::MakeObject();
    out.Set("model", JsonValue::String(program->description));
    out.Set("backend", JsonValue::String(ex.Describe()));
    out.Set("params", JsonValue::Int(cost->params));
    out.Set("weight_bytes", JsonValue::Int(cost->weight_bytes));
    out.Set("streamed_weight_bytes", JsonValue::Int(cost->streamed_weight_bytes));
    out.Set("storage", JsonValue::String(cost->dominant_storage));
    out.Set("ceiling_bytes_per_second", JsonValue::Number(ceilings.bytes_per_second));
    out.Set("ceiling_flops_per_second", JsonValue::Number(ceilings.flops_per_second));
    out.Set("ceilings_from", JsonValue::String(ceilings.what));
    out.Set("results", std::move(results));
    if (args.GetFlag("profile")) out.Set("profile", std::move(profile));
    std::printf("%s\n", ToJson(out).c_str());
  }
  return 0;
}

}  // namespace kiln::cli

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/synth_model.h"

namespace kiln::cli {

int RunSynth(int argc, char** argv) {
  std::string presets;
  for (const SynthPreset& p : SynthPresets()) presets += (presets.empty() ? "" : ", ") + p.name;
  ArgParser args("synth", "Writes a Llama-family GGUF with random weights of a realistic scale (std 0.02,\n"
                          "norms near 1) and a small valid SentencePiece-style vocabulary. The output says\n"
                          "it is random in general.name; never mistake it for a trained model.");
  args.Option("preset", "NAME", "model shape: " + presets, "tiny")
      .Option("output", "FILE", "output GGUF path", "", "-o")
      .Option("type", "TYPE", "storage of the 2-D weights: f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k",
              "f16")
      .Option("seed", "N", "random seed", "1")
      .Option("threads", "N", "worker threads (0: all cores)", "0");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;
  if (!args.Has("output")) return Fail("synth", "missing -o FILE");
  absl::StatusOr<SynthPreset> preset = FindSynthPreset(args.Get("preset"));
  if (!preset.ok()) return Fail("synth", std::string(preset.status().message()));
  const std::optional<GgmlType> type = ParseGgmlType(args.Get("type"));
  if (!type) return Fail("synth", absl::StrFormat("unknown --type '%s'", args.Get("type")));
  absl::StatusOr<int64_t> seed = args.GetInt("seed");
  absl::StatusOr<int64_t> threads = args.GetInt("threads");
  if (!seed.ok()) return Fail("synth", std::string(seed.status().message()));
  if (!threads.ok()) return Fail("synth", std::string(threads.status().message()));

  SynthOptions options{*preset, *type, static_cast<uint64_t>(*seed), static_cast<int>(*threads)};
  const std::string path = args.Get("output");
  const auto start = std::chrono::steady_clock::now();
  // A terminal gets one line redrawn per tensor; a log (not a terminal) a
  // line per tenth of the tensors, not hundreds of carriage returns.
  const bool terminal = isatty(fileno(stderr)) != 0;
  absl::StatusOr<SynthReport> report = SynthesizeModel(options, path, [terminal](size_t done, size_t total) {
    if (terminal) {
      std::fprintf(stderr, "\rsynth: tensor %zu/%zu", done, total);
      if (done == total) std::fprintf(stderr, "\n");
    } else if (done == total || done * 10 / total != (done - 1) * 10 / total) {
      std::fprintf(stderr, "synth: tensor %zu/%zu\n", done, total);
    }
  });
  if (!report.ok()) return Fail("synth", std::string(report.status().message()));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& [name, used] : report->fallbacks) {
    std::fprintf(stderr, "synth: %s rows do not fit %s blocks: stored as %s\n", name.c_str(),
                 std::string(GgmlTypeName(*type)).c_str(), std::string(GgmlTypeName(used)).c_str());
  }
  std::printf("wrote %s: preset %s, %s weights, %zu tensors, %.3f B parameters, %.2f GiB of tensor data, %.1f s "
              "(random weights)\n",
              path.c_str(), preset->name.c_str(), std::string(GgmlTypeName(*type)).c_str(), report->tensors,
              report->parameters / 1e9, report->tensor_bytes / 1073741824.0, secs);
  return 0;
}

}  // namespace kiln::cli

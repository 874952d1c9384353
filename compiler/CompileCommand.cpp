//===- CompileCommand.cpp - `kiln compile` --------------------------------===//

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "codegen/codegen.h"
#include "compiler/CompileModel.h"
#include "runtime/executor/artifact_export.h"
#include "runtime/executor/plan.h"
#include "runtime/util/json.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/kernel_cache.h"

namespace kiln::cli {

absl::StatusOr<std::string> CompileToPlanJson(const std::string& model, const CompileChoices& choices) {
  compiler::PipelineOptions options;
  options.quant = choices.quant;
  for (absl::string_view o : absl::StrSplit(choices.overrides, ',', absl::SkipEmpty()))
    options.overrides.emplace_back(o);
  if (!choices.kv_type.empty()) options.kv_type = choices.kv_type;
  options.print_remarks = false;
  absl::StatusOr<compiler::CompiledModel> compiled = compiler::CompileModel(model, options);
  if (!compiled.ok()) return compiled.status();
  return compiled->plan_json;
}

absl::StatusOr<std::vector<uint8_t>> CompileKernelsInMemory(const Program& program, const std::string& target) {
  const std::string cached =
      KernelCachePath(absl::StrCat(program.plan_json, "|", codegen::GeneratorVariant(target)), target);
  if (absl::StatusOr<std::vector<uint8_t>> bytes = ReadCachedKernels(cached); bytes.ok()) {
    std::fprintf(stderr, "kiln: %s kernels from the cache (%s)\n", target.c_str(), cached.c_str());
    return bytes;
  }
  // Whole lines: codegen may print notes meanwhile.
  std::fprintf(stderr, "kiln: compiling %s kernels in memory (kiln compile --target %s -o X.kiln does it once)\n",
               target.c_str(), target.c_str());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<uint8_t>> kernels = codegen::GenerateKernels(program.plan, target);
  if (kernels.ok()) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // A cache that cannot be written costs the next run a compile, nothing more.
    const absl::Status s = WriteCachedKernels(cached, *kernels);
    std::fprintf(stderr, "kiln: %s kernels compiled in %.2f s, %s %s\n", target.c_str(), seconds,
                 s.ok() ? "kept in" : "not cached:", s.ok() ? cached.c_str() : std::string(s.message()).c_str());
  }
  return kernels;
}

namespace {

// The artifact is written to OUT.part and renamed: both must be possible.
absl::Status CheckWritable(const std::string& out) {
  std::error_code ec;
  if (std::filesystem::is_directory(out, ec)) return absl::InvalidArgumentError(absl::StrCat(out, ": is a directory"));
  const std::string part = out + ".part";
  std::FILE* f = std::fopen(part.c_str(), "wb");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat(part, ": cannot create: ", std::strerror(errno)));
  std::fclose(f);
  std::remove(part.c_str());
  return absl::OkStatus();
}

}  // namespace

int RunCompile(int argc, char** argv) {
  ArgParser args("compile", "Imports a model (GGUF file or Hugging Face folder), runs kiln's passes (fusion,\n"
                            "quantization, paged attention, memory planning, plan emission) and writes the\n"
                            "artifact (-o): metadata, final IR, plan, tokenizer and the weights in the storage\n"
                            "the plan gives them, plus the kernels of each GPU --target. --program-only leaves the\n"
                            "weights out: `kiln run` then binds them from the original file (--weights).\n"
                            "--dump-ir shows every stage.");
  args.Positional("MODEL", "a .gguf file or a Hugging Face folder (config.json + safetensors)")
      .Option("output", "FILE", "artifact to write", "", "-o")
      .Option("target", "LIST",
              "comma-separated: cpu | vulkan | cuda:sm_80 | cuda:sm_89 | cuda:sm_90 (the CPU runs any artifact)", "cpu")
      .Flag("program-only", "write plan, kernels and tokenizer but no weights (for big models: bind at load time)")
      .Option("quant", "TYPE", "weight storage: f16|bf16|q8_0|q4_k|int4|int2 (default: keep the file's types)")
      .Option("override", "LIST", "per-tensor storage, comma-separated NAME_SUBSTRING=TYPE")
      .Option("group-size", "N", "elements per scale for int4/int2", "128")
      .Option("page-size", "N", "KV cache page size in tokens", "16")
      .Option("kv-type", "TYPE",
              "KV cache element type: f32 | f16 (half the memory and bytes read a step; "
              "llama.cpp's default)",
              "f32")
      .Option("buckets", "LIST", "token counts to plan the arena for, comma-separated (default 1,2,4,...,512)")
      .Option("max-context", "N", "KV positions per sequence (default: the model's context length)", "0")
      .Option("dump-ir", "WHEN", "after-all: write the IR after import and after every pass")
      .Option("dump-dir", "DIR", "where --dump-ir writes NN-<pass>.mlir", "kiln-ir")
      .Flag("print-pipeline", "print the pass pipeline and exit");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;

  compiler::PipelineOptions options;
  options.quant = args.Get("quant");
  if (args.Has("override")) {
    for (absl::string_view o : absl::StrSplit(args.Get("override"), ',', absl::SkipEmpty())) {
      options.overrides.emplace_back(o);
    }
  }
  for (auto [flag, field] : {std::pair<const char*, int64_t*>{"group-size", &options.group_size},
                             {"page-size", &options.page_size}}) {
    absl::StatusOr<int64_t> v = args.GetInt(flag);
    if (!v.ok()) return Fail("compile", std::string(v.status().message()));
    *field = *v;
  }
  options.kv_type = args.Get("kv-type");
  if (absl::Status s = CheckKvType(options.kv_type); !s.ok()) return Fail("compile", std::string(s.message()));
  if (args.Has("buckets")) {
    for (absl::string_view b : absl::StrSplit(args.Get("buckets"), ',', absl::SkipEmpty())) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(b, &n) || n <= 0) {
        return Fail("compile", absl::StrFormat("--buckets: '%s' is not a positive token count", std::string(b)));
      }
      options.buckets.push_back(n);
    }
  }
  const std::string dump = args.Get("dump-ir");
  if (!dump.empty() && dump != "after-all") return Fail("compile", "--dump-ir takes 'after-all'");
  if (!dump.empty()) options.dump_dir = args.Get("dump-dir");
  const std::string target = args.Get("target");
  std::vector<std::string> gpu_targets;
  for (absl::string_view t : absl::StrSplit(target, ',', absl::SkipEmpty())) {
    if (t != "cpu" && t != "vulkan" && t != "cuda:sm_80" && t != "cuda:sm_89" && t != "cuda:sm_90") {
      return Fail("compile", absl::StrFormat("unknown --target '%s' (cpu, vulkan, cuda:sm_80, cuda:sm_89, cuda:sm_90)",
                                             std::string(t)));
    }
    if (t != "cpu") gpu_targets.emplace_back(t);
  }
  if (args.GetFlag("print-pipeline")) {
    std::printf("%s\n", compiler::DescribePipeline(options).c_str());
    return 0;
  }
  absl::StatusOr<int64_t> max_context = args.GetInt("max-context");
  if (!max_context.ok()) return Fail("compile", std::string(max_context.status().message()));
  // A bad -o fails now, not after minutes of compiling a big model.
  if (args.Has("output")) {
    if (absl::Status s = CheckWritable(args.Get("output")); !s.ok()) return Fail("compile", std::string(s.message()));
  }

  absl::StatusOr<compiler::CompiledModel> compiled =
      compiler::CompileModel(args.Get("MODEL"), options, *max_context);
  if (!compiled.ok()) return Fail("compile", std::string(compiled.status().message()));
  // The runtime's own parser reads the plan back: what compile reports is
  // what run will execute.
  absl::StatusOr<Plan> plan = ParsePlan(compiled->plan_json);
  if (!plan.ok()) return Fail("compile", absl::StrCat("internal error: the exported plan does not parse: ",
                                                      plan.status().message()));
  std::printf("compiled %s for %s: import %.3f s, passes %.3f s, %zu kernel launches per step, %zu weights\n",
              args.Get("MODEL").c_str(), target.c_str(), compiled->import_seconds, compiled->pass_seconds,
              plan->launches.size(), plan->weights.size());
  std::printf("arena per batch bucket:");
  for (size_t k = 0; k < plan->buckets.size(); ++k) {
    std::printf(" %lld tok: %.1f KiB%s", static_cast<long long>(plan->buckets[k]), plan->arena_bytes[k] / 1024.0,
                k + 1 < plan->buckets.size() ? "," : "\n");
  }
  if (!options.dump_dir.empty()) std::printf("IR after each pass written to %s/\n", options.dump_dir.c_str());
  if (!args.Has("output")) {
    std::printf("no -o given: nothing written\n");
    return 0;
  }
  JsonValue meta = JsonValue::MakeObject();
  meta.Set("kiln_version", JsonValue::String(KILN_VERSION_STRING));
  meta.Set("source", JsonValue::String(args.Get("MODEL")));
  meta.Set("target", JsonValue::String(target));
  meta.Set("pipeline", JsonValue::String(compiler::DescribePipeline(options)));
  meta.Set("program_only", JsonValue::Bool(args.GetFlag("program-only")));
  ArtifactContents contents;
  contents.source = args.Get("MODEL");
  contents.plan_json = compiled->plan_json;
  contents.ir_text = compiled->ir_text;
  contents.metadata_json = ToJson(meta, true);
  contents.target = target;
  contents.program_only = args.GetFlag("program-only");
  for (const std::string& t : gpu_targets) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<uint8_t>> kernels = codegen::GenerateKernels(*plan, t);
    if (!kernels.ok()) return Fail("compile", absl::StrCat(t, " kernels: ", kernels.status().message()));
    std::printf("%s kernels: %.1f KiB in %.2f s\n", t.c_str(), kernels->size() / 1024.0,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    contents.kernels.emplace_back(t, *std::move(kernels));
  }
  const std::string out = args.Get("output");
  // A terminal gets one line rewritten in place; a log (CI, a pipe) a line
  // at each quarter.
  const bool tty = isatty(fileno(stderr)) != 0;
  if (absl::Status s = WriteArtifact(out, contents, [tty](size_t done, size_t total) {
        if (tty) {
          std::fprintf(stderr, "\rwriting weights %zu/%zu", done, total);
          if (done == total) std::fprintf(stderr, "\n");
        } else if (done == total || done * 4 / total != (done - 1) * 4 / total) {
          std::fprintf(stderr, "writing weights %zu/%zu\n", done, total);
        }
      });
      !s.ok()) {
    return Fail("compile", std::string(s.message()));
  }
  std::printf("wrote %s (targets %s%s)\n", out.c_str(), target.c_str(),
              contents.program_only ? "; program only: run it with --weights the original file" : "");
  return 0;
}

}  // namespace kiln::cli

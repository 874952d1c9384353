#include <cstdio>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_cat.h"
#include "runtime/artifact/artifact.h"
#include "runtime/backend/backend.h"
#include "runtime/executor/plan.h"
#include "runtime/executor/program.h"
#include "runtime/formats/gguf.h"
#include "runtime/model/model_config.h"
#include "runtime/tokenizer/chat_template.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

namespace kiln::cli {
namespace {

std::string HumanBytes(uint64_t n) {
  if (n >= (1ull << 30)) return absl::StrFormat("%.2f GiB", n / 1073741824.0);
  if (n >= (1ull << 20)) return absl::StrFormat("%.2f MiB", n / 1048576.0);
  if (n >= (1ull << 10)) return absl::StrFormat("%.1f KiB", n / 1024.0);
  return absl::StrFormat("%d B", n);
}

void PrintArchitecture(const GgufFile& g) {
  absl::StatusOr<ModelConfig> c = ModelConfigFromGguf(g);
  if (!c.ok()) {
    const std::string arch = g.GetStringOr("general.architecture", "(none)").value_or("(unreadable)");
    absl::PrintF("architecture: %s (%s)\n", arch.c_str(), std::string(c.status().message()).c_str());
    return;
  }
  absl::PrintF("architecture: %s%s\n", c->architecture.c_str(),
              c->name.empty() ? "" : absl::StrFormat(" \"%s\"", c->name).c_str());
  absl::PrintF("  vocab %d, embedding %d, layers %d, heads %d (kv heads %d, group %d), head dim %d, ffn %d, "
              "context %d\n",
              c->n_vocab, c->n_embd, c->n_layer, c->n_head, c->n_head_kv, c->gqa_group(), c->head_dim, c->n_ff,
              c->n_ctx_train);
  absl::PrintF("  rope: dims %d, theta %g, scaling %s", c->rope_dim, c->rope_theta, c->rope_scaling.type.c_str());
  if (c->rope_scaling.type != "none") absl::PrintF(" x%g", c->rope_scaling.factor);
  absl::PrintF("; rms norm eps %g; tied embeddings %s; qkv bias %s\n", c->norm_eps,
              c->tied_embeddings ? "yes" : "no", c->qkv_bias ? "yes" : "no");
}

void PrintTokenizer(const GgufFile& g) {
  if (!g.Find("tokenizer.ggml.model")) {
    absl::PrintF("tokenizer: none in this file\n");
    return;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(g);
  if (!tok.ok()) {
    absl::PrintF("tokenizer: unusable: %s\n", std::string(tok.status().message()).c_str());
    return;
  }
  const Tokenizer& t = **tok;
  auto token = [&](int32_t id) {
    if (id < 0 || id >= t.vocab_size()) return std::string("none");
    return absl::StrFormat("%d '%s'", id, t.token_text(id));
  };
  std::string chat = "none";
  if (!t.chat_template().empty()) {
    absl::StatusOr<ChatTemplate> tmpl = SelectChatTemplate(t.chat_template());
    chat = tmpl.ok() ? std::string(ChatTemplateName(*tmpl)) : "present, not recognised";
  }
  absl::PrintF("tokenizer: %s, %d tokens, %zu merges\n", std::string(t.kind()).c_str(), t.vocab_size(),
              t.spec().merges.size());
  absl::PrintF("  bos %s, eos %s, unk %s; adds bos %s, eos %s; chat template %s\n", token(t.bos_id()).c_str(),
              token(t.eos_id()).c_str(), token(t.unk_id()).c_str(), t.add_bos() ? "yes" : "no",
              t.add_eos() ? "yes" : "no", chat.c_str());
}

void PrintTensorSummary(const GgufFile& g) {
  struct Group {
    size_t count = 0;
    uint64_t elements = 0, bytes = 0;
  };
  std::map<std::string, Group> by_type;
  Group total;
  for (const GgufTensor& t : g.tensors()) {
    Group& grp = by_type[std::string(GgmlTypeName(t.type))];
    for (Group* x : {&grp, &total}) {
      x->count++;
      x->elements += t.nelements;
      x->bytes += t.nbytes;
    }
  }
  absl::PrintF("tensors: %zu, %llu parameters, %s\n", total.count, static_cast<unsigned long long>(total.elements),
              HumanBytes(total.bytes).c_str());
  absl::PrintF("  %-8s %7s %15s %16s\n", "type", "count", "parameters", "bytes");
  for (const auto& [name, grp] : by_type) {
    absl::PrintF("  %-8s %7zu %15llu %16llu  (%s)\n", name.c_str(), grp.count,
                static_cast<unsigned long long>(grp.elements), static_cast<unsigned long long>(grp.bytes),
                HumanBytes(grp.bytes).c_str());
  }
}

int InspectArtifact(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Artifact>> art = Artifact::Open(path);
  if (!art.ok()) return Fail("inspect", std::string(art.status().message()));
  const Artifact& a = **art;
  absl::PrintF("file: %s (%s, kiln artifact v%d, %d sections, checksums verified)\n", path, HumanBytes(a.file_size()),
               a.version(), a.sections().size());
  absl::PrintF("sections:\n");
  for (const ArtifactSection& s : a.sections()) {
    absl::PrintF("  %-14s %-12s %12d bytes @ %-10d xxh64 %016x\n", SectionKindName(s.kind), s.name, s.bytes.size(),
                 s.offset, s.checksum);
  }
  if (const ArtifactSection* meta = a.Find(SectionKind::kMetadata)) absl::PrintF("metadata: %s\n", meta->text());
  const ArtifactSection* plan_section = a.Find(SectionKind::kPlan);
  if (plan_section == nullptr) return Fail("inspect", path + ": no plan section");
  absl::StatusOr<Plan> plan = ParsePlan(plan_section->text());
  if (!plan.ok()) return Fail("inspect", absl::StrCat(path, ": ", plan.status().message()));
  std::map<std::string, int> kernels;
  for (const PlanLaunch& l : plan->launches) kernels[l.kernel]++;
  absl::PrintF("plan: step function @%s, %d launches per step, %d weights\n", plan->function,
               plan->launches.size(), plan->weights.size());
  for (const auto& [kernel, count] : kernels) absl::PrintF("  %4d x %s\n", count, kernel);
  absl::PrintF("memory plan (arena per batch bucket):");
  for (size_t k = 0; k < plan->buckets.size(); ++k) {
    absl::PrintF(" %d tok: %s%s", plan->buckets[k], HumanBytes(plan->arena_bytes[k]),
                 k + 1 < plan->buckets.size() ? "," : "\n");
  }
  absl::PrintF("kv pool: %d layers x %d kv heads x %d head dim, %s, pages of %d tokens (%s), context %d\n",
               plan->pool.layers, plan->pool.kv_heads, plan->pool.head_dim, plan->pool.f16 ? "f16" : "f32",
               plan->pool.page_size, HumanBytes(plan->pool.page_bytes()), plan->pool.max_tokens);
  int kernel_sections = 0;
  for (const ArtifactSection& s : a.sections()) {
    if (s.kind == SectionKind::kKernels) {
      absl::PrintF("kernels for %s: %s\n%s", s.name, HumanBytes(s.bytes.size()),
                   DescribeKernelBundle(s.name, s.bytes));
      ++kernel_sections;
    }
  }
  if (kernel_sections == 0) absl::PrintF("kernels: none (cpu only: the CPU backend executes the plan)\n");
  std::map<std::string, std::pair<size_t, uint64_t>> by_storage;
  uint64_t total = 0;
  for (const ArtifactWeight& w : a.weights()) {
    auto& e = by_storage[w.storage];
    e.first++;
    e.second += w.nbytes;
    total += w.nbytes;
  }
  absl::PrintF("weights: %d tensors, %s\n", a.weights().size(), HumanBytes(total));
  for (const auto& [storage, e] : by_storage) {
    absl::PrintF("  %-10s %5d tensors %14d bytes (%s)\n", storage, e.first, e.second, HumanBytes(e.second));
  }
  // Weights stored differently from the source file, as the quantize policy chose.
  for (const PlanWeight& w : plan->weights) {
    if (!w.source.empty()) absl::PrintF("  repacked: %s %s -> %s\n", w.name, w.source, w.storage);
  }
  return 0;
}

}  // namespace

int RunInspect(int argc, char** argv) {
  ArgParser args("inspect", "Prints a model file's format, architecture and hyperparameters, tokenizer, and its\n"
                            "tensors grouped by storage type with their total bytes.");
  args.Positional("MODEL", "a GGUF file or a .kiln artifact")
      .Flag("metadata", "also print every metadata key")
      .Flag("tensors", "also list every tensor");
  if (std::optional<int> exit = args.ParseOrExit(argc, argv)) return *exit;
  const std::string path = args.Get("MODEL");
  if (LooksLikeArtifact(path)) return InspectArtifact(path);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return Fail("inspect", std::string(file.status().message()));
  const GgufFile& g = **file;
  absl::PrintF("file: %s (%s, GGUF v%u, alignment %llu, %zu metadata keys)\n", path.c_str(),
              HumanBytes(g.file_size()).c_str(), g.version(), static_cast<unsigned long long>(g.alignment()),
              g.metadata().size());
  PrintArchitecture(g);
  PrintTokenizer(g);
  PrintTensorSummary(g);
  if (args.GetFlag("metadata")) {
    absl::PrintF("metadata:\n");
    for (const auto& [key, value] : g.metadata()) absl::PrintF("  %-44s %s\n", key.c_str(), value.ToString().c_str());
  }
  if (args.GetFlag("tensors")) {
    absl::PrintF("tensor list:\n");
    for (const GgufTensor& t : g.tensors()) {
      std::string dims;
      for (int64_t d : t.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      absl::PrintF("  %-36s %-6s [%s] %llu bytes @ %llu\n", t.name.c_str(), std::string(GgmlTypeName(t.type)).c_str(),
                  dims.c_str(), static_cast<unsigned long long>(t.nbytes),
                  static_cast<unsigned long long>(g.data_offset() + t.offset));
    }
  }
  return 0;
}

}  // namespace kiln::cli

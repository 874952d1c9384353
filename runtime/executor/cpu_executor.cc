#include "runtime/executor/cpu_executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/elementwise.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/norm.h"
#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/rope.h"
#include "runtime/cpu/row_groups.h"
#include "runtime/cpu/rows.h"
#include "runtime/executor/launch_rope.h"
#include "runtime/executor/repack.h"

namespace kiln {
namespace {

absl::Status LaunchError(const PlanLaunch& l, const std::string& what) {
  return absl::InternalError(absl::StrCat("launch '", l.kernel, "': ", what));
}

// MemAvailable (what the kernel could hand out without swapping), or the
// free pages where /proc/meminfo is not readable.
uint64_t AvailableRamBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;  // kB
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// Maps the pages of weights read in place (from the model's mapping) now,
// at load, where the kernel can (MADV_POPULATE_READ, Linux 5.14): left to
// the first step, their page faults made the first prompt look many times
// slower than it is (a 1-token prompt of Qwen2.5-Coder-1.5B took 357 ms).
// Best effort: elsewhere the pages are mapped as they are first read.
void PrefaultWeights(const uint8_t* data, size_t bytes) {
#if defined(MADV_POPULATE_READ)
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || bytes == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~static_cast<uintptr_t>(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ);
#else
  (void)data;
  (void)bytes;
#endif
}

// Whether a weight's q4_K / q6_K rows are read in groups of eight
// (cpu/row_groups.h: streamed near a core's read limit; the int8 path
// only). KILN_CPU_ROW_GROUPS=0 keeps them one by one, to measure one
// against the other.
bool UseRowGroups(cpu::Activations activations, const cpu::WeightStorage& storage, int64_t rows, int64_t cols) {
  static const bool allowed = [] {
    const char* v = std::getenv("KILN_CPU_ROW_GROUPS");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return allowed && activations == cpu::Activations::kInt8 && !storage.grouped && rows >= cpu::kRowGroupRows &&
         cols % 256 == 0 && cpu::HasRowGroupKernel(storage.ggml);
}

// Memory for a weight's row groups, not zeroed (the packing writes every
// byte), 2 MiB-aligned and asked to be backed by huge pages: in 4 KiB pages,
// each cleared by the kernel at its first write, they had taken 1.7 s of
// Qwen2.5-Coder-1.5B's load. Null where there is not that much memory.
uint8_t* AllocateRowGroups(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
#if defined(MADV_HUGEPAGE)
  if (p != nullptr) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return static_cast<uint8_t*>(p);
}

// Gives back the pages of a weight whose row groups now hold it, where they
// are a read-only mapping of the model file: MADV_DONTNEED takes them out of
// this process (its resident set no longer counts the model twice: 2.86 GB
// against 1.56 for Qwen2.5-Coder-1.5B Q4_K_M with MADV_COLD, which only
// ranked them for reclaim) and leaves them in the page cache, so the next
// load does not read the model from disk again (MADV_PAGEOUT did: 1.7 s
// against 0.6). A later read (a tail row, an embedding row) maps them again
// from the file. Bytes held in memory (a parsed buffer) are left alone:
// dropping anonymous pages would zero them.
void DropMappedWeightPages(const WeightBytes& src) {
  if (!src.file_mapped) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0 || src.data.size() < static_cast<size_t>(page)) return;
  // Whole pages inside the range only: its neighbours may still be in use.
  const uintptr_t first = reinterpret_cast<uintptr_t>(src.data.data());
  const uintptr_t begin = (first + page - 1) & ~static_cast<uintptr_t>(page - 1);
  const uintptr_t end = (first + src.data.size()) & ~static_cast<uintptr_t>(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuExecutor>> CpuExecutor::Create(Plan plan, const WeightSource& weights,
                                                                  const CpuExecutorOptions& options) {
  std::unique_ptr<CpuExecutor> ex(new CpuExecutor(std::move(plan), options.threads));
  ex->activations_ = options.activations;
  const Plan& p = ex->plan_;
  for (const PlanWeight& w : p.weights) {
    absl::StatusOr<WeightBytes> src = weights(w.name);
    if (!src.ok()) return src.status();
    absl::StatusOr<cpu::WeightStorage> want = cpu::ParseWeightStorage(w.storage);
    if (!want.ok()) return absl::InvalidArgumentError(absl::StrCat("weight '", w.name, "': ", want.status().message()));
    BoundWeight b;
    b.rows = w.shape.size() == 2 ? w.shape[0] : 1;
    b.cols = w.shape.back();
    const std::optional<uint64_t> src_row = src->storage.RowBytes(b.cols);
    if (!src_row || *src_row * b.rows != src->data.size()) {
      return absl::InvalidArgumentError(absl::StrFormat("weight '%s': %d bytes of %s do not hold the plan's [%d, %d]",
                                                        w.name, src->data.size(), src->storage.Name(), b.rows, b.cols));
    }
    const bool grouped = w.shape.size() == 2 && UseRowGroups(options.activations, *want, b.rows, b.cols);
    if (w.shape.size() == 1) {
      // Vectors (norm gains, biases) are read as f32 by every kernel.
      b.storage = cpu::WeightStorage::Ggml(GgmlType::kF32);
      b.owned.resize(b.cols * sizeof(float));
      std::span<float> out(reinterpret_cast<float*>(b.owned.data()), b.cols);
      if (absl::Status s = cpu::DequantizeRow(src->storage, src->data, out); !s.ok()) return s;
      b.data = b.owned.data();
    } else if (src->storage.Name() != want->Name()) {
      absl::StatusOr<std::vector<uint8_t>> repacked = RepackWeight(src->storage, *want, b.rows, b.cols, src->data);
      if (!repacked.ok()) {
        return absl::Status(repacked.status().code(), absl::StrCat("weight '", w.name, "': ", repacked.status().message()));
      }
      b.storage = *want;
      b.owned = *std::move(repacked);
      b.data = b.owned.data();
    } else {
      b.storage = *want;
      b.data = src->data.data();
      if (!grouped) PrefaultWeights(b.data, src->data.size());
    }
    if (grouped) {
      const int64_t groups = b.rows / cpu::kRowGroupRows;
      const size_t bytes = static_cast<size_t>(groups * cpu::RowGroupBytes(b.storage.ggml, b.cols));
      b.row_groups.reset(AllocateRowGroups(bytes));
      if (b.row_groups == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("weight '%s': no memory for its %d bytes of row groups", w.name, bytes));
      }
      uint8_t* out = b.row_groups.get();
      ex->pool_.ParallelFor(groups, 64, [&](int64_t first, int64_t last) {
        cpu::PackRowGroups(b.storage.ggml, b.data, b.cols, first, last, out);
      });
      if (b.owned.empty()) DropMappedWeightPages(*src);
    }
    ex->weights_.emplace(w.name, std::move(b));
  }
  const JsonValue* vocab = p.model.Find("n_vocab");
  if (vocab == nullptr || !vocab->int_value()) return absl::InvalidArgumentError("plan: model.n_vocab is missing");
  ex->n_vocab_ = *vocab->int_value();
  ex->arena_.assign(p.arena_bytes.back(), 0);
  const int64_t needed = (p.pool.max_tokens + p.pool.page_size - 1) / p.pool.page_size;
  ex->num_pages_ = options.num_pages > 0 ? options.num_pages : needed;
  if (options.num_pages == 0 && options.kv_fraction > 0) {
    absl::StatusOr<int64_t> pages = KvPagesForFreeMemory(AvailableRamBytes(), options.kv_fraction,
                                                         p.pool.page_bytes(), options.max_kv_pages, "available RAM");
    if (!pages.ok()) return pages.status();
    ex->num_pages_ = *pages;
  }
  const int64_t per_layer = ex->num_pages_ * p.pool.page_size * p.pool.kv_heads * p.pool.head_dim;
  if (p.pool.f16) {
    ex->kv_f16_.assign(static_cast<size_t>(2 * p.pool.layers * per_layer), 0);
  } else {
    ex->kv_.assign(static_cast<size_t>(2 * p.pool.layers * per_layer), 0.0f);
  }
  return ex;
}

bool CpuExecutor::UsesIntegerKernels() const {
  if (activations_ != cpu::Activations::kInt8 || cpu::DetectCpuIsa() != cpu::CpuIsa::kAvx2) return false;
  for (const auto& [name, w] : weights_) {
    if (!w.storage.grouped && cpu::Q8RowDot(w.storage.ggml)) return true;
  }
  return false;
}

std::string CpuExecutor::Describe() const {
  // The types whose rows were repacked in groups of eight at load.
  std::set<std::string> grouped;
  for (const auto& [name, w] : weights_) {
    if (w.row_groups != nullptr) grouped.insert(w.storage.Name());
  }
  return absl::StrFormat(
      "cpu (%s, %d threads%s%s)", cpu::CpuIsaName(cpu::DetectCpuIsa()), pool_.num_threads(),
      UsesIntegerKernels()
          ? absl::StrCat(", int8 activations (", std::string(cpu::Q8KernelName(cpu::BestQ8Kernel())), ")")
          : std::string(),
      grouped.empty() ? std::string() : absl::StrCat(", ", absl::StrJoin(grouped, "/"), " rows in groups of 8"));
}

absl::StatusOr<size_t> CpuExecutor::RunLaunches(const StepBatch& batch, std::vector<KernelTime>* times) {
  absl::StatusOr<size_t> bucket = ValidateStepBatch(plan_, num_pages_, batch);
  if (!bucket.ok()) return bucket.status();
  rows_at_.clear();
  for (const PlanLaunch& launch : plan_.launches) {
    // The clock only when profiling: Step runs every launch without it.
    const auto start = times != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (absl::Status s = RunLaunch(launch, batch, *bucket); !s.ok()) return s;
    if (times == nullptr) continue;
    KernelTime t{launch.kernel, "", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                 ""};
    // A matmul's weights: their rows (added over a fused q, k, v) x columns.
    int64_t rows = 0, cols = 0;
    for (const PlanBinding& b : launch.bindings) {
      auto w = weights_.find(b.name);
      if (b.kind != PlanBinding::Kind::kWeight || !b.role.starts_with("weight") || w == weights_.end()) continue;
      rows += w->second.rows;
      cols = w->second.cols;
    }
    if (rows > 0) t.shape = absl::StrCat(rows, "x", cols);
    times->push_back(std::move(t));
  }
  return bucket;
}

absl::StatusOr<std::span<const float>> CpuExecutor::Step(const StepBatch& batch) {
  absl::StatusOr<size_t> bucket = RunLaunches(batch, nullptr);
  if (!bucket.ok()) return bucket.status();
  const PlanBinding& out = plan_.results.front();
  const float* logits = reinterpret_cast<const float*>(arena_.data() + out.arena[*bucket]);
  return std::span<const float>(logits, batch.logit_rows.size() * n_vocab_);
}

absl::StatusOr<std::vector<KernelTime>> CpuExecutor::ProfileStep(const StepBatch& batch) {
  std::vector<KernelTime> times;
  if (absl::StatusOr<size_t> bucket = RunLaunches(batch, &times); !bucket.ok()) return bucket.status();
  return times;
}

absl::Status CpuExecutor::RunLaunch(const PlanLaunch& l, const StepBatch& batch, size_t bucket) {
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  auto arena = [&](const std::string& role) -> float* {
    const PlanBinding* b = l.Find(role);
    if (b == nullptr || b->kind != PlanBinding::Kind::kArena) return nullptr;
    return reinterpret_cast<float*>(arena_.data() + b->arena[bucket]);
  };
  // Rows of an activation: what the op that wrote it produced (T unless a
  // gather_rows picked fewer).
  auto rows_of = [&](const std::string& role) -> int64_t {
    const PlanBinding* b = l.Find(role);
    auto it = b ? rows_at_.find(b->arena[bucket]) : rows_at_.end();
    return it == rows_at_.end() ? T : it->second;
  };
  auto wrote = [&](const std::string& role, int64_t rows) {
    if (const PlanBinding* b = l.Find(role)) rows_at_[b->arena[bucket]] = rows;
  };
  auto weight = [&](const std::string& role) -> const BoundWeight* {
    const PlanBinding* b = l.Find(role);
    if (b == nullptr || b->kind != PlanBinding::Kind::kWeight) return nullptr;
    auto it = weights_.find(b->name);
    return it == weights_.end() ? nullptr : &it->second;
  };
  auto matrix = [](const BoundWeight& w) {
    return cpu::WeightMatrix{w.storage, w.data, w.rows, w.cols, w.row_groups.get()};
  };
  // y = x W^T for `rows` token rows, with this executor's activations.
  auto matmul = [&](const float* x, int64_t rows, const BoundWeight& w, float* y) {
    return cpu::Matmul(x, rows, matrix(w), y, pool_, cpu::DetectCpuIsa(), activations_);
  };
  auto vec = [](const BoundWeight& w) { return reinterpret_cast<const float*>(w.data); };

  const std::string& op = l.op;
  if (op == "embedding") {
    const BoundWeight* table = weight("table");
    float* out = arena("result");
    if (!table || !out) return LaunchError(l, "needs table and result");
    wrote("result", T);
    return cpu::EmbeddingLookup(matrix(*table), batch.tokens.data(), T, out);
  }
  if (op == "rms_norm") {
    const BoundWeight* gamma = weight("gamma");
    float* in = arena("input");
    float* out = arena("result");
    absl::StatusOr<double> eps = l.Float("eps");
    if (!gamma || !in || !out || !eps.ok()) return LaunchError(l, "needs input, gamma, result and eps");
    const int64_t rows = rows_of("input");
    cpu::RmsNorm(in, rows, gamma->cols, vec(*gamma), *eps, out);
    wrote("result", rows);
    return absl::OkStatus();
  }
  if (op == "matmul") {
    const BoundWeight* w = weight("weight");
    float* in = arena("input");
    float* out = arena("result");
    if (!w || !in || !out) return LaunchError(l, "needs input, weight and result");
    const int64_t rows = rows_of("input");
    wrote("result", rows);
    return matmul(in, rows, *w, out);
  }
  if (op == "fused_matmul") {
    float* in = arena("input");
    absl::StatusOr<std::string> epilogue = l.String("epilogue");
    if (!in || !epilogue.ok()) return LaunchError(l, "needs input and epilogue");
    const int64_t rows = rows_of("input");
    std::vector<const BoundWeight*> ws;
    for (int i = 0;; ++i) {
      const BoundWeight* w = weight(absl::StrCat("weight", i));
      if (!w) break;
      ws.push_back(w);
    }
    if (ws.empty()) return LaunchError(l, "has no weights");
    const int64_t k = ws[0]->cols;
    // The norm prologue writes a scratch copy: the input may still be live.
    const float* x = in;
    size_t scratch_needed = 0;
    if (weight("norm")) scratch_needed += rows * k;
    if (*epilogue != "none") scratch_needed += rows * ws[0]->rows * ws.size();
    if (scratch_.size() < scratch_needed) scratch_.resize(scratch_needed);
    float* scratch = scratch_.data();
    if (const BoundWeight* g = weight("norm")) {
      absl::StatusOr<double> eps = l.Float("eps");
      if (!eps.ok()) return eps.status();
      cpu::RmsNorm(in, rows, k, vec(*g), *eps, scratch);
      x = scratch;
      scratch += rows * k;
    }
    if (*epilogue == "none") {
      for (size_t i = 0; i < ws.size(); ++i) {
        const std::string role = absl::StrCat("result", i);
        float* out = arena(role);
        if (!out) return LaunchError(l, "missing " + role);
        if (absl::Status s = matmul(x, rows, *ws[i], out); !s.ok()) return s;
        wrote(role, rows);
      }
      return absl::OkStatus();
    }
    float* out = arena("result0");
    if (!out) return LaunchError(l, "missing result0");
    const int64_t n = ws[0]->rows;
    if (*epilogue == "silu_mul") {
      if (ws.size() != 2) return LaunchError(l, "silu_mul needs two weights");
      float* gate = scratch;
      float* up = scratch + rows * n;
      if (absl::Status s = matmul(x, rows, *ws[0], gate); !s.ok()) return s;
      if (absl::Status s = matmul(x, rows, *ws[1], up); !s.ok()) return s;
      cpu::SiluMul(gate, up, rows * n, out);
    } else if (*epilogue == "residual_add") {
      float* residual = arena("residual");
      if (!residual) return LaunchError(l, "residual_add needs a residual");
      if (absl::Status s = matmul(x, rows, *ws[0], scratch); !s.ok()) return s;
      cpu::Add(scratch, residual, rows * n, out);
    } else {
      return LaunchError(l, "unknown epilogue " + *epilogue);
    }
    wrote("result0", rows);
    return absl::OkStatus();
  }
  if (op == "bias_add") {
    const BoundWeight* b = weight("bias");
    float* in = arena("input");
    float* out = arena("result");
    if (!b || !in || !out) return LaunchError(l, "needs input, bias and result");
    const int64_t rows = rows_of("input");
    cpu::BiasAdd(in, rows, b->cols, vec(*b), out);
    wrote("result", rows);
    return absl::OkStatus();
  }
  if (op == "silu" || op == "mul" || op == "add") {
    const bool unary = op == "silu";
    float* a = arena(unary ? "input" : "lhs");
    float* b = unary ? nullptr : arena("rhs");
    float* out = arena("result");
    absl::StatusOr<int64_t> width = l.Int("width");
    if (!a || !out || (!unary && !b) || !width.ok()) return LaunchError(l, "needs its operands, result and width");
    const int64_t rows = rows_of(unary ? "input" : "lhs");
    if (op == "silu") cpu::Silu(a, rows * *width, out);
    if (op == "mul") cpu::Mul(a, b, rows * *width, out);
    if (op == "add") cpu::Add(a, b, rows * *width, out);
    wrote("result", rows);
    return absl::OkStatus();
  }
  if (op == "gather_rows") {
    float* in = arena("input");
    float* out = arena("result");
    absl::StatusOr<int64_t> width = l.Int("width");
    if (!in || !out || !width.ok()) return LaunchError(l, "needs input, result and width");
    const int64_t r = static_cast<int64_t>(batch.logit_rows.size());
    wrote("result", r);
    return cpu::GatherRows(in, rows_of("input"), *width, batch.logit_rows.data(), r, out);
  }
  if (op == "argmax") {
    float* in = arena("input");
    float* out = arena("result");
    absl::StatusOr<int64_t> width = l.Int("width");
    if (!in || !out || !width.ok()) return LaunchError(l, "needs input, result and width");
    const int64_t rows = rows_of("input");
    cpu::ArgmaxRows(in, rows, *width, reinterpret_cast<int32_t*>(out));
    wrote("result", rows);
    return absl::OkStatus();
  }
  if (op == "rope" || op == "paged_attention") {
    return RunAttentionOrRope(l, batch, bucket);
  }
  return LaunchError(l, "the CPU backend has no kernel for this op");
}

absl::Status CpuExecutor::RunAttentionOrRope(const PlanLaunch& l, const StepBatch& batch, size_t bucket) {
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  auto arena = [&](const std::string& role) -> float* {
    const PlanBinding* b = l.Find(role);
    if (b == nullptr || b->kind != PlanBinding::Kind::kArena) return nullptr;
    return reinterpret_cast<float*>(arena_.data() + b->arena[bucket]);
  };
  absl::StatusOr<int64_t> heads = l.Int("num_heads");
  absl::StatusOr<int64_t> head_dim = l.Int("head_dim");
  if (!heads.ok()) return heads.status();
  if (!head_dim.ok()) return head_dim.status();

  if (l.op == "rope") {
    float* in = arena("input");
    float* out = arena("result");
    if (!in || !out) return LaunchError(l, "needs input and result");
    absl::StatusOr<cpu::RopeParams> rope = LaunchRope(l);
    if (!rope.ok()) return rope.status();
    if (out != in) std::memcpy(out, in, sizeof(float) * T * *heads * *head_dim);
    if (const PlanBinding* b = l.Find("result")) rows_at_[b->arena[bucket]] = T;
    return cpu::Rope(out, T, *heads, *head_dim, batch.positions.data(), *rope);
  }

  float* q = arena("q");
  float* k = arena("k");
  float* v = arena("v");
  float* out = arena("result");
  absl::StatusOr<int64_t> kv_heads = l.Int("num_kv_heads");
  absl::StatusOr<int64_t> layer = l.Int("layer");
  absl::StatusOr<double> scale = l.Float("scale");
  if (!q || !k || !v || !out || !kv_heads.ok() || !layer.ok() || !scale.ok()) {
    return LaunchError(l, "needs q, k, v, result, num_kv_heads, layer and scale");
  }
  const int64_t qw = *heads * *head_dim, kw = *kv_heads * *head_dim;
  if (l.constants.Find("rope_theta")) {
    // Rope in the attention front: rotate copies, the arena's q and k stay as the matmul wrote them.
    absl::StatusOr<cpu::RopeParams> rope = LaunchRope(l);
    if (!rope.ok()) return rope.status();
    if (scratch_.size() < static_cast<size_t>(T * (qw + kw))) scratch_.resize(T * (qw + kw));
    float* qr = scratch_.data();
    float* kr = qr + T * qw;
    std::memcpy(qr, q, sizeof(float) * T * qw);
    std::memcpy(kr, k, sizeof(float) * T * kw);
    if (absl::Status s = cpu::Rope(qr, T, *heads, *head_dim, batch.positions.data(), *rope); !s.ok()) return s;
    if (absl::Status s = cpu::Rope(kr, T, *kv_heads, *head_dim, batch.positions.data(), *rope); !s.ok()) return s;
    q = qr;
    k = kr;
  }
  cpu::AttentionBatch ab;
  ab.q = q;
  ab.k = k;
  ab.v = v;
  ab.tokens = T;
  ab.positions = batch.positions.data();
  ab.num_seqs = static_cast<int64_t>(batch.context_lens.size());
  ab.query_starts = batch.query_starts.data();
  ab.context_lens = batch.context_lens.data();
  ab.block_tables = batch.block_tables.data();
  ab.max_pages = batch.pages_per_seq;
  cpu::AttentionParams params{*layer, *heads, static_cast<float>(*scale)};
  cpu::PagePool pool{plan_.pool.f16 ? nullptr : kv_.data(),
                     plan_.pool.f16 ? kv_f16_.data() : nullptr,
                     plan_.pool.layers,
                     num_pages_,
                     plan_.pool.page_size,
                     plan_.pool.kv_heads,
                     plan_.pool.head_dim};
  if (const PlanBinding* b = l.Find("result")) rows_at_[b->arena[bucket]] = T;
  return cpu::PagedAttention(ab, params, pool, out, pool_);
}

}  // namespace kiln

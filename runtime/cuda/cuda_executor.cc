#include "runtime/cuda/cuda_executor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels-templates/cuda/kernel_abi.h"
#include "runtime/cpu/rope.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/cuda/cuda_bundle.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/kernel_calls.h"
#include "runtime/executor/launch_rope.h"
#include "runtime/executor/repack.h"
#include "runtime/util/thread_cpu_time.h"

namespace kiln::cuda {
namespace {

using namespace cuda_abi;

constexpr uint64_t kAlign = 256;
uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

absl::Status LaunchError(const PlanLaunch& l, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("launch '", l.kernel, "': ", what));
}

// A KILN_CUDA_* switch of a kernel path that is on unless set to "0".
bool SwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != "0";
}

// What a rope table depends on (not the pair style: the angles are the same).
using RopeTableKey = std::tuple<double, double, int64_t>;
RopeTableKey RopeKey(const cpu::RopeParams& r) { return {r.theta, r.linear_factor, r.dims}; }

// Where the step inputs sit in the device input buffer (in int32s). The
// layout is fixed per executor, so captured graphs keep valid pointers;
// block tables come last so a step copies only the rows it uses.
struct InputLayout {
  int64_t max_tokens = 0, max_seqs = 0, pages_stride = 0;
  int64_t counts = 0, tokens = 0, positions = 0, logit_rows = 0, query_starts = 0, context_lens = 0,
          block_tables = 0, total = 0;
  static InputLayout For(int64_t max_tokens, int64_t max_seqs, int64_t pages_stride) {
    InputLayout l;
    l.max_tokens = max_tokens;
    l.max_seqs = max_seqs;
    l.pages_stride = pages_stride;
    l.counts = 0;
    l.tokens = 4;
    l.positions = l.tokens + max_tokens;
    l.logit_rows = l.positions + max_tokens;
    l.query_starts = l.logit_rows + max_tokens;
    l.context_lens = l.query_starts + max_seqs + 1;
    l.block_tables = l.context_lens + max_seqs;
    l.total = l.block_tables + max_seqs * pages_stride;
    return l;
  }
};

class CudaExecutor final : public Executor {
 public:
  ~CudaExecutor() override;
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const Program& program, const BackendOptions& options);

  absl::StatusOr<std::span<const float>> Step(const StepBatch& batch) override;
  // The argmax of each logit row on the device: R ids cross to the host
  // instead of R x n_vocab logits.
  absl::StatusOr<std::span<const int32_t>> StepGreedy(const StepBatch& batch) override;
  std::optional<double> DeviceWaitCpuSeconds() const override { return wait_cpu_seconds_; }
  std::string Describe() const override {
    std::string d = absl::StrFormat("cuda (%s, sm_%d, %d SMs", context_->name(), context_->sm(), context_->multiprocessors());
    if (table_bytes_ > 0) absl::StrAppendFormat(&d, "; q4_K decode copies: %.2f GiB", table_bytes_ / 1073741824.0);
    if (tables_left_out_) absl::StrAppend(&d, "; q4_K decode copies left out for memory");
    if (!tile_int8_) absl::StrAppend(&d, "; q4_K steps of 2-63 tokens on matmul_tile_tc_kernel");
    if (resident_f16_bytes_ > 0) {
      absl::StrAppendFormat(&d, "; f16 copy of the weights for prefill: %.1f GiB", resident_f16_bytes_ / 1073741824.0);
    }
    return d + ")";
  }
  const Plan& plan() const override { return plan_; }
  int64_t num_pages() const override { return num_pages_; }

 private:
  // cuStreamSynchronize on the step's stream, its thread CPU time (the
  // driver may spin) counted in wait_cpu_seconds_.
  CUresult WaitForStep() {
    const double start = ThreadCpuSeconds();
    const CUresult r = api_->cuStreamSynchronize(stream_);
    wait_cpu_seconds_ += ThreadCpuSeconds() - start;
    return r;
  }

  struct DeviceWeight {
    std::string storage;
    int64_t rows = 1, cols = 0;
    uint64_t row_bytes = 0;
    CUdeviceptr ptr = 0;
    // q4_K weights of matmuls: their decode copy, codes and scale products
    // (q4k_scale_table_kernel, kernel_abi.h's Q4KTableRowBytes), or 0.
    CUdeviceptr table = 0;
    bool wants_table = false;  // a q4_K matmul weight: gets a copy where memory allows
  };
  // The resolved kernels of one launch, ready to record.
  struct ResolvedCall {
    KernelCall call;
    std::vector<CUfunction> functions;  // per name
    // Where this call's weights sit decoded to f16 in resident_f16_ (halves),
    // decoded once at load for the prefill matmul; -1: decoded per step.
    int64_t resident_f16 = -1;
    unsigned stream_smem = 0;  // matmul_stream_kernel's dynamic shared memory, where it runs
  };

  // A weight's bytes on their way to the device: converted (owned) or the
  // source's own bytes (a view: no host copy of large weights).
  struct WeightUpload {
    uint64_t offset = 0;
    std::vector<uint8_t> owned;
    std::span<const uint8_t> bytes;
  };
  absl::Status BindWeights(const WeightSource& weights, uint64_t* offset, std::vector<WeightUpload>* uploads);
  // dequantize_f16_kernel's parameters for matmul call `c` of launch `l`:
  // its weights' rows one after another in f16 at `y`.
  absl::StatusOr<DequantizeParams> DequantizeParamsOf(const PlanLaunch& l, const KernelCall& c, unsigned short* y) const;
  absl::Status ComputeRowKinds();
  // Whether launch li, a one-token silu_mul matmul over q4_K, stages its
  // output once for launch li + 1 (MatmulParams::stage_image): li + 1 is a
  // matmul_kernel decode over q4_K reading that output, with no norm and
  // the whole of K in one staged chunk, and the output is whole runs of 256.
  bool PrestagesNext(size_t li, size_t bucket) const;
  // Whether launch li, a one-token step's decode attention over heads of
  // kAttentionStagedHeadDim dims in more than one context slice, stages its
  // output for launch li + 1 in its merging blocks
  // (AttentionParams::stage_image), on the same terms for li + 1 as
  // PrestagesNext's.
  bool AttentionStagesNext(size_t li, size_t bucket) const;
  // Whether launch li's attention runs attention_group_kernel in a bucket
  // of `tokens`, and the y of its grid (KV heads for that kernel, query
  // heads for attention_kernel).
  bool UsesAttentionGroup(size_t li, int64_t tokens) const;
  int AttentionBlocksY(size_t li, int64_t heads, int64_t tokens) const;
  // Whether launch li of a one-token step can take its activations from a
  // stage image: a matmul_kernel decode over one q4_K weight of K = k, in
  // one staged chunk, with no norm, reading arena offset input_at.
  bool ReadsStageImage(size_t li, size_t bucket, int64_t k, int64_t input_at) const;
  // The weight bound to `role` of launch l, or null.
  const DeviceWeight* LaunchWeight(const PlanLaunch& l, const std::string& role) const;
  // The first weight of matmul call c of launch l, or null.
  const DeviceWeight* FirstWeight(const PlanLaunch& l, const KernelCall& c) const;
  // Whether matmul call `c` of launch `li` runs matmul_f16_tc_kernel in
  // `bucket`: buckets of kTensorCoreMinBucket tokens and more, K a multiple
  // of kGemmK, and not over the logit rows (few rows; decoding a 128k-row
  // output matrix to f16 for them would cost more than it saves).
  bool UsesF16Weights(const KernelCall& c, size_t li, size_t bucket, int64_t k) const {
    return c.kind == KernelKind::kMatmul && plan_.buckets[bucket] >= kTensorCoreMinBucket && k % kGemmK == 0 &&
           !rows_are_logit_rows_[bucket][li];
  }
  // Whether matmul call `c` of launch `li`, in a bucket where it would read
  // f16 rows (UsesF16Weights), runs matmul_q4k_wgmma_kernel over the q4_K
  // rows as stored instead: buckets of at most q4k_wgmma_max_ tokens.
  bool UsesQ4KWgmma(const KernelCall& c, size_t li, size_t bucket, int64_t k) const {
    return wgmma_ && UsesF16Weights(c, li, bucket, k) && !c.names[kMatmulQ4KWgmmaSlot].empty() && k % 256 == 0 &&
           plan_.buckets[bucket] <= q4k_wgmma_max_;
  }
  // matmul_q4k_wgmma_kernel's grid over `rows` tokens: x token blocks of
  // kQ4KWgmmaTokens, y blocks of two row tiles.
  static std::pair<unsigned, unsigned> Q4KWgmmaGrid(int64_t rows, int64_t total_n, int epilogue) {
    const int64_t outputs = GemmTileOutputs(epilogue), row_tiles = (total_n + outputs - 1) / outputs;
    return {static_cast<unsigned>((rows + kQ4KWgmmaTokens - 1) / kQ4KWgmmaTokens),
            static_cast<unsigned>((row_tiles + 1) / 2)};
  }
  // Its slices of K (WgmmaKSplits over those blocks).
  int Q4KWgmmaSplits(int64_t rows, int64_t total_n, int epilogue, int64_t k) const {
    if (!k_splits_) return 1;
    const auto [x, y] = Q4KWgmmaGrid(rows, total_n, epilogue);
    return WgmmaKSplits(static_cast<int>(x * y), static_cast<int>(k), context_->multiprocessors());
  }
  // Slices of K for matmul_f16_wgmma_kernel over `rows` tokens (WgmmaKSplits).
  int WgmmaSplits(int64_t rows, int64_t total_n, int epilogue, int64_t k) const {
    if (!k_splits_) return 1;
    const int64_t outputs = GemmTileOutputs(epilogue);
    const int64_t tiles = (rows + kGemmM - 1) / kGemmM * ((total_n + outputs - 1) / outputs);
    return WgmmaKSplits(static_cast<int>(tiles), static_cast<int>(k), context_->multiprocessors());
  }
  // Room for the decode copies of the weights BindWeights marked, from
  // *offset on.
  void PlaceQ4KTables(uint64_t* offset);
  // Fills the decode copies PlaceQ4KTables made room for (q4k_scale_table_kernel),
  // or drops them all where a product leaves f16's range.
  absl::Status MakeQ4KTables();
  absl::Status RecordBucket(size_t bucket);
  // Validates the batch, copies its inputs to the device and launches the
  // bucket's graph; returns the bucket. Nothing waits for the device.
  absl::StatusOr<size_t> LaunchStep(const StepBatch& batch);
  absl::Status RecordLaunch(size_t launch_index, size_t bucket);
  // One kernel launch into the stream (being captured), as a programmatic
  // dependent launch where pdl_ says so.
  absl::Status Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem, void* params);

  Plan plan_;
  std::unique_ptr<CudaContext> context_;
  const DriverApi* api_ = nullptr;
  CUmodule module_ = nullptr;
  CUstream stream_ = nullptr;
  double wait_cpu_seconds_ = 0;  // thread CPU time in a step's stream wait, for DeviceWaitCpuSeconds
  CUdeviceptr device_ = 0;
  uint64_t device_bytes_ = 0;
  CUdeviceptr arena_ = 0, pool_ = 0, scratch_ = 0, partials_ = 0, x_f16_ = 0, inputs_ = 0, greedy_ids_ = 0,
             split_done_ = 0;
  // Quantised weights of the launch at hand decoded to f16 rows, for
  // matmul_f16_tc_kernel (buckets of kTensorCoreMinBucket tokens and more).
  CUdeviceptr weights_f16_ = 0;
  // Every prefill matmul's quantised weights decoded to f16 once at load, so
  // prefill steps skip the per-step decode pass (weights_f16_ is then
  // unused). Used where the memory allows; KILN_CUDA_RESIDENT_F16=0 turns it off.
  CUdeviceptr resident_f16_ = 0;
  int64_t resident_f16_bytes_ = 0;
  bool wgmma_ = false;  // the prefill matmul on matmul_f16_wgmma_kernel
  // q4_K's prefill buckets of at most this many tokens on matmul_q4k_wgmma_kernel.
  int64_t q4k_wgmma_max_ = kTensorCoreMinBucket;
  bool tile_int8_ = true;  // q4_K's small buckets on matmul_tile_int8_kernel
  bool tile_int8_wide_ = true;  // its buckets of 9-63 tokens 16 tokens a block
  bool append_in_attention_ = true;  // steps without prefill tiles: no kv_append launch
  // Its 16-row tiles a block (KILN_CUDA_TILE_INT8_ROW_TILES=R: always R;
  // 0: chosen per launch, TileInt8RowTiles).
  int tile_int8_row_tiles_ = 0;
  bool pair_tile_ = true;  // q8_0's two-token buckets on matmul_kernel, tile 2
  bool k_splits_ = true;   // the wgmma prefill matmul cuts K where its tiles are few
  bool attention_group_ = true;   // attention_group_kernel from attention_group_min_ tokens
  int attention_group_min_ = 16;  // AttentionGroupMinBucket (KILN_CUDA_ATTN_GROUP_MIN=N: from N tokens)
  bool stream_decode_ = false;  // q8_0's one-token decode on matmul_stream_kernel (sm_90)
  bool q4k_tables_ = true;      // q4_K's matmul_kernel reads decode copies made at load
  bool prestage_ = true;        // PrestagesNext's pairs stage once (KILN_CUDA_PRESTAGE=0: never)
  // Each captured launch may start while the one before it ends (sm_90:
  // programmatic dependent launch; every kernel waits for its predecessor
  // before touching activations, common.cuh). KILN_CUDA_PDL=0: never.
  bool pdl_ = false;
  // Lane steps of its first rows a decode matmul asks of L2 before that wait
  // (KILN_CUDA_PREFETCH_STEPS).
  int prefetch_steps_ = 1;
  // StageRunOnce's image (MatmulSmemFloats(k, 1) floats for the widest k)
  // and its counts (one per 256 outputs), zero at load.
  CUdeviceptr stage_image_ = 0, stage_counts_ = 0;
  int64_t table_bytes_ = 0;       // of all those copies
  bool tables_left_out_ = false;  // the copies did not fit the memory policy (Create)
  int smem_optin_ = 0;     // dynamic shared memory a block may opt in to
  int smem_per_sm_ = 0;    // shared memory of an SM
  CUfunction argmax_ = nullptr;  // null for kernels sections without it: StepGreedy then reads the logits
  uint64_t scratch_bytes_ = 0;
  int32_t* host_inputs_ = nullptr;  // pinned
  float* host_logits_ = nullptr;    // pinned
  uint64_t host_logits_bytes_ = 0;
  InputLayout layout_;
  std::map<std::string, DeviceWeight, std::less<>> weights_;
  std::vector<std::vector<ResolvedCall>> calls_;  // per launch
  // Per bucket, per launch: true where the launch's rows are the R logit rows.
  std::vector<std::vector<bool>> rows_are_logit_rows_;
  std::vector<CUgraphExec> graphs_;  // per bucket, all recorded at load
  // Per distinct rotary embedding: its cos/sin table for every pool position.
  std::map<RopeTableKey, CUdeviceptr> rope_tables_;
  int64_t num_pages_ = 0;
  int64_t n_vocab_ = 0;
};

CudaExecutor::~CudaExecutor() {
  if (api_ == nullptr) return;
  (void)context_->MakeCurrent();
  for (CUgraphExec g : graphs_) {
    if (g != nullptr) api_->cuGraphExecDestroy(g);
  }
  if (stream_ != nullptr) api_->cuStreamDestroy(stream_);
  if (module_ != nullptr) api_->cuModuleUnload(module_);
  if (device_ != 0) api_->cuMemFree(device_);
  if (host_inputs_ != nullptr) api_->cuMemFreeHost(host_inputs_);
  if (host_logits_ != nullptr) api_->cuMemFreeHost(host_logits_);
}

absl::Status CudaExecutor::BindWeights(const WeightSource& weights, uint64_t* offset,
                                       std::vector<WeightUpload>* uploads) {
  // The weights the matmuls read (not embedding tables): q4_K's get decode copies.
  std::set<std::string> matmul_weights;
  for (const PlanLaunch& l : plan_.launches) {
    if (l.op != "matmul" && l.op != "fused_matmul") continue;
    for (const PlanBinding& b : l.bindings) {
      if (b.kind == PlanBinding::Kind::kWeight && absl::StartsWith(b.role, "weight")) matmul_weights.insert(b.name);
    }
  }
  for (const PlanWeight& w : plan_.weights) {
    absl::StatusOr<WeightBytes> src = weights(w.name);
    if (!src.ok()) return src.status();
    absl::StatusOr<cpu::WeightStorage> want = cpu::ParseWeightStorage(w.storage);
    if (!want.ok()) return absl::InvalidArgumentError(absl::StrCat("weight '", w.name, "': ", want.status().message()));
    DeviceWeight d;
    d.rows = w.shape.size() == 2 ? w.shape[0] : 1;
    d.cols = w.shape.empty() ? 0 : w.shape.back();
    const std::optional<uint64_t> src_row = src->storage.RowBytes(d.cols);
    if (!src_row || *src_row * d.rows != src->data.size()) {
      return absl::InvalidArgumentError(absl::StrFormat("weight '%s': %d bytes of %s do not hold the plan's [%d, %d]",
                                                        w.name, src->data.size(), src->storage.Name(), d.rows, d.cols));
    }
    WeightUpload up;
    if (w.shape.size() == 1) {
      // Vectors (norm gains, biases) are read as f32 by every kernel.
      d.storage = "f32";
      up.owned.resize(d.cols * sizeof(float));
      std::span<float> out(reinterpret_cast<float*>(up.owned.data()), d.cols);
      if (absl::Status s = cpu::DequantizeRow(src->storage, src->data, out); !s.ok()) return s;
    } else if (src->storage.Name() != want->Name()) {
      absl::StatusOr<std::vector<uint8_t>> repacked = RepackWeight(src->storage, *want, d.rows, d.cols, src->data);
      if (!repacked.ok()) {
        return absl::Status(repacked.status().code(), absl::StrCat("weight '", w.name, "': ", repacked.status().message()));
      }
      d.storage = want->Name();
      up.owned = *std::move(repacked);
    } else {
      d.storage = want->Name();
      up.bytes = src->data;
    }
    if (!up.owned.empty()) up.bytes = up.owned;
    d.row_bytes = up.bytes.size() / std::max<int64_t>(d.rows, 1);
    d.ptr = *offset;  // relative until the allocation exists
    up.offset = *offset;
    *offset = AlignUp(*offset + up.bytes.size());
    // A q4_K matmul weight's decode copy, made on the device at load: its
    // room comes after all the weights (PlaceQ4KTables), where memory allows.
    const bool q4k = !want->grouped && want->ggml == GgmlType::kQ4_K;
    if (q4k && q4k_tables_ && w.shape.size() == 2 && d.cols % 256 == 0 && matmul_weights.contains(w.name)) {
      d.wants_table = true;
      table_bytes_ += static_cast<int64_t>(AlignUp(d.rows * cuda_abi::Q4KTableRowBytes(d.cols)));
    }
    uploads->push_back(std::move(up));
    weights_.emplace(w.name, std::move(d));
  }
  return absl::OkStatus();
}

void CudaExecutor::PlaceQ4KTables(uint64_t* offset) {
  for (auto& [name, w] : weights_) {
    if (!w.wants_table) continue;
    w.table = *offset;  // relative until the allocation exists
    *offset = AlignUp(*offset + w.rows * cuda_abi::Q4KTableRowBytes(w.cols));
  }
}

bool CudaExecutor::ReadsStageImage(size_t li, size_t bucket, int64_t k, int64_t input_at) const {
  if (!prestage_ || plan_.buckets[bucket] != 1 || li >= plan_.launches.size() || calls_[li].size() != 1) return false;
  const PlanLaunch& to = plan_.launches[li];
  const ResolvedCall& b = calls_[li][0];
  if (b.call.kind != KernelKind::kMatmul || b.call.norm || b.call.weights.size() != 1) return false;
  if (b.functions[kMatmulDecodeSlot] == nullptr) return false;
  if (b.functions[kMatmulStreamSlot] != nullptr && stream_decode_) return false;
  const PlanBinding* in = to.Find("input");
  if (in == nullptr || in->kind != PlanBinding::Kind::kArena || in->arena[bucket] != input_at) return false;
  const DeviceWeight* w = FirstWeight(to, b.call);
  return w != nullptr && w->storage == "q4_K" && w->cols == k && k % 256 == 0 &&
         MatmulChunk(static_cast<int>(k), 1) >= k;
}

bool CudaExecutor::PrestagesNext(size_t li, size_t bucket) const {
  if (!prestage_ || plan_.buckets[bucket] != 1 || li + 1 >= plan_.launches.size() || calls_[li].size() != 1) {
    return false;
  }
  const PlanLaunch& from = plan_.launches[li];
  const ResolvedCall& a = calls_[li][0];
  if (a.call.kind != KernelKind::kMatmul || a.call.epilogue != kEpilogueSiluMul || a.call.to_scratch) return false;
  if (a.functions[kMatmulDecodeSlot] == nullptr) return false;
  const PlanBinding* out = from.Find("result0");
  if (out == nullptr || out->kind != PlanBinding::Kind::kArena) return false;
  const DeviceWeight* wa = FirstWeight(from, a.call);
  if (wa == nullptr || wa->storage != "q4_K") return false;
  return ReadsStageImage(li + 1, bucket, wa->rows, out->arena[bucket]);
}

bool CudaExecutor::AttentionStagesNext(size_t li, size_t bucket) const {
  if (!prestage_ || plan_.buckets[bucket] != 1 || li + 1 >= plan_.launches.size()) return false;
  if (plan_.pool.head_dim != kAttentionStagedHeadDim) return false;
  if (std::none_of(calls_[li].begin(), calls_[li].end(),
                   [](const ResolvedCall& r) { return IsDecodeAttention(r.call.kind); })) {
    return false;
  }
  const PlanLaunch& from = plan_.launches[li];
  const PlanBinding* out = from.Find("result");
  absl::StatusOr<int64_t> heads = from.Int("num_heads");
  if (out == nullptr || out->kind != PlanBinding::Kind::kArena || !heads.ok()) return false;
  // Only the merging blocks stage: a one-slice launch (few SMs for its heads) writes no image.
  if (AttentionSplits(1, AttentionBlocksY(li, *heads, 1), context_->multiprocessors()) == 1) return false;
  return ReadsStageImage(li + 1, bucket, *heads * kAttentionStagedHeadDim, out->arena[bucket]);
}

bool CudaExecutor::UsesAttentionGroup(size_t li, int64_t tokens) const {
  return attention_group_ && tokens >= attention_group_min_ &&
         std::any_of(calls_[li].begin(), calls_[li].end(),
                     [](const ResolvedCall& r) { return r.call.kind == KernelKind::kAttentionGroup; });
}

int CudaExecutor::AttentionBlocksY(size_t li, int64_t heads, int64_t tokens) const {
  return static_cast<int>(UsesAttentionGroup(li, tokens) ? plan_.pool.kv_heads : heads);
}

const CudaExecutor::DeviceWeight* CudaExecutor::LaunchWeight(const PlanLaunch& l, const std::string& role) const {
  const PlanBinding* b = l.Find(role);
  if (b == nullptr || b->kind != PlanBinding::Kind::kWeight) return nullptr;
  auto it = weights_.find(b->name);
  return it == weights_.end() ? nullptr : &it->second;
}

const CudaExecutor::DeviceWeight* CudaExecutor::FirstWeight(const PlanLaunch& l, const KernelCall& c) const {
  return LaunchWeight(l, l.op == "fused_matmul" ? absl::StrCat("weight", c.weights[0]) : std::string("weight"));
}

// Which launches run over the R logit rows: the CPU backend's rule (an
// activation has the rows of the op that wrote it; gather_rows writes R).
absl::Status CudaExecutor::ComputeRowKinds() {
  rows_are_logit_rows_.assign(plan_.buckets.size(), std::vector<bool>(plan_.launches.size(), false));
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    std::map<int64_t, bool> logit_rows_at;
    for (size_t i = 0; i < plan_.launches.size(); ++i) {
      const PlanLaunch& l = plan_.launches[i];
      auto kind_of = [&](const char* role) {
        const PlanBinding* binding = l.Find(role);
        if (binding == nullptr || binding->kind != PlanBinding::Kind::kArena) return false;
        auto it = logit_rows_at.find(binding->arena[b]);
        return it != logit_rows_at.end() && it->second;
      };
      bool r = false;
      if (l.op == "gather_rows") {
        r = true;
      } else if (l.op == "mul" || l.op == "add") {
        r = kind_of("lhs");
      } else if (l.op != "embedding" && l.op != "rope" && l.op != "paged_attention") {
        r = kind_of("input");
      }
      rows_are_logit_rows_[b][i] = r;
      for (const PlanBinding& binding : l.bindings) {
        if (binding.kind == PlanBinding::Kind::kArena && binding.role.rfind("result", 0) == 0) {
          logit_rows_at[binding.arena[b]] = r;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>> CudaExecutor::Create(const Program& program, const BackendOptions& options) {
  const KernelBundle* kernels = program.FindKernels("cuda");
  if (kernels == nullptr) {
    return absl::UnavailableError("the program has no cuda kernels (compile it with --target cuda:sm_90)");
  }
  absl::StatusOr<CudaBundle> bundle = ParseBundle(kernels->bytes);
  if (!bundle.ok()) return bundle.status();
  absl::StatusOr<std::unique_ptr<CudaContext>> context = CudaContext::Create(options.device);
  if (!context.ok()) return context.status();

  std::unique_ptr<CudaExecutor> ex(new CudaExecutor());
  ex->plan_ = program.plan;
  ex->context_ = *std::move(context);
  ex->api_ = &ex->context_->api();
  const DriverApi& api = *ex->api_;
  const Plan& p = ex->plan_;
  const int sm = ex->context_->sm();

  // The cubin runs only on its own SM; PTX JIT-compiles for the same or a newer one.
  const bool use_cubin = static_cast<int>(bundle->sm) == sm && !bundle->cubin.empty();
  if (!use_cubin && (bundle->ptx.empty() || static_cast<int>(bundle->sm) > sm)) {
    return absl::UnavailableError(absl::StrFormat(
        "the artifact's CUDA kernels are for sm_%d but %s is sm_%d (recompile with --target cuda:sm_%d)", bundle->sm,
        ex->context_->name(), sm, sm));
  }
  // sm_90 kernels are compiled for sm_90a (codegen/ptx): neither their
  // cubin nor their PTX runs on another SM.
  if (bundle->sm == 90 && sm != 90) {
    return absl::UnavailableError(absl::StrFormat(
        "the artifact's CUDA kernels are for sm_90a (Hopper's warpgroup MMA), which runs on sm_90 GPUs only, but %s is "
        "sm_%d (recompile with --target cuda:sm_%d)",
        ex->context_->name(), sm, sm));
  }
  std::string module_image;
  const void* image = bundle->cubin.data();
  if (!use_cubin) {
    module_image = bundle->ptx;  // NUL-terminated for the JIT
    image = module_image.c_str();
  }
  KILN_CU(api, api.cuModuleLoadDataEx(&ex->module_, image, 0, nullptr, nullptr));
  // sm_90 bundles are compiled for sm_90a (codegen/ptx): the prefill matmul
  // runs on warpgroup MMA there (KILN_CUDA_WGMMA=0: on mma.sync).
  ex->wgmma_ = sm == 90 && bundle->sm == 90 && SwitchOn("KILN_CUDA_WGMMA");
  // There, q4_K's 64-token prefill buckets read the weights as stored
  // (matmul_q4k_wgmma_kernel), not their f16 copy, whose bytes bound such a
  // step (H100: 6.65 against 8.28 ms; at 128 tokens, where each 64-token
  // tile decodes the rows again, 9.87 against 9.16).
  // KILN_CUDA_Q4K_WGMMA_MAX=N: buckets of up to N tokens; 0: never.
  if (const char* v = std::getenv("KILN_CUDA_Q4K_WGMMA_MAX"); v != nullptr) ex->q4k_wgmma_max_ = std::atoi(v);
  // q4_K's buckets of 2-63 tokens run on the integer tensor cores
  // (KILN_CUDA_TILE_INT8=0: on matmul_tile_tc_kernel's f16 path).
  ex->tile_int8_ = SwitchOn("KILN_CUDA_TILE_INT8");
  // Its buckets of more than 8 tokens take two 8-token tiles a block, so a
  // block's weight loads and unpacking serve 16 tokens
  // (KILN_CUDA_TILE_INT8_WIDE=0: one tile a block, blocks side by side).
  ex->tile_int8_wide_ = SwitchOn("KILN_CUDA_TILE_INT8_WIDE");
  // Steps without prefill tiles: attention_kernel appends this step's K/V
  // rows (KILN_CUDA_APPEND_IN_ATTENTION=0: only one-token steps; the others
  // run kv_append first).
  ex->append_in_attention_ = SwitchOn("KILN_CUDA_APPEND_IN_ATTENTION");
  if (const char* v = std::getenv("KILN_CUDA_TILE_INT8_ROW_TILES"); v != nullptr) {
    const int r = std::atoi(v);
    if (r == 1 || r == 2 || r == 4 || r == 8) ex->tile_int8_row_tiles_ = r;
  }
  // q8_0's two-token buckets run like decode (KILN_CUDA_PAIR_TILE=0: on the tile kernel).
  ex->pair_tile_ = SwitchOn("KILN_CUDA_PAIR_TILE");
  // Where its tiles are few, the wgmma matmul cuts K into slices (KILN_CUDA_K_SPLITS=0: never).
  ex->k_splits_ = SwitchOn("KILN_CUDA_K_SPLITS");
  ex->attention_group_ = SwitchOn("KILN_CUDA_ATTN_GROUP");
  ex->attention_group_min_ = AttentionGroupMinBucket(program.plan.pool.f16);
  if (const char* v = std::getenv("KILN_CUDA_ATTN_GROUP_MIN"); v != nullptr) {
    ex->attention_group_min_ = std::max(1, std::atoi(v));
  }
  // q8_0's one-token decode streams the weights through shared memory on
  // the bulk copy engine (sm_90; KILN_CUDA_STREAM=0: matmul_kernel).
  ex->stream_decode_ = sm >= 90 && bundle->sm >= 90 && SwitchOn("KILN_CUDA_STREAM");
  ex->pdl_ = sm >= 90 && bundle->sm >= 90 && SwitchOn("KILN_CUDA_PDL");
  if (const char* v = std::getenv("KILN_CUDA_PREFETCH_STEPS"); v != nullptr) {
    ex->prefetch_steps_ = std::clamp(std::atoi(v), 0, 4);
  }
  // q4_K's matmul_kernel reads a copy of the weights made at load, each
  // block's codes and its sub-blocks' scale products (160 bytes a block,
  // beside the stored 144 that the other kernels read: 2.1x the q4_K
  // weights' memory), instead of unpacking the blocks' 6-bit fields every
  // step; a one-token step reads 9% fewer bytes than with the codes in place
  // and a 32-byte table beside them (docs/perf/cuda-h200.md, session 37).
  // KILN_CUDA_Q4K_TABLE=0: no copy, the stored blocks' headers unpacked.
  ex->q4k_tables_ = SwitchOn("KILN_CUDA_Q4K_TABLE");
  // A one-token silu_mul launch stages the down projection's int8
  // activations once instead of each of its blocks (KILN_CUDA_PRESTAGE=0: each block).
  ex->prestage_ = SwitchOn("KILN_CUDA_PRESTAGE");
  KILN_CU(api, api.cuDeviceGetAttribute(&ex->smem_optin_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                        ex->context_->device()));
  KILN_CU(api, api.cuDeviceGetAttribute(&ex->smem_per_sm_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                                        ex->context_->device()));

  if (absl::Status s = ex->ComputeRowKinds(); !s.ok()) return s;
  // Every launch's calls, with their functions.
  int64_t stage_k = 0;  // the widest matmul K: PrestagesNext's image and counts
  int64_t scratch_floats = 0, partial_floats = 0, split_counters = 0, x_f16_halves = 0, weights_f16_halves = 0,
          resident_f16_halves = 0;
  for (size_t li = 0; li < p.launches.size(); ++li) {
    const PlanLaunch& l = p.launches[li];
    absl::StatusOr<std::vector<KernelCall>> calls = LowerLaunch(p, l);
    if (!calls.ok()) return calls.status();
    std::vector<ResolvedCall> resolved;
    for (KernelCall& c : *calls) {
      ResolvedCall r;
      for (const std::string& name : c.names) {
        if (name.empty()) {  // a matmul slot this storage has no kernel for
          r.functions.push_back(nullptr);
          continue;
        }
        const BundleKernel* k = bundle->Find(name);
        if (k == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("the cuda kernels section lacks ", name, " (needed by launch '", l.kernel, "')"));
        }
        CUfunction f = nullptr;
        KILN_CU(api, api.cuModuleGetFunction(&f, ex->module_, k->lowered_name.c_str()));
        r.functions.push_back(f);
      }
      if (c.kind == KernelKind::kMatmul) {
        // The CUDA-core matmuls stage activations in up to this much dynamic shared memory.
        for (MatmulSlot i : {kMatmulDecodeSlot, kMatmulTiledSlot, kMatmulPairSlot}) {
          if (r.functions[i] == nullptr) continue;
          KILN_CU(api, api.cuFuncSetAttribute(r.functions[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                              kMatmulSmemBudgetFloats * static_cast<int>(sizeof(float))));
        }
        KILN_CU(api, api.cuFuncSetAttribute(r.functions[kMatmulF16TcSlot],
                                            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, GemmSmemBytes()));
        if (ex->wgmma_) {
          KILN_CU(api, api.cuFuncSetAttribute(r.functions[kMatmulF16WgmmaSlot],
                                              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, WgmmaSmemBytes()));
          if (r.functions[kMatmulQ4KWgmmaSlot] != nullptr) {
            KILN_CU(api, api.cuFuncSetAttribute(r.functions[kMatmulQ4KWgmmaSlot],
                                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, Q4KWgmmaSmemBytes()));
          }
        }
      }
      if (IsDecodeAttention(c.kind)) {
        absl::StatusOr<int64_t> heads = l.Int("num_heads");
        absl::StatusOr<int64_t> hd = l.Int("head_dim");
        if (!heads.ok() || !hd.ok()) return LaunchError(l, "needs num_heads and head_dim");
        const int blocks_y =
            c.kind == KernelKind::kAttentionGroup ? static_cast<int>(p.pool.kv_heads) : static_cast<int>(*heads);
        for (int64_t bucket : p.buckets) {
          const int64_t splits = AttentionSplits(static_cast<int>(bucket), blocks_y, ex->context_->multiprocessors());
          if (splits == 1) continue;
          partial_floats = std::max(partial_floats, bucket * *heads * kDecodeSplits * (*hd + 2));
          split_counters = std::max(split_counters, bucket * *heads);
        }
      }
      if (c.kind == KernelKind::kMatmul) {
        absl::StatusOr<int64_t> k = l.Int("k");
        const PlanBinding* w0 = l.Find(l.op == "fused_matmul" ? "weight0" : "weight");
        const PlanWeight* pw = w0 ? p.FindWeight(w0->name) : nullptr;
        const int64_t width = pw ? pw->shape.back() : (k.ok() ? *k : 0);
        stage_k = std::max(stage_k, width);
        // f16 activations of the tensor-core matmul; for the 2-63-token
        // buckets' tile kernel, hi and lo halves and sums per 32 (in halves).
        if (p.buckets.back() >= kTensorCoreMinBucket) x_f16_halves = std::max(x_f16_halves, p.buckets.back() * width);
        int64_t rows = 0;  // of the call's weights together
        for (int wi : c.weights) {
          const PlanBinding* b = l.Find(l.op == "fused_matmul" ? absl::StrCat("weight", wi) : std::string("weight"));
          const PlanWeight* w = b ? p.FindWeight(b->name) : nullptr;
          rows += w ? w->shape.front() : 0;
        }
        if (r.functions[kMatmulStreamSlot] != nullptr) {
          // Its ring and the whole K of activations, where that fits a block
          // (else decode stays on matmul_kernel).
          const int smem = pw ? StreamSmemBytesOf(pw->storage, static_cast<int>(width)) : 0;
          if (!ex->stream_decode_ || smem == 0 || width % 256 != 0 || smem > ex->smem_optin_) {
            r.functions[kMatmulStreamSlot] = nullptr;
          } else {
            KILN_CU(api, api.cuFuncSetAttribute(r.functions[kMatmulStreamSlot],
                                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem)));
            r.stream_smem = static_cast<unsigned>(smem);
          }
        }
        bool f16_rows = false;  // some bucket's matmul reads this call's weights as f16 rows
        for (size_t b = 0; b < p.buckets.size(); ++b) {
          f16_rows = f16_rows || (ex->UsesF16Weights(c, li, b, width) && !ex->UsesQ4KWgmma(c, li, b, width));
        }
        if (f16_rows && !c.names[kDequantizeSlot].empty()) {
          weights_f16_halves = std::max(weights_f16_halves, rows * width);
          r.resident_f16 = resident_f16_halves;
          resident_f16_halves += (rows * width + 127) / 128 * 128;  // 256-byte aligned rows start
        }
        if (ex->wgmma_) {
          // The prefill matmul's slices of K where its tiles are few: their
          // raw sums go to the partials region (attention's, unused meanwhile).
          const int64_t total_n = c.epilogue == kEpilogueSiluMul ? rows / 2 : rows;  // MatmulParams::total_n
          for (size_t b = 0; b < p.buckets.size(); ++b) {
            if (!ex->UsesF16Weights(c, li, b, width)) continue;
            const int splits = ex->UsesQ4KWgmma(c, li, b, width)
                                   ? ex->Q4KWgmmaSplits(p.buckets[b], total_n, c.epilogue, width)
                                   : ex->WgmmaSplits(p.buckets[b], total_n, c.epilogue, width);
            if (splits > 1) {
              partial_floats = std::max(partial_floats, splits * p.buckets[b] * WgmmaPartialStride(total_n, c.epilogue));
            }
          }
        }
        if (c.has_tile_tc() || c.has_tile_int8()) {
          int64_t small = 0;
          for (int64_t b : p.buckets) small = b < kTensorCoreMinBucket ? b : small;
          if (ex->rows_are_logit_rows_.back()[li]) small = p.buckets.back();
          if (c.has_tile_tc()) x_f16_halves = std::max(x_f16_halves, small * (2 * width + 2 * (width / 32)));
          // The int8 tile kernel's codes (a byte each), then per 256 elements 16 f16 sums and a float scale.
          if (c.has_tile_int8()) x_f16_halves = std::max(x_f16_halves, (small * width + small * (width / 256) * 36 + 1) / 2);
        }
      }
      if (c.to_scratch) {
        absl::StatusOr<std::vector<int64_t>> n = l.IntList("n");
        if (!n.ok()) return n.status();
        for (int64_t v : *n) scratch_floats = std::max(scratch_floats, 2 * p.buckets.back() * v);
      }
      r.call = std::move(c);
      resolved.push_back(std::move(r));
    }
    ex->calls_.push_back(std::move(resolved));
  }
  std::map<RopeTableKey, std::vector<float>> rope_tables;
  for (const PlanLaunch& l : p.launches) {
    if (l.constants.Find("rope_theta") == nullptr) continue;
    absl::StatusOr<cpu::RopeParams> rope = LaunchRope(l);
    if (!rope.ok()) return rope.status();
    if (!rope_tables.contains(RopeKey(*rope))) rope_tables[RopeKey(*rope)] = cpu::RopeTable(*rope, p.pool.max_tokens);
  }

  const JsonValue* vocab = p.model.Find("n_vocab");
  if (vocab == nullptr || !vocab->int_value()) return absl::InvalidArgumentError("plan: model.n_vocab is missing");
  ex->n_vocab_ = *vocab->int_value();
  const int64_t max_tokens = p.buckets.back();
  const int64_t pages_stride = (p.pool.max_tokens + p.pool.page_size - 1) / p.pool.page_size;
  ex->num_pages_ = options.num_pages > 0 ? options.num_pages : pages_stride;
  ex->layout_ = InputLayout::For(max_tokens, max_tokens, pages_stride);

  // One allocation: weights | KV pool | arena | scratch | attention partials |
  // f16 activations of the tensor-core matmuls | f16 weights of the prefill
  // matmul | inputs | greedy ids | split-K attention counts | rope tables.
  uint64_t offset = 0;
  std::vector<WeightUpload> uploads;
  if (absl::Status s = ex->BindWeights(program.weights, &offset, &uploads); !s.ok()) return s;
  const uint64_t weights_end = offset;
  uint64_t pool_offset = offset + ex->table_bytes_;  // with the q4_K decode copies, decided below
  const uint64_t page_bytes = p.pool.page_bytes();
  // The offsets after the pool, for a pool of `pages`.
  struct Tail {
    uint64_t arena, scratch, partials, x_f16, weights_f16, inputs, greedy, split_done, stage_image, stage_counts,
        rope_start, end;
  };
  ex->scratch_bytes_ = scratch_floats * sizeof(float);
  // `resident`: the f16 region holds every prefill matmul's weights
  // (resident_f16_halves), not one launch's at a time (weights_f16_halves).
  auto tail = [&](int64_t pages, bool resident) {
    Tail t;
    t.arena = AlignUp(pool_offset + pages * page_bytes);
    t.scratch = AlignUp(t.arena + p.arena_bytes.back());
    t.partials = AlignUp(t.scratch + ex->scratch_bytes_);
    t.x_f16 = AlignUp(t.partials + partial_floats * sizeof(float));
    t.weights_f16 = AlignUp(t.x_f16 + x_f16_halves * sizeof(uint16_t));
    t.inputs = AlignUp(t.weights_f16 + (resident ? resident_f16_halves : weights_f16_halves) * sizeof(uint16_t));
    t.greedy = AlignUp(t.inputs + ex->layout_.total * sizeof(int32_t));
    t.split_done = AlignUp(t.greedy + max_tokens * sizeof(int32_t));
    t.stage_image = AlignUp(t.split_done + split_counters * sizeof(uint32_t));
    t.stage_counts = AlignUp(t.stage_image + MatmulSmemFloats(static_cast<int>(stage_k), 1) * sizeof(float));
    t.rope_start = AlignUp(t.stage_counts + (stage_k / 256 + 1) * sizeof(uint32_t));
    t.end = t.rope_start;
    for (const auto& [key, table] : rope_tables) t.end = AlignUp(t.end + table.size() * sizeof(float));
    return t;
  };
  size_t free = 0, total = 0;
  KILN_CU(api, api.cuMemGetInfo(&free, &total));
  // A copy of weights made at load for speed is kept where it costs an
  // automatic KV pool at most a quarter of its memory (an explicit pool:
  // where everything fits in 95% of the free memory). `with`, `without`:
  // where the allocation ends with no KV pages, with and without the copy;
  // `explicit_with`: where it ends with the copy and the explicit pool.
  const bool auto_pool = options.num_pages == 0 && options.gpu_kv_fraction > 0;
  auto affordable = [&](uint64_t with, uint64_t without, uint64_t explicit_with) {
    if (!auto_pool) return explicit_with <= free / 20 * 19;
    return free > with && free - with >= (free > without ? free - without : 0) / 4 * 3;
  };
  // The q4_K decode copies (2.1x those weights' memory with the stored
  // blocks). Without them the matmuls unpack the stored blocks' headers:
  // one-token steps 13% slower on the 8B, and 7% slower than with the
  // 32-byte tables the copies replaced, which a third path in matmul_kernel
  // (tables where copies do not fit) would keep, but it spilled qkv's
  // instance (docs/perf/cuda-h200.md, session 37).
  if (ex->table_bytes_ > 0) {
    const uint64_t with = tail(0, false).end;
    if (affordable(with, with - ex->table_bytes_, tail(ex->num_pages_, false).end)) {
      uint64_t at = weights_end;
      ex->PlaceQ4KTables(&at);
    } else {
      ex->table_bytes_ = 0;
      ex->tables_left_out_ = true;
      pool_offset = weights_end;
    }
  }
  // Quantised weights decoded to f16 once at load, for the prefill matmul
  // (the per-step decode pass cost ~6 ms of a 28 ms 512-token step on the
  // 8B). KILN_CUDA_RESIDENT_F16=0 decodes per step instead.
  const bool resident = resident_f16_halves > 0 && SwitchOn("KILN_CUDA_RESIDENT_F16") &&
                        affordable(tail(0, true).end, tail(0, false).end, tail(ex->num_pages_, true).end);
  if (!resident) {
    for (auto& calls : ex->calls_)
      for (ResolvedCall& rc : calls) rc.resident_f16 = -1;
  }
  if (auto_pool) {
    const uint64_t others = tail(0, resident).end;
    absl::StatusOr<int64_t> pages =
        KvPagesForFreeMemory(free > others ? free - others : 0, options.gpu_kv_fraction, page_bytes,
                             options.max_kv_pages, "device memory free after the weights");
    if (!pages.ok()) return pages.status();
    ex->num_pages_ = *pages;
  }
  const Tail t = tail(ex->num_pages_, resident);
  const uint64_t arena_offset = t.arena, scratch_offset = t.scratch, partials_offset = t.partials,
                 x_f16_offset = t.x_f16, weights_f16_offset = t.weights_f16, inputs_offset = t.inputs, greedy_offset = t.greedy,
                 split_done_offset = t.split_done, stage_image_offset = t.stage_image,
                 stage_counts_offset = t.stage_counts, rope_start = t.rope_start;
  uint64_t rope_offset = rope_start;
  for (auto& [key, table] : rope_tables) {
    ex->rope_tables_[key] = rope_offset;  // relative until the allocation exists
    rope_offset = AlignUp(rope_offset + table.size() * sizeof(float));
  }
  ex->device_bytes_ = rope_offset;
  KILN_CU(api, api.cuMemAlloc(&ex->device_, ex->device_bytes_));
  for (const WeightUpload& up : uploads) {
    KILN_CU(api, api.cuMemcpyHtoD(ex->device_ + up.offset, up.bytes.data(), up.bytes.size()));
  }
  for (auto& [name, w] : ex->weights_) {
    w.ptr += ex->device_;
    if (w.table != 0) w.table += ex->device_;
  }
  for (auto& [key, at] : ex->rope_tables_) {
    at += ex->device_;
    const std::vector<float>& table = rope_tables[key];
    KILN_CU(api, api.cuMemcpyHtoD(at, table.data(), table.size() * sizeof(float)));
  }
  ex->pool_ = ex->device_ + pool_offset;
  ex->arena_ = ex->device_ + arena_offset;
  ex->scratch_ = ex->device_ + scratch_offset;
  ex->partials_ = ex->device_ + partials_offset;
  ex->x_f16_ = ex->device_ + x_f16_offset;
  ex->weights_f16_ = ex->device_ + weights_f16_offset;
  if (resident) {
    ex->resident_f16_ = ex->weights_f16_;
    ex->resident_f16_bytes_ = resident_f16_halves * static_cast<int64_t>(sizeof(uint16_t));
  }
  ex->greedy_ids_ = ex->device_ + greedy_offset;
  ex->split_done_ = ex->device_ + split_done_offset;
  ex->stage_image_ = ex->device_ + stage_image_offset;
  ex->stage_counts_ = ex->device_ + stage_counts_offset;
  if (const BundleKernel* k = bundle->Find(kGreedyArgmaxKernel)) {
    KILN_CU(api, api.cuModuleGetFunction(&ex->argmax_, ex->module_, k->lowered_name.c_str()));
  }
  ex->inputs_ = ex->device_ + inputs_offset;
  // A fresh pool reads as zeros, as on the CPU. The arena and scratch start
  // as NaNs: a kernel that reads what nothing wrote shows in the logits.
  // Inputs, greedy ids and the split-K attention counts start at zero.
  KILN_CU(api, api.cuMemsetD8(ex->pool_, 0, arena_offset - pool_offset));
  KILN_CU(api, api.cuMemsetD32(ex->arena_, 0x7fc00000u, (inputs_offset - arena_offset) / sizeof(float)));
  KILN_CU(api, api.cuMemsetD8(ex->inputs_, 0, rope_start - inputs_offset));
  // The copies and fills above run on the legacy stream, which work on the
  // non-blocking stream_ does not wait for: the load-time decode below
  // would race the NaN fill of its own region (and a first step the tail of
  // the uploads).
  KILN_CU(api, api.cuCtxSynchronize());

  KILN_CU(api, api.cuStreamCreate(&ex->stream_, CU_STREAM_NON_BLOCKING));
  if (absl::Status s = ex->MakeQ4KTables(); !s.ok()) return s;
  if (resident) {
    for (size_t li = 0; li < p.launches.size(); ++li) {
      for (const ResolvedCall& rc : ex->calls_[li]) {
        if (rc.resident_f16 < 0) continue;
        absl::StatusOr<DequantizeParams> dp = ex->DequantizeParamsOf(
            p.launches[li], rc.call, reinterpret_cast<unsigned short*>(ex->resident_f16_) + rc.resident_f16);
        if (!dp.ok()) return dp.status();
        int rows = 0;
        for (int i = 0; i < dp->num_weights; ++i) rows += dp->n[i];
        if (absl::Status s = ex->Launch(rc.functions[kDequantizeSlot], rows, (dp->k + 2047) / 2048, 1, 256, 0, &*dp);
            !s.ok()) {
          return s;
        }
      }
    }
    KILN_CU(api, api.cuStreamSynchronize(ex->stream_));
  }
  void* host = nullptr;
  KILN_CU(api, api.cuMemAllocHost(&host, ex->layout_.total * sizeof(int32_t)));
  ex->host_inputs_ = static_cast<int32_t*>(host);
  std::memset(ex->host_inputs_, 0, ex->layout_.total * sizeof(int32_t));
  ex->host_logits_bytes_ = static_cast<uint64_t>(max_tokens) * ex->n_vocab_ * sizeof(float);
  KILN_CU(api, api.cuMemAllocHost(&host, ex->host_logits_bytes_));
  ex->host_logits_ = static_cast<float*>(host);
  // Every bucket's graph now, not on its first step: recording one (a few
  // hundred launches for an 8B model, then instantiation) would otherwise
  // land in the step where a server first meets that bucket, as a latency
  // spike (the likely cause of docs/perf/serving-h200.md run K's p99).
  ex->graphs_.assign(p.buckets.size(), nullptr);
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    if (absl::Status s = ex->RecordBucket(b); !s.ok()) return s;
  }
  return std::unique_ptr<Executor>(std::move(ex));
}

absl::Status CudaExecutor::MakeQ4KTables() {
  if (table_bytes_ == 0) return absl::OkStatus();
  CUfunction make = nullptr;
  for (const auto& calls : calls_)
    for (const ResolvedCall& rc : calls) {
      if (rc.call.kind == KernelKind::kMatmul && rc.functions[kQ4KTableSlot] != nullptr) make = rc.functions[kQ4KTableSlot];
    }
  // Without the kernel (an artifact lacking it), every matmul reads the blocks' headers.
  auto drop = [this] {
    for (auto& [name, w] : weights_) w.table = 0;
    table_bytes_ = 0;
  };
  if (make == nullptr) {
    drop();
    return absl::OkStatus();
  }
  const DriverApi& api = *api_;
  // The greedy ids (zero, and unused before the first step) hold the overflow flag.
  unsigned* overflow = reinterpret_cast<unsigned*>(greedy_ids_);
  for (const auto& [name, w] : weights_) {
    if (w.table == 0) continue;
    Q4KTableParams tp{};
    tp.w = reinterpret_cast<const unsigned char*>(w.ptr);
    tp.table = reinterpret_cast<unsigned char*>(w.table);
    tp.blocks = w.rows * (w.cols / 256);
    tp.overflow = overflow;
    if (absl::Status s = Launch(make, static_cast<unsigned>((tp.blocks + 255) / 256), 1, 1, 256, 0, &tp); !s.ok()) return s;
  }
  unsigned flag = 0;
  KILN_CU(api, api.cuStreamSynchronize(stream_));
  KILN_CU(api, api.cuMemcpyDtoH(&flag, greedy_ids_, sizeof(flag)));
  KILN_CU(api, api.cuMemsetD32(greedy_ids_, 0, 1));
  // (The fill runs on the legacy stream, which stream_ does not wait for.)
  KILN_CU(api, api.cuCtxSynchronize());
  // A product past f16's range: the headers too. 8 d sc past it: q4_K's
  // small buckets on matmul_tile_tc_kernel (raw codes in the MMA, block
  // scales applied in f32), not the int8 tile kernel (8 d sc in f16).
  // (With the tables off, KILN_CUDA_Q4K_TABLE=0, nothing checks the range.)
  if (flag & 1u) drop();
  if (flag & 2u) tile_int8_ = false;
  return absl::OkStatus();
}

absl::Status CudaExecutor::RecordLaunch(size_t li, size_t bucket) {
  const PlanLaunch& l = plan_.launches[li];
  const int max_rows = static_cast<int>(plan_.buckets[bucket]);
  const int32_t* counts = reinterpret_cast<const int32_t*>(inputs_ + layout_.counts * sizeof(int32_t));
  const int* rows = rows_are_logit_rows_[bucket][li] ? counts + 2 : counts;
  auto arena = [&](const std::string& role) -> float* {
    const PlanBinding* b = l.Find(role);
    if (b == nullptr || b->kind != PlanBinding::Kind::kArena) return nullptr;
    return reinterpret_cast<float*>(arena_ + b->arena[bucket]);
  };
  auto weight = [&](const std::string& role) { return LaunchWeight(l, role); };
  auto input = [&](int64_t at) { return reinterpret_cast<const int*>(inputs_ + at * sizeof(int32_t)); };
  auto launch = [&](CUfunction f, unsigned gx, unsigned gy, unsigned block, unsigned smem, void* params) {
    return Launch(f, gx, gy, 1, block, smem, params);
  };
  auto rope_of = [&](RopeConstants* r) -> absl::Status {
    absl::StatusOr<cpu::RopeParams> rope = LaunchRope(l);
    if (!rope.ok()) return rope.status();
    r->dims = static_cast<int>(rope->dims);
    r->half_style = rope->style == cpu::RopeStyle::kHalf;
    auto it = rope_tables_.find(RopeKey(*rope));
    if (it == rope_tables_.end()) return LaunchError(l, "has no rope table");  // Create builds one per distinct rope
    r->table = reinterpret_cast<const float*>(it->second);
    return absl::OkStatus();
  };

  for (const ResolvedCall& rc : calls_[li]) {
    const KernelCall& c = rc.call;
    switch (c.kind) {
      case KernelKind::kMatmul: {
        MatmulParams mp{};
        const bool fused = l.op == "fused_matmul";
        mp.x = arena("input");
        if (mp.x == nullptr) return LaunchError(l, "needs an input");
        if (c.norm) {
          const DeviceWeight* g = weight("norm");
          absl::StatusOr<double> eps = l.Float("eps");
          if (g == nullptr || !eps.ok()) return LaunchError(l, "norm prologue needs norm and eps");
          mp.gamma = reinterpret_cast<const float*>(g->ptr);
          mp.eps = static_cast<float>(*eps);
        }
        mp.rows = rows;
        mp.max_rows = max_rows;
        mp.num_weights = static_cast<int>(c.weights.size());
        int64_t k = -1;
        for (size_t i = 0; i < c.weights.size(); ++i) {
          const int wi = c.weights[i];
          const DeviceWeight* w = weight(fused ? absl::StrCat("weight", wi) : std::string("weight"));
          if (w == nullptr) return LaunchError(l, absl::StrCat("missing weight", wi));
          if (k >= 0 && (w->cols != k || w->row_bytes != static_cast<uint64_t>(mp.row_bytes))) {
            return LaunchError(l, "fused weights differ in width");
          }
          k = w->cols;
          mp.row_bytes = static_cast<long long>(w->row_bytes);
          mp.w[i] = reinterpret_cast<const unsigned char*>(w->ptr);
          mp.tables[i] = reinterpret_cast<const unsigned char*>(w->table);
          mp.n[i] = static_cast<int>(w->rows);
          if (c.to_scratch) {
            mp.y[i] = reinterpret_cast<float*>(scratch_ + (wi == 0 ? 0 : scratch_bytes_ / 2));
          } else {
            const std::string role = fused ? absl::StrCat("result", c.epilogue == kEpilogueNone ? wi : 0) : "result";
            mp.y[i] = arena(role);
            if (mp.y[i] == nullptr) return LaunchError(l, "missing " + role);
          }
        }
        mp.k = static_cast<int>(k);
        // Scale tables for all the launch's weights or none (the kernel reads tables[0]).
        if (std::find(mp.tables, mp.tables + mp.num_weights, nullptr) != mp.tables + mp.num_weights) {
          std::fill(std::begin(mp.tables), std::end(mp.tables), nullptr);
        }
        if (c.epilogue == kEpilogueNone) {
          mp.total_n = 0;
          for (int i = 0; i < mp.num_weights; ++i) mp.total_n += mp.n[i];
        } else {
          mp.total_n = mp.n[0];
          if (c.epilogue == kEpilogueSiluMul && mp.n[1] != mp.n[0]) return LaunchError(l, "gate and up differ in rows");
          if (c.epilogue == kEpilogueResidualAdd) {
            mp.residual = arena("residual");
            if (mp.residual == nullptr) return LaunchError(l, "residual_add needs a residual");
          }
        }
        // The tensor-core paths' activations, written once per launch.
        ActivationsF16Params ap{};
        ap.x = mp.x;
        ap.gamma = mp.gamma;
        ap.eps = mp.eps;
        ap.k = mp.k;
        ap.rows = rows;
        ap.y = reinterpret_cast<unsigned short*>(x_f16_);
        mp.x_f16 = ap.y;
        absl::Status launched;
        // Two-token buckets of q8_0 run like decode (matmul_kernel, tile 2:
        // no activation launches, the weights' loads shared by both tokens).
        const bool pair = max_rows == kMatmulPairTile && pair_tile_ && rc.functions[kMatmulPairSlot] != nullptr;
        // A larger bucket's logit rows (usually one a sequence) on the tile
        // kernels' looping instances, one token tile of blocks: a grid sized
        // by the bucket was nearly all blocks that leave at once (256k for
        // q8_0's head in a 512-token step).
        const bool logits = max_rows >= kTensorCoreMinBucket && rows_are_logit_rows_[bucket][li];
        if (UsesF16Weights(c, li, bucket, mp.k)) {
          const bool q4k = UsesQ4KWgmma(c, li, bucket, mp.k);  // the rows as stored
          if (!q4k && rc.functions[kDequantizeSlot] != nullptr) {
            // The weights' rows one after another in f16, decoded at load
            // (resident) or by this step; the matmul reads them there.
            const bool at_load = rc.resident_f16 >= 0;
            if (resident_f16_ != 0 && !at_load) return LaunchError(l, "has no resident f16 weights");
            unsigned short* y = at_load ? reinterpret_cast<unsigned short*>(resident_f16_) + rc.resident_f16
                                        : reinterpret_cast<unsigned short*>(weights_f16_);
            int64_t first = 0;
            for (int i = 0; i < mp.num_weights; ++i) {
              mp.w[i] = reinterpret_cast<const unsigned char*>(y + first * mp.k);
              first += mp.n[i];
            }
            mp.row_bytes = 2LL * mp.k;
            if (!at_load) {
              absl::StatusOr<DequantizeParams> dp = DequantizeParamsOf(l, c, y);
              if (!dp.ok()) return dp.status();
              launched = launch(rc.functions[kDequantizeSlot], static_cast<unsigned>(first), (mp.k + 2047) / 2048, 256, 0, &*dp);
            }
          }
          // With the norm, a block a row: every block of a row sums the
          // whole row for its 1/rms (a 512-token step's norm took 11.4 us
          // with four blocks a row, 7.5 with one, on the H200).
          const bool block_a_row = ap.gamma != nullptr && max_rows >= kTensorCoreMinBucket;
          const unsigned chunks = block_a_row ? 1u : static_cast<unsigned>(ActivationsChunks(mp.k));
          if (launched.ok()) launched = launch(rc.functions[kActivationsF16Slot], max_rows, chunks, 256, 0, &ap);
          if (launched.ok()) {
            const int outputs = GemmTileOutputs(c.epilogue);
            const unsigned row_tiles = (mp.total_n + outputs - 1) / outputs;
            if (q4k) {
              mp.k_splits = Q4KWgmmaSplits(max_rows, mp.total_n, c.epilogue, mp.k);
              mp.k_partials = reinterpret_cast<float*>(partials_);
              const auto [gx, gy] = Q4KWgmmaGrid(max_rows, mp.total_n, c.epilogue);
              launched = Launch(rc.functions[kMatmulQ4KWgmmaSlot], gx, gy, mp.k_splits, 256, Q4KWgmmaSmemBytes(), &mp);
              if (launched.ok() && mp.k_splits > 1) {
                launched = launch(rc.functions[kMatmulSplitSumSlot], max_rows, (mp.total_n + 255) / 256, 256, 0, &mp);
              }
            } else if (wgmma_) {
              mp.k_splits = WgmmaSplits(max_rows, mp.total_n, c.epilogue, mp.k);
              mp.k_partials = reinterpret_cast<float*>(partials_);
              launched = Launch(rc.functions[kMatmulF16WgmmaSlot], (max_rows + kGemmM - 1) / kGemmM, row_tiles,
                                mp.k_splits, 256, WgmmaSmemBytes(), &mp);
              if (launched.ok() && mp.k_splits > 1) {
                launched = launch(rc.functions[kMatmulSplitSumSlot], max_rows, (mp.total_n + 255) / 256, 256, 0, &mp);
              }
            } else {
              launched = launch(rc.functions[kMatmulF16TcSlot], (max_rows + kGemmM - 1) / kGemmM, row_tiles, 256,
                                GemmSmemBytes(), &mp);
            }
          }
        } else if (max_rows >= kTensorCoreMinBucket && !rows_are_logit_rows_[bucket][li]) {
          launched = launch(rc.functions[kActivationsF16Slot], max_rows, ActivationsChunks(mp.k), 256, 0, &ap);
          if (launched.ok()) {
            launched = launch(rc.functions[kMatmulTcSlot], (mp.total_n + 63) / 64, (max_rows + 127) / 128, 256, 0, &mp);
          }
        } else if (!pair && max_rows > 1 && tile_int8_ && rc.call.has_tile_int8() && mp.k % 256 == 0) {
          // q4_K's buckets of 2-63 tokens and the logit rows of larger ones:
          // x as int8 codes, then its sums and scales (aligned: K is a multiple of 256).
          ActivationsInt8Params ip{};
          ip.x = mp.x;
          ip.gamma = mp.gamma;
          ip.eps = mp.eps;
          ip.k = mp.k;
          ip.rows = rows;
          ip.codes = reinterpret_cast<signed char*>(x_f16_);
          ip.sums = reinterpret_cast<unsigned short*>(x_f16_ + static_cast<CUdeviceptr>(max_rows) * mp.k);
          ip.scales = reinterpret_cast<float*>(ip.sums + static_cast<int64_t>(max_rows) * (mp.k / 256) * 16);
          mp.x_i8 = ip.codes;
          mp.x_i8_sums = ip.sums;
          mp.x_i8_scales = ip.scales;
          launched = launch(rc.functions[kActivationsInt8Slot], max_rows, 1, kActivationsInt8Threads, 0, &ip);
          if (launched.ok()) {
            const bool loop = logits && rc.functions[kMatmulTileInt8LogitsSlot] != nullptr;
            const bool wide = !loop && tile_int8_wide_ && max_rows > kTileInt8Tokens;
            const int tokens = wide ? 2 * kTileInt8Tokens : kTileInt8Tokens;
            const int token_blocks = loop ? 1 : (max_rows + tokens - 1) / tokens;
            mp.tile_row_tiles = tile_int8_row_tiles_ > 0
                                    ? tile_int8_row_tiles_
                                    : TileInt8RowTiles(mp.total_n, token_blocks, context_->multiprocessors());
            const int block_rows = kTileInt8Rows * mp.tile_row_tiles;
            const int slot = loop ? kMatmulTileInt8LogitsSlot : wide ? kMatmulTileInt8WideSlot : kMatmulTileInt8Slot;
            launched = launch(rc.functions[slot], token_blocks,
                              (mp.total_n + block_rows - 1) / block_rows, 32 * kTileInt8Warps, 0, &mp);
          }
        } else if (!pair && max_rows > 1 && rc.call.has_tile_tc() && mp.k % 32 == 0) {
          // Buckets of 2-63 tokens, and the logit rows of larger ones (few:
          // one per sequence in prefill), on tensor cores: x as f16 hi | lo |
          // sums per 32.
          ap.y_lo = ap.y + static_cast<int64_t>(max_rows) * mp.k;
          ap.sums = reinterpret_cast<float*>(ap.y_lo + static_cast<int64_t>(max_rows) * mp.k);
          mp.x_lo = ap.y_lo;
          mp.x_sums = ap.sums;
          launched = launch(rc.functions[kActivationsSplitSlot], max_rows, ActivationsChunks(mp.k), 256, 0, &ap);
          if (launched.ok()) {
            const bool loop = logits && rc.functions[kMatmulTileTcLogitsSlot] != nullptr;
            launched = launch(rc.functions[loop ? kMatmulTileTcLogitsSlot : kMatmulTileTcSlot],
                              (mp.total_n + kTileTcRowsPerBlock - 1) / kTileTcRowsPerBlock,
                              loop ? 1 : (max_rows + kTileTcTokensPerBlock - 1) / kTileTcTokensPerBlock, 256, 0, &mp);
          }
        } else if (max_rows == 1 && stream_decode_ && rc.functions[kMatmulStreamSlot] != nullptr) {
          // One wave of blocks (as many as fit the SMs at once: shared
          // memory and registers) taking row groups in turn.
          const int outputs = c.epilogue == kEpilogueSiluMul ? kStreamSlices / 2 : kStreamSlices;
          const int groups = (mp.total_n + outputs - 1) / outputs;
          const int per_sm =
              std::max(1, std::min(kStreamBlocksPerSm, smem_per_sm_ / static_cast<int>(rc.stream_smem + 1024)));
          launched = launch(rc.functions[kMatmulStreamSlot], std::min(groups, per_sm * context_->multiprocessors()), 1,
                            kStreamThreads, rc.stream_smem, &mp);
        } else {
          const int tile = pair ? kMatmulPairTile : max_rows > 1 ? kPrefillTile : 1;
          const bool decode = tile <= kMatmulPairTile;
          const DeviceWeight* first = FirstWeight(l, c);
          const int rows_per_warp = MatmulRowsPerWarp(first->storage, tile);
          const int row_blocks = (mp.total_n + kMatmulWarps * rows_per_warp - 1) / (kMatmulWarps * rows_per_warp);
          mp.ksplit = decode ? MatmulKSplit(row_blocks, context_->multiprocessors()) : 1;
          mp.prefetch_steps = decode && pdl_ ? prefetch_steps_ : 0;
          const int per_block = kMatmulWarps / mp.ksplit * rows_per_warp;
          mp.chunk = MatmulChunk(mp.k, tile);
          int blocks = (mp.total_n + per_block - 1) / per_block;
          // Decode launches of more blocks than fit at once (two per SM): one
          // wave whose blocks take row groups in rounds (matmul_kernel).
          if (decode && mp.ksplit == 1 && mp.chunk >= mp.k) blocks = std::min(blocks, 2 * context_->multiprocessors());
          if (tile == 1 && PrestagesNext(li, bucket)) {
            mp.stage_image = reinterpret_cast<float*>(stage_image_);
            mp.stage_counts = reinterpret_cast<unsigned*>(stage_counts_);
          }
          if (tile == 1 && li > 0 && (PrestagesNext(li - 1, bucket) || AttentionStagesNext(li - 1, bucket))) {
            mp.prestaged = reinterpret_cast<const float*>(stage_image_);
          }
          const int slot = pair ? kMatmulPairSlot : tile == 1 ? kMatmulDecodeSlot : kMatmulTiledSlot;
          launched = launch(rc.functions[slot], blocks,
                            (max_rows + tile - 1) / tile, 32 * kMatmulWarps,
                            static_cast<unsigned>(MatmulSmemFloats(mp.chunk, tile) * sizeof(float)), &mp);
        }
        if (!launched.ok()) return launched;
        break;
      }
      case KernelKind::kElementwise: {
        ElementwiseParams ep{};
        ep.op = c.elementwise_op;
        ep.rows = rows;
        ep.max_rows = max_rows;
        if (c.from_scratch) {
          absl::StatusOr<std::vector<int64_t>> n = l.IntList("n");
          if (!n.ok() || n->empty()) return LaunchError(l, "needs n");
          ep.a = reinterpret_cast<const float*>(scratch_);
          ep.b = reinterpret_cast<const float*>(scratch_ + scratch_bytes_ / 2);
          ep.y = arena("result0");
          ep.width = static_cast<int>((*n)[0]);
        } else {
          absl::StatusOr<int64_t> width = l.Int("width");
          if (c.elementwise_op == kBiasAdd) {
            const DeviceWeight* bias = weight("bias");
            if (bias == nullptr) return LaunchError(l, "needs a bias");
            ep.a = arena("input");
            ep.b = reinterpret_cast<const float*>(bias->ptr);
            ep.width = static_cast<int>(bias->cols);
          } else {
            if (!width.ok()) return width.status();
            ep.a = arena(c.elementwise_op == kSilu ? "input" : "lhs");
            ep.b = c.elementwise_op == kSilu ? nullptr : arena("rhs");
            ep.width = static_cast<int>(*width);
            if (c.elementwise_op != kSilu && ep.b == nullptr) return LaunchError(l, "needs rhs");
          }
          ep.y = arena("result");
        }
        if (ep.a == nullptr || ep.y == nullptr) return LaunchError(l, "needs its operand and result");
        const int64_t blocks = std::min<int64_t>((static_cast<int64_t>(max_rows) * ep.width + 255) / 256, 8192);
        if (absl::Status s = launch(rc.functions[0], static_cast<unsigned>(blocks), 1, 256, 0, &ep); !s.ok()) return s;
        break;
      }
      case KernelKind::kRmsNorm: {
        RmsNormParams np{};
        const DeviceWeight* g = weight("gamma");
        absl::StatusOr<double> eps = l.Float("eps");
        np.x = arena("input");
        np.y = arena("result");
        if (g == nullptr || !eps.ok() || np.x == nullptr || np.y == nullptr) return LaunchError(l, "needs input, gamma, result and eps");
        np.gamma = reinterpret_cast<const float*>(g->ptr);
        np.eps = static_cast<float>(*eps);
        np.width = static_cast<int>(g->cols);
        np.rows = rows;
        np.max_rows = max_rows;
        if (absl::Status s = launch(rc.functions[0], max_rows, 1, 256, 0, &np); !s.ok()) return s;
        break;
      }
      case KernelKind::kEmbedding: {
        EmbeddingParams ep{};
        const DeviceWeight* table = weight("table");
        ep.y = arena("result");
        if (table == nullptr || ep.y == nullptr) return LaunchError(l, "needs table and result");
        ep.table = reinterpret_cast<const unsigned char*>(table->ptr);
        ep.row_bytes = static_cast<long long>(table->row_bytes);
        ep.width = static_cast<int>(table->cols);
        ep.vocab = static_cast<int>(table->rows);
        ep.tokens = input(layout_.tokens);
        ep.rows = rows;
        ep.max_rows = max_rows;
        if (absl::Status s = launch(rc.functions[0], max_rows, 1, 256, 0, &ep); !s.ok()) return s;
        break;
      }
      case KernelKind::kGatherRows: {
        GatherRowsParams gp{};
        absl::StatusOr<int64_t> width = l.Int("width");
        gp.x = arena("input");
        gp.y = arena("result");
        if (!width.ok() || gp.x == nullptr || gp.y == nullptr) return LaunchError(l, "needs input, result and width");
        gp.width = static_cast<int>(*width);
        gp.indices = input(layout_.logit_rows);
        gp.count = counts + 2;
        gp.max_rows = max_rows;
        if (absl::Status s = launch(rc.functions[0], max_rows, 1, 256, 0, &gp); !s.ok()) return s;
        break;
      }
      case KernelKind::kArgmax: {
        ArgmaxParams ap{};
        absl::StatusOr<int64_t> width = l.Int("width");
        ap.x = arena("input");
        ap.y = reinterpret_cast<int*>(arena("result"));
        if (!width.ok() || ap.x == nullptr || ap.y == nullptr) return LaunchError(l, "needs input, result and width");
        ap.width = static_cast<int>(*width);
        ap.rows = rows;
        ap.max_rows = max_rows;
        if (absl::Status s = launch(rc.functions[0], max_rows, 1, kArgmaxThreads, 0, &ap); !s.ok()) return s;
        break;
      }
      case KernelKind::kRope: {
        RopeParams rp{};
        absl::StatusOr<int64_t> heads = l.Int("num_heads");
        absl::StatusOr<int64_t> hd = l.Int("head_dim");
        rp.x = arena("input");
        rp.y = arena("result");
        if (!heads.ok() || !hd.ok() || rp.x == nullptr || rp.y == nullptr) return LaunchError(l, "needs input, result, num_heads and head_dim");
        if (absl::Status s = rope_of(&rp.rope); !s.ok()) return s;
        rp.num_heads = static_cast<int>(*heads);
        rp.head_dim = static_cast<int>(*hd);
        rp.positions = input(layout_.positions);
        rp.rows = counts;
        rp.max_rows = max_rows;
        const uint64_t smem = static_cast<uint64_t>(*heads) * *hd * sizeof(float);
        if (smem > 48 * 1024) return LaunchError(l, "a token's heads exceed 48 KiB of shared memory");
        if (absl::Status s = launch(rc.functions[0], max_rows, 1, 256, static_cast<unsigned>(smem), &rp); !s.ok()) return s;
        break;
      }
      case KernelKind::kKvAppend:
      case KernelKind::kAttentionPrefill:
      case KernelKind::kAttention:
      case KernelKind::kAttentionGroup: {
        // attention_group_kernel from attention_group_min_ tokens where the plan has it, else attention_kernel.
        if (c.kind == KernelKind::kAttention && UsesAttentionGroup(li, max_rows)) break;
        if (c.kind == KernelKind::kAttentionGroup && !UsesAttentionGroup(li, max_rows)) break;
        AttentionParams ap{};
        absl::StatusOr<int64_t> heads = l.Int("num_heads");
        absl::StatusOr<int64_t> layer = l.Int("layer");
        absl::StatusOr<double> scale = l.Float("scale");
        ap.q = arena("q");
        ap.k = arena("k");
        ap.v = arena("v");
        ap.y = arena("result");
        if (!heads.ok() || !layer.ok() || !scale.ok() || !ap.q || !ap.k || !ap.v || !ap.y) {
          return LaunchError(l, "needs q, k, v, result, num_heads, layer and scale");
        }
        if (*layer < 0 || *layer >= plan_.pool.layers) return LaunchError(l, "layer outside the page pool");
        if (*heads <= 0 || *heads % plan_.pool.kv_heads != 0) return LaunchError(l, "num_heads is not a multiple of kv_heads");
        ap.pool = PagePoolView{reinterpret_cast<void*>(pool_), num_pages_, static_cast<int>(plan_.pool.page_size),
                               static_cast<int>(plan_.pool.kv_heads), static_cast<int>(plan_.pool.head_dim)};
        ap.layer = static_cast<int>(*layer);
        ap.num_heads = static_cast<int>(*heads);
        ap.scale = static_cast<float>(*scale);
        ap.use_rope = l.constants.Find("rope_theta") != nullptr;
        if (ap.use_rope) {
          if (absl::Status s = rope_of(&ap.rope); !s.ok()) return s;
        }
        ap.counts = reinterpret_cast<const StepCounts*>(counts);
        ap.positions = input(layout_.positions);
        ap.query_starts = input(layout_.query_starts);
        ap.context_lens = input(layout_.context_lens);
        ap.block_tables = input(layout_.block_tables);
        ap.pages_stride = static_cast<int>(layout_.pages_stride);
        ap.max_rows = max_rows;
        ap.splits = AttentionSplits(max_rows, AttentionBlocksY(li, *heads, max_rows), context_->multiprocessors());
        ap.partials = reinterpret_cast<float*>(partials_);
        ap.split_done = reinterpret_cast<unsigned*>(split_done_);
        if (IsDecodeAttention(c.kind) && AttentionStagesNext(li, bucket)) {
          ap.stage_image = reinterpret_cast<float*>(stage_image_);
        }
        // Prefill buckets: tiles of one sequence on tensor cores first; attention_kernel takes the other tokens.
        ap.prefill_tiles = max_rows >= kTensorCoreMinBucket &&
                           std::any_of(calls_[li].begin(), calls_[li].end(),
                                       [](const ResolvedCall& r) { return r.call.kind == KernelKind::kAttentionPrefill; });
        if (c.kind == KernelKind::kAttentionPrefill && !ap.prefill_tiles) break;
        // Buckets without prefill tiles: attention_kernel appends the rows
        // itself (one launch less per layer); the tiles read them from the pool.
        ap.append = append_in_attention_ ? !ap.prefill_tiles : max_rows == 1;
        if (c.kind == KernelKind::kKvAppend && ap.append) break;
        const unsigned grid_x = c.kind == KernelKind::kAttentionPrefill ? (max_rows + kPrefillTileTokens - 1) / kPrefillTileTokens
                                                                        : static_cast<unsigned>(max_rows);
        const unsigned grid_y = static_cast<unsigned>(
            c.kind == KernelKind::kKvAppend || c.kind == KernelKind::kAttentionGroup ? plan_.pool.kv_heads : *heads);
        const unsigned grid_z = IsDecodeAttention(c.kind) ? static_cast<unsigned>(ap.splits) : 1;
        if (absl::Status s = Launch(rc.functions[0], grid_x, grid_y, grid_z, 128, 0, &ap); !s.ok()) return s;
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DequantizeParams> CudaExecutor::DequantizeParamsOf(const PlanLaunch& l, const KernelCall& c,
                                                                  unsigned short* y) const {
  const bool fused = l.op == "fused_matmul";
  DequantizeParams dp{};
  dp.num_weights = static_cast<int>(c.weights.size());
  dp.y = y;
  for (size_t i = 0; i < c.weights.size(); ++i) {
    const DeviceWeight* w = LaunchWeight(l, fused ? absl::StrCat("weight", c.weights[i]) : std::string("weight"));
    if (w == nullptr) return LaunchError(l, absl::StrCat("missing weight", c.weights[i]));
    dp.w[i] = reinterpret_cast<const unsigned char*>(w->ptr);
    dp.n[i] = static_cast<int>(w->rows);
    dp.row_bytes = static_cast<long long>(w->row_bytes);
    dp.k = static_cast<int>(w->cols);
  }
  return dp;
}

absl::Status CudaExecutor::Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                                  void* params) {
  const DriverApi& api = *api_;
  void* args[] = {params};
  CUlaunchConfig config{};
  config.gridDimX = std::max(gx, 1u);
  config.gridDimY = std::max(gy, 1u);
  config.gridDimZ = std::max(gz, 1u);
  config.blockDimX = block;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = smem;
  config.hStream = stream_;
  CUlaunchAttribute overlap{};
  overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  overlap.value.programmaticStreamSerializationAllowed = 1;
  config.attrs = &overlap;
  config.numAttrs = pdl_ ? 1 : 0;
  KILN_CU(api, api.cuLaunchKernelEx(&config, f, args, nullptr));
  return absl::OkStatus();
}

absl::Status CudaExecutor::RecordBucket(size_t bucket) {
  const DriverApi& api = *api_;
  KILN_CU(api, api.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  absl::Status recorded = absl::OkStatus();
  for (size_t i = 0; i < plan_.launches.size() && recorded.ok(); ++i) recorded = RecordLaunch(i, bucket);
  CUgraph graph = nullptr;
  const CUresult end = api.cuStreamEndCapture(stream_, &graph);
  if (!recorded.ok()) {
    if (graph != nullptr) api.cuGraphDestroy(graph);
    return recorded;
  }
  KILN_CU(api, end);
  const CUresult inst = api.cuGraphInstantiateWithFlags(&graphs_[bucket], graph, 0);
  api.cuGraphDestroy(graph);
  KILN_CU(api, inst);
  return absl::OkStatus();
}

absl::StatusOr<size_t> CudaExecutor::LaunchStep(const StepBatch& batch) {
  absl::StatusOr<size_t> bucket = ValidateStepBatch(plan_, num_pages_, batch);
  if (!bucket.ok()) return bucket.status();
  const int64_t T = static_cast<int64_t>(batch.tokens.size());
  const int64_t S = static_cast<int64_t>(batch.context_lens.size());
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  if (S > layout_.max_seqs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step: %d sequences exceed the CUDA backend's %d per step", S, layout_.max_seqs));
  }
  if (absl::Status s = context_->MakeCurrent(); !s.ok()) return s;
  int32_t* in = host_inputs_;
  in[layout_.counts + 0] = static_cast<int32_t>(T);
  in[layout_.counts + 1] = static_cast<int32_t>(S);
  in[layout_.counts + 2] = static_cast<int32_t>(R);
  std::copy(batch.tokens.begin(), batch.tokens.end(), in + layout_.tokens);
  std::copy(batch.positions.begin(), batch.positions.end(), in + layout_.positions);
  std::copy(batch.logit_rows.begin(), batch.logit_rows.end(), in + layout_.logit_rows);
  std::copy(batch.query_starts.begin(), batch.query_starts.end(), in + layout_.query_starts);
  std::copy(batch.context_lens.begin(), batch.context_lens.end(), in + layout_.context_lens);
  const int64_t pages = std::min<int64_t>(batch.pages_per_seq, layout_.pages_stride);
  for (int64_t s = 0; s < S; ++s) {
    std::copy_n(batch.block_tables.begin() + s * batch.pages_per_seq, pages,
                in + layout_.block_tables + s * layout_.pages_stride);
  }
  const DriverApi& api = *api_;
  const uint64_t copy_bytes = (layout_.block_tables + S * layout_.pages_stride) * sizeof(int32_t);
  KILN_CU(api, api.cuMemcpyHtoDAsync(inputs_, host_inputs_, copy_bytes, stream_));
  KILN_CU(api, api.cuGraphLaunch(graphs_[*bucket], stream_));
  return *bucket;
}

absl::StatusOr<std::span<const float>> CudaExecutor::Step(const StepBatch& batch) {
  absl::StatusOr<size_t> bucket = LaunchStep(batch);
  if (!bucket.ok()) return bucket.status();
  const DriverApi& api = *api_;
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  const PlanBinding& out = plan_.results.front();
  const uint64_t logits_bytes = static_cast<uint64_t>(R) * n_vocab_ * sizeof(float);
  KILN_CU(api, api.cuMemcpyDtoHAsync(host_logits_, arena_ + out.arena[*bucket], logits_bytes, stream_));
  KILN_CU(api, WaitForStep());
  return std::span<const float>(host_logits_, static_cast<size_t>(R * n_vocab_));
}

absl::StatusOr<std::span<const int32_t>> CudaExecutor::StepGreedy(const StepBatch& batch) {
  if (argmax_ == nullptr) return Executor::StepGreedy(batch);
  absl::StatusOr<size_t> bucket = LaunchStep(batch);
  if (!bucket.ok()) return bucket.status();
  const DriverApi& api = *api_;
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  ArgmaxParams ap{};
  ap.x = reinterpret_cast<const float*>(arena_ + plan_.results.front().arena[*bucket]);
  ap.y = reinterpret_cast<int*>(greedy_ids_);
  ap.width = static_cast<int>(n_vocab_);
  ap.rows = reinterpret_cast<const int*>(inputs_ + (layout_.counts + 2) * sizeof(int32_t));  // R
  ap.max_rows = static_cast<int>(R);
  void* args[] = {&ap};
  KILN_CU(api, api.cuLaunchKernel(argmax_, static_cast<unsigned>(R), 1, 1, kArgmaxThreads, 1, 1, 0, stream_, args, nullptr));
  // The pinned logits buffer (R x n_vocab floats) has room for the R ids.
  int32_t* ids = reinterpret_cast<int32_t*>(host_logits_);
  KILN_CU(api, api.cuMemcpyDtoHAsync(ids, greedy_ids_, R * sizeof(int32_t), stream_));
  KILN_CU(api, WaitForStep());
  return std::span<const int32_t>(ids, static_cast<size_t>(R));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> CreateCudaExecutor(const Program& program, const BackendOptions& options) {
  return CudaExecutor::Create(program, options);
}

absl::StatusOr<std::string> CudaTargetOfDevice(const BackendOptions& options) {
  absl::StatusOr<DeviceInfo> device = QueryDevice(options.device);
  if (!device.ok()) return device.status();
  const int sm = device->sm;
  if (sm < 80) {
    return absl::UnavailableError(absl::StrFormat("%s is sm_%d; kiln's CUDA kernels need sm_80 or newer",
                                                  device->name, sm));
  }
  // Codegen's targets are sm_80, sm_89 and sm_90 (as sm_90a, which runs on
  // sm_90 only); sm_80's cubin runs on every 8.x and its PTX JITs beyond.
  return absl::StrCat("cuda:sm_", sm == 89 || sm == 90 ? sm : 80);
}

}  // namespace kiln::cuda

#include "runtime/vulkan/vulkan_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/cpu/rope.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/executor/repack.h"
#include "runtime/util/thread_cpu_time.h"
#include "runtime/vulkan/vulkan_api.h"
#include "runtime/vulkan/vulkan_device.h"
#include "runtime/vulkan/vulkan_bundle.h"
#include "runtime/vulkan/vulkan_kernels.h"

namespace kiln::vulkan {
namespace {

// An A/B switch: the environment variable `name` set to 0.
bool SwitchedOff(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string_view(value) == "0";
}

// The step inputs' header (kernels-templates/vulkan/common.glsl reads it).
// The block tables come last among the inputs: a bucket of B tokens copies
// only B sequences' worth of them to the device.
enum IoField : int32_t {
  kIoT = 0, kIoS, kIoR, kIoPagesPerSeq, kIoTokens, kIoPositions, kIoQueryStarts, kIoContextLens, kIoLogitRows,
  kIoBlockTables, kIoLogitsOut, kIoHeaderInts = 16
};

// Mirrors `Params` of common.glsl.
struct PushConstants {
  uint32_t in0 = 0, in1 = 0, out0 = 0, out1 = 0, out2 = 0, rows_are_logit_rows = 0, kv_base = 0, kv_half = 0;
  uint32_t splits = 1;
  uint32_t tokens_first = 0;
  uint32_t row_rms = 0;
  uint32_t bucket = 0;
  int32_t io_field[7] = {};  // io_offsets_[kIoTokens + i]
  uint32_t column_tile_base = 0;
  int32_t rows_gate = 0;  // common.glsl's launch_rows
};


// A byte range of one buffer a dispatch reads or writes, for barriers.
struct Access {
  int buffer;  // 0 arena, 1 kv, 2 io, 3 attention partials
  int64_t begin, end;
  bool Overlaps(const Access& o) const { return buffer == o.buffer && begin < o.end && o.begin < end; }
};

class VulkanExecutor final : public Executor {
 public:
  VulkanExecutor(Plan plan, const VulkanExecutorOptions& options) : plan_(std::move(plan)), options_(options) {}
  ~VulkanExecutor() override;

  absl::Status Init(const WeightSource& weights, std::span<const uint8_t> bundle);
  absl::StatusOr<std::span<const float>> Step(const StepBatch& batch) override;
  absl::StatusOr<std::span<const int32_t>> StepGreedy(const StepBatch& batch) override;
  absl::StatusOr<std::vector<KernelTime>> ProfileStep(const StepBatch& batch) override;
  std::optional<double> DeviceWaitCpuSeconds() const override { return wait_cpu_seconds_; }
  std::string Describe() const override {
    if (f16_copy_bytes_ == 0) return dev_.description();
    return f16_copy_bytes_ >= (int64_t{1} << 30)
               ? absl::StrFormat("%s; f16 copy of the weights for prefill: %.1f GiB", dev_.description(),
                                 f16_copy_bytes_ / 1073741824.0)
               : absl::StrFormat("%s; f16 copy of the weights for prefill: %.1f MiB", dev_.description(),
                                 f16_copy_bytes_ / 1048576.0);
  }
  const Plan& plan() const override { return plan_; }
  int64_t num_pages() const override { return num_pages_; }

 private:
  // What a dispatch serves: a plan launch, or the step's last dispatch, which
  // copies the logits (Step) or picks the greedy ids (StepGreedy).
  enum class Role { kLaunch, kCopyLogits, kGreedyIds };
  struct Dispatch {
    PlannedDispatch planned;
    size_t launch = 0;  // index into plan_.launches, or launches.size() for the last dispatch
    Role role = Role::kLaunch;
    // A matmul of logit rows with a decode variant: its twin, recorded
    // before it in prefill-sized buckets, runs that variant where a step
    // has at most decode_max_bucket logit rows (a prefill step's one: its
    // tiled tiles would be all but empty), and the launch itself where it
    // has more (push constant rows_gate).
    bool logits_twin = false;
    VkPipeline pipeline = VK_NULL_HANDLE;
    VkPipeline decode_pipeline = VK_NULL_HANDLE;  // where planned.decode_kernel is set
    VkPipeline tiled_pipeline = VK_NULL_HANDLE;   // where planned.tiled_kernel is set
    // planned.coopmat2_prefill_kernel, else planned.prefill_kernel, where
    // the device and the artifact have it; its tokens a workgroup and its
    // profile label.
    VkPipeline prefill_attention_pipeline = VK_NULL_HANDLE;
    int64_t prefill_attention_tokens = 1;
    const char* prefill_attention_label = "";
    VkPipeline fold_pipeline = VK_NULL_HANDLE;  // planned.fold_kernel, where split steps fold the combine
    // The prefill variant tiled_pipeline runs: its tile and its profile label.
    int64_t tiled_tokens = 1, tiled_columns = 1;
    const char* tiled_label = " (tiled)";
    // matmul_coopmat, and matmul_decode's DP4 instance, read their
    // activations 16 bytes at a time.
    bool tiled_reads_16_bytes = false, decode_reads_16_bytes = false;
    VkDescriptorSet set = VK_NULL_HANDLE;
    // tiled_pipeline is planned.coopmat_f16_kernel: it runs with f16_set,
    // whose weight slots hold the f16 rows.
    bool tiled_f16 = false;
    VkDescriptorSet f16_set = VK_NULL_HANDLE;
    // tiled_pipeline is planned.coopmat2_kernel (on f16_set): act_pipeline
    // (planned.activations_f16_kernel) runs before it.
    VkPipeline act_pipeline = VK_NULL_HANDLE;
    // planned.coopmat2_small_kernel, for buckets whose grid of tiled_tokens x
    // tiled_columns tiles would not fill the GPU.
    VkPipeline small_pipeline = VK_NULL_HANDLE;
    // planned.silu_mul_kernel, after tiled_pipeline where that is
    // matmul_coopmat2 on a silu_mul launch.
    VkPipeline silu_pipeline = VK_NULL_HANDLE;
    // planned.coopmat2_slice_kernels, side by side instead of tiled_pipeline
    // where a bucket's grid of its large tiles would leave SMs idle, then
    // planned.split_sum_kernel (none where the artifact lacks them).
    std::vector<VkPipeline> slice_pipelines;
    VkPipeline split_sum_pipeline = VK_NULL_HANDLE;
  };
  absl::Status UploadWeights(const WeightSource& weights);
  // Where the tensor-core prefill reads quantised weights, decides whether
  // to keep an f16 copy of them (memory allowing) and places it (placed_f16_).
  absl::Status PlaceF16Copy();
  // Runs the copy kernels (dequant_f16.comp) of the placed weights, once.
  absl::Status MakeF16Copy();
  absl::Status CreatePipelines(const std::vector<SpirvModule>& modules);
  absl::Status WriteDescriptorSets();
  // The bucket's step as a command buffer, ending in copy_logits, or with
  // `greedy` in the greedy ids; with `timestamps`, query i + 1 is written
  // after dispatch i (query 0 before the first) and `labels` gets each
  // dispatch's kernel and launch.
  absl::StatusOr<VkCommandBuffer> Record(size_t bucket, bool greedy, VkQueryPool timestamps = VK_NULL_HANDLE,
                                         std::vector<KernelTime>* labels = nullptr);
  // Validates the batch and writes it into the step inputs; returns the bucket.
  absl::StatusOr<size_t> WriteInputs(const StepBatch& batch);
  // Submits `cb` and waits for it.
  absl::Status SubmitAndWait(VkCommandBuffer cb);
  int64_t ArenaFloats(const std::string& role, const PlanLaunch* l, size_t bucket) const;
  // Where kRowRmsRole lies: past the plan's arena, 256-byte aligned.
  int64_t RowRmsFloats() const { return (plan_.arena_bytes.back() + 255) / 256 * 64; }
  // Timestamps of a profiled step: one before the first dispatch and one
  // after each (a launch on matmul_coopmat2 is up to three dispatches).
  size_t MaxTimestamps() const { return 3 * dispatches_.size() + 1; }
  // Where matmul_coopmat2's f16 activations lie: past the 1 / rms, 256-byte
  // aligned (act_f16_halves_ of them; none where no launch runs it).
  int64_t ActF16Floats() const { return (RowRmsFloats() + plan_.buckets.back() + 63) / 64 * 64; }
  // Then gate's and up's sums of a silu_mul launch on matmul_coopmat2
  // (silu_floats_ of them), 256-byte aligned.
  int64_t SiluFloats() const { return ActF16Floats() + (act_f16_halves_ / 2 + 63) / 64 * 64; }

  Plan plan_;
  VulkanExecutorOptions options_;
  VulkanDevice dev_;  // first: destroyed after everything made on it

  Buffer weights_, weights_f16_, arena_, kv_, io_, step_inputs_, partials_, dummy_;
  struct Placed {
    VkDeviceSize offset = 0, size = 0;
  };
  std::map<std::string, Placed> placed_weights_;
  // The f16 copy (in weights_f16_) of each weight the f16 prefill variant
  // reads, except f16 weights (read in place); empty without the copy.
  std::map<std::string, Placed> placed_f16_;
  bool f16_prefill_ = false;  // the tensor-core prefill may run on f16 rows
  // Split steps merge attention's partials in the attention dispatch
  // (paged_attention's FOLD) instead of attention_combine's.
  bool fold_combine_ = false;
  // Workgroup-scope cooperative matrices (matmul_coopmat2, paged_attention_coopmat2)
  // where the device has them; KILN_VULKAN_COOPMAT2=0 keeps them off.
  bool coopmat2_ = false;
  int64_t f16_copy_bytes_ = 0;
  int64_t act_f16_halves_ = 0;
  int64_t silu_floats_ = 0;
  std::map<std::string, VkPipeline> f16_copy_pipelines_;  // by weight name
  std::set<std::string> module_keys_;                      // the artifact's kernel instances
  std::vector<std::pair<RopeTable, Placed>> rope_tables_;

  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout_ = VK_NULL_HANDLE;
  std::map<std::string, VkPipeline> pipelines_;
  VkDescriptorPool descriptor_pool_ = VK_NULL_HANDLE;
  std::vector<VkCommandBuffer> commands_;  // one per bucket
  // One per bucket where the artifact has the greedy ids' kernel (artifacts
  // from before it: empty, and StepGreedy reads the logits).
  std::vector<VkCommandBuffer> greedy_commands_;
  std::vector<int32_t> greedy_ids_;
  VkFence fence_ = VK_NULL_HANDLE;
  double wait_cpu_seconds_ = 0;  // thread CPU time inside vkWaitForFences, for DeviceWaitCpuSeconds

  std::vector<Dispatch> dispatches_;
  std::vector<std::vector<bool>> logit_rows_;  // [launch][bucket]
  int64_t num_pages_ = 0, n_vocab_ = 0, max_token_ = 0;
  int64_t kv_half_elements_ = 0;  // of a layer's K (or V) half: f32 or f16 as the plan's pool
  // A GPU needs many workgroups per decode step; a CPU device (lavapipe) has
  // a few threads and pays for every workgroup.
  int64_t max_attention_splits_ = kMaxAttentionSplits;
  int64_t io_offsets_[kIoHeaderInts] = {};
  int64_t pages_per_seq_capacity_ = 0;  // block-table entries per sequence the io buffer holds
  std::vector<float> logits_;
};

VulkanExecutor::~VulkanExecutor() {
  if (dev_.device() != VK_NULL_HANDLE) {
    dev_.api().vkQueueWaitIdle(dev_.queue());
    if (fence_) dev_.api().vkDestroyFence(dev_.device(), fence_, nullptr);
    if (descriptor_pool_) dev_.api().vkDestroyDescriptorPool(dev_.device(), descriptor_pool_, nullptr);
    for (auto& [key, p] : pipelines_) dev_.api().vkDestroyPipeline(dev_.device(), p, nullptr);
    if (pipeline_layout_) dev_.api().vkDestroyPipelineLayout(dev_.device(), pipeline_layout_, nullptr);
    if (set_layout_) dev_.api().vkDestroyDescriptorSetLayout(dev_.device(), set_layout_, nullptr);
    for (Buffer* b : {&weights_, &weights_f16_, &arena_, &kv_, &io_, &step_inputs_, &partials_, &dummy_}) {
      dev_.DestroyBuffer(*b);
    }
  }
}

absl::Status VulkanExecutor::UploadWeights(const WeightSource& source) {
  // Layout first (sizes from the plan), then fill: no weight is held twice.
  VkDeviceSize at = 0;
  // Kernels read whole 32-bit words: a weight's range ends on a word.
  auto place = [&](VkDeviceSize bytes) {
    at = (at + dev_.storage_align() - 1) / dev_.storage_align() * dev_.storage_align();
    Placed p{at, bytes};
    at += (bytes + 3) / 4 * 4;
    return p;
  };
  for (const PlanWeight& w : plan_.weights) {
    absl::StatusOr<cpu::WeightStorage> storage = cpu::ParseWeightStorage(w.storage);
    if (!storage.ok()) return absl::InvalidArgumentError(absl::StrCat("weight '", w.name, "': ", storage.status().message()));
    const int64_t rows = w.shape.size() == 2 ? w.shape[0] : 1, cols = w.shape.back();
    const std::optional<uint64_t> row = storage->RowBytes(cols);
    const VkDeviceSize bytes = w.shape.size() == 1 ? cols * 4 : (row ? *row * rows : 0);
    if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat("weight '", w.name, "': bad shape for ", w.storage));
    if (bytes > dev_.props().limits.maxStorageBufferRange) {
      return absl::ResourceExhaustedError(absl::StrFormat("vulkan: weight '%s' (%d bytes) exceeds the device's %d-byte "
                                                          "storage buffer range", w.name, bytes,
                                                          dev_.props().limits.maxStorageBufferRange));
    }
    placed_weights_[w.name] = place(bytes);
  }
  for (const Dispatch& d : dispatches_) {
    if (!d.planned.uses_rope_table && !d.planned.appends_kv_rope) continue;
    bool have = false;
    for (const auto& [t, p] : rope_tables_) have = have || t == d.planned.rope;
    if (!have) {
      rope_tables_.emplace_back(d.planned.rope,
                                place(static_cast<VkDeviceSize>(plan_.pool.max_tokens) * d.planned.rope.dims * 4));
    }
  }
  absl::StatusOr<Buffer> buffer = dev_.CreateBuffer(std::max<VkDeviceSize>(at, 16), false, "weights");
  if (!buffer.ok()) return buffer.status();
  weights_ = *buffer;
  if (absl::Status s = PlaceF16Copy(); !s.ok()) return s;

  // Host-visible weights (lavapipe, unified memory) are written in place; else
  // through a staging buffer, a few copies at a time.
  Buffer staging;
  VkDeviceSize staged = 0;
  std::vector<VkBufferCopy> copies;
  auto flush = [&]() -> absl::Status {
    if (copies.empty()) return absl::OkStatus();
    absl::Status s = dev_.RunOnce([&](VkCommandBuffer cb) {
      dev_.api().vkCmdCopyBuffer(cb, staging.buffer, weights_.buffer, static_cast<uint32_t>(copies.size()), copies.data());
    });
    copies.clear();
    staged = 0;
    return s;
  };
  if (!weights_.mapped) {
    absl::StatusOr<Buffer> s = dev_.CreateBuffer(std::min<VkDeviceSize>(at, 64u << 20), true, "staging");
    if (!s.ok()) return s.status();
    staging = *s;
  }
  auto write = [&](VkDeviceSize offset, const uint8_t* data, VkDeviceSize bytes) -> absl::Status {
    if (weights_.mapped) {
      std::memcpy(static_cast<uint8_t*>(weights_.mapped) + offset, data, bytes);
      return absl::OkStatus();
    }
    while (bytes > 0) {
      if (staged == staging.size) {
        if (absl::Status s = flush(); !s.ok()) return s;
      }
      const VkDeviceSize n = std::min(bytes, staging.size - staged);
      std::memcpy(static_cast<uint8_t*>(staging.mapped) + staged, data, n);
      copies.push_back(VkBufferCopy{staged, offset, n});
      staged += n;
      offset += n;
      data += n;
      bytes -= n;
    }
    return absl::OkStatus();
  };
  for (const PlanWeight& w : plan_.weights) {
    absl::StatusOr<WeightBytes> src = source(w.name);
    if (!src.ok()) return src.status();
    const Placed& p = placed_weights_[w.name];
    const int64_t rows = w.shape.size() == 2 ? w.shape[0] : 1, cols = w.shape.back();
    const std::optional<uint64_t> src_row = src->storage.RowBytes(cols);
    if (!src_row || *src_row * rows != src->data.size()) {
      return absl::InvalidArgumentError(absl::StrFormat("weight '%s': %d bytes of %s do not hold the plan's [%d, %d]",
                                                        w.name, src->data.size(), src->storage.Name(), rows, cols));
    }
    std::vector<uint8_t> owned;
    std::span<const uint8_t> bytes = src->data;
    if (w.shape.size() == 1) {
      // Vectors (norm gains, biases) are read as f32, as the CPU backend does.
      owned.resize(cols * 4);
      std::span<float> out(reinterpret_cast<float*>(owned.data()), cols);
      if (absl::Status s = cpu::DequantizeRow(src->storage, src->data, out); !s.ok()) return s;
      bytes = owned;
    } else {
      absl::StatusOr<cpu::WeightStorage> want = cpu::ParseWeightStorage(w.storage);
      if (!want.ok()) return want.status();
      if (src->storage.Name() != want->Name()) {
        absl::StatusOr<std::vector<uint8_t>> repacked = RepackWeight(src->storage, *want, rows, cols, src->data);
        if (!repacked.ok()) {
          return absl::Status(repacked.status().code(), absl::StrCat("weight '", w.name, "': ", repacked.status().message()));
        }
        owned = *std::move(repacked);
        bytes = owned;
      }
    }
    if (bytes.size() != p.size) return absl::InternalError(absl::StrCat("weight '", w.name, "': size changed in repack"));
    if (absl::Status s = write(p.offset, bytes.data(), bytes.size()); !s.ok()) return s;
  }
  // cos/sin per (position, pair), as the CPU backend computes them.
  for (const auto& [t, p] : rope_tables_) {
    cpu::RopeParams params;
    params.theta = t.theta;
    params.dims = t.dims;
    params.linear_factor = t.linear_factor;
    const std::vector<float> table = cpu::RopeTable(params, plan_.pool.max_tokens);
    if (absl::Status s = write(p.offset, reinterpret_cast<const uint8_t*>(table.data()), table.size() * 4); !s.ok()) {
      return s;
    }
  }
  absl::Status s = flush();
  if (staging.buffer) dev_.DestroyBuffer(staging);
  return s;
}

// f16 weights: the f16 prefill variant reads them in place (no copy).
bool IsF16(const PlanWeight& w) {
  absl::StatusOr<cpu::WeightStorage> s = cpu::ParseWeightStorage(w.storage);
  return s.ok() && !s->grouped && s->ggml == GgmlType::kF16;
}

absl::Status VulkanExecutor::PlaceF16Copy() {
  // Decoding q4_K in the tensor-core kernel's staging took half its time
  // (docs/perf/vulkan-h200.md, session 14): copies staged as they are read
  // take that away, for 2 bytes a weight. KILN_VULKAN_F16_COPY=0 keeps the
  // decoding kernel (and reads f16 weights through it too).
  f16_prefill_ = dev_.has_coopmat() && !SwitchedOff("KILN_VULKAN_F16_COPY");
  if (!f16_prefill_) return absl::OkStatus();
  std::map<std::string, Placed> placed;
  VkDeviceSize at = 0;
  const VkDeviceSize range = dev_.props().limits.maxStorageBufferRange;
  for (const Dispatch& d : dispatches_) {
    // (An artifact from a kiln without these instances runs the decoding kernel.)
    bool have = d.planned.coopmat_f16_kernel && module_keys_.count(d.planned.coopmat_f16_kernel->Key()) > 0;
    for (const std::optional<KernelInstance>& copy : d.planned.f16_copy_kernels) {
      have = have && (!copy || module_keys_.count(copy->Key()) > 0);
    }
    if (!have) continue;
    for (size_t slot = 0; slot < 3; ++slot) {
      const std::string& name = d.planned.weights[slot];
      if (name.empty() || placed.count(name) > 0 || !d.planned.f16_copy_kernels[slot]) continue;
      const PlanWeight* w = plan_.FindWeight(name);
      if (w == nullptr) continue;
      const VkDeviceSize bytes = static_cast<VkDeviceSize>(w->shape[0]) * w->shape[1] * 2;
      if (bytes > range) return absl::OkStatus();  // no copy: a binding could not hold it
      at = (at + dev_.storage_align() - 1) / dev_.storage_align() * dev_.storage_align();
      placed[name] = Placed{at, bytes};
      at += bytes;
    }
  }
  if (placed.empty()) return absl::OkStatus();
  // Memory allowing: an automatic KV pool loses at most a quarter of what it
  // would get (as the CUDA backend's copy); an explicit one must fit beside
  // it in 95% of the memory left.
  const VkDeviceSize free = dev_.device_heap_free();
  bool fits = at <= free / 4;
  if (options_.num_pages > 0 || options_.kv_fraction <= 0) {
    const int64_t pages = options_.num_pages > 0 ? options_.num_pages
                                                 : (plan_.pool.max_tokens + plan_.pool.page_size - 1) / plan_.pool.page_size;
    const VkDeviceSize kv = static_cast<VkDeviceSize>(pages) * plan_.pool.page_bytes();
    fits = at + kv + static_cast<VkDeviceSize>(plan_.arena_bytes.back()) <= free / 20 * 19;
  }
  if (!fits) return absl::OkStatus();
  absl::StatusOr<Buffer> buffer = dev_.CreateBuffer(at, false, "f16 weight copy");
  if (!buffer.ok()) return absl::OkStatus();  // the decoding kernel then; the memory stays the KV pool's
  weights_f16_ = *buffer;
  placed_f16_ = std::move(placed);
  f16_copy_bytes_ = static_cast<int64_t>(at);
  return absl::OkStatus();
}

absl::Status VulkanExecutor::CreatePipelines(const std::vector<SpirvModule>& modules) {
  std::map<std::string, const SpirvModule*> by_key;
  for (const SpirvModule& m : modules) by_key[m.Key()] = &m;
  if (absl::Status st = dev_.CreateComputeLayouts(8, sizeof(PushConstants), &set_layout_, &pipeline_layout_); !st.ok()) {
    return st;
  }
  // One pipeline per instance key, shared by every dispatch of that instance.
  auto pipeline_for = [&](const KernelInstance& k) -> absl::StatusOr<VkPipeline> {
    const std::string key = k.Key();
    if (auto have = pipelines_.find(key); have != pipelines_.end()) return have->second;
    auto m = by_key.find(key);
    if (m == by_key.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "vulkan: the artifact's kernels lack '", key, "' (compiled by another kiln version? recompile with --target vulkan)"));
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<VkPipeline> pipeline = dev_.CreateComputePipeline(
        m->second->words, m->second->entry_point.c_str(), pipeline_layout_, absl::StrCat("'", key, "'"));
    if (!pipeline.ok()) return pipeline.status();
    // A driver's first compile of a large kernel can take tens of seconds
    // (NVIDIA's, of the workgroup-scope matmuls: ~140 s in all for an 8B
    // model, docs/perf/vulkan-h200.md, session 22): say so rather than look hung.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 2.0) {
      std::fprintf(stderr, "vulkan: the driver took %.1f s to build pipeline '%s' (%zu built so far)\n", seconds,
                   key.c_str(), pipelines_.size() + 1);
    }
    pipelines_[key] = *pipeline;
    return *pipeline;
  };
  // Query-tiled prefill attention where the artifact has it (H200: 18.1 ->
  // 7.3 ms of a 512-token step, docs/perf/vulkan-h200.md, session 19);
  // KILN_VULKAN_PREFILL_ATTENTION=0 keeps a workgroup per token.
  const bool prefill_attention = !SwitchedOff("KILN_VULKAN_PREFILL_ATTENTION");
  // On workgroup-scope tensor cores where the device and the artifact have
  // them; KILN_VULKAN_CM2_ATTENTION=0 (or KILN_VULKAN_COOPMAT2=0) keeps the
  // query tiles on CUDA cores.
  const bool cm2_attention = prefill_attention && coopmat2_ && !SwitchedOff("KILN_VULKAN_CM2_ATTENTION");
  // Split steps' attention merges its own partials where the artifact has
  // every attention's FOLD instance (no combine dispatch and barrier);
  // KILN_VULKAN_FOLD_COMBINE=0 keeps attention_combine.
  fold_combine_ = !SwitchedOff("KILN_VULKAN_FOLD_COMBINE");
  for (const Dispatch& d : dispatches_) {
    if (!d.planned.uses_partials || d.planned.only_when_split) continue;
    fold_combine_ = fold_combine_ && d.planned.fold_kernel && module_keys_.count(d.planned.fold_kernel->Key()) > 0;
  }
  for (Dispatch& d : dispatches_) {
    absl::StatusOr<VkPipeline> p = pipeline_for(d.planned.kernel);
    if (!p.ok()) return p.status();
    d.pipeline = *p;
    if (d.planned.decode_kernel) {
      // DP4 stages its codes four lanes a group (subgroup shuffles).
      const bool dp4 = dev_.has_integer_dot() && dev_.shuffle_width() >= 4 && d.planned.decode_dp4_kernel;
      absl::StatusOr<VkPipeline> decode = pipeline_for(dp4 ? *d.planned.decode_dp4_kernel : *d.planned.decode_kernel);
      if (!decode.ok()) return decode.status();
      d.decode_pipeline = *decode;
      d.decode_reads_16_bytes = dp4;
    }
    if (d.planned.tiled_kernel) {
      // On tensor cores where the device has them (the artifact carries both).
      const bool coopmat = dev_.has_coopmat() && d.planned.coopmat_kernel;
      // On f16 rows where every weight has them (a copy, or its own).
      bool f16 = coopmat && f16_prefill_ && d.planned.coopmat_f16_kernel &&
                 module_keys_.count(d.planned.coopmat_f16_kernel->Key()) > 0;
      for (const std::string& name : d.planned.weights) {
        if (f16 && !name.empty() && placed_f16_.count(name) == 0) f16 = IsF16(*plan_.FindWeight(name));
      }
      absl::StatusOr<VkPipeline> tiled = pipeline_for(f16       ? *d.planned.coopmat_f16_kernel
                                                      : coopmat ? *d.planned.coopmat_kernel
                                                                : *d.planned.tiled_kernel);
      if (!tiled.ok()) return tiled.status();
      d.tiled_pipeline = *tiled;
      d.tiled_f16 = f16;
      d.tiled_tokens = coopmat ? d.planned.coopmat_tokens_per_group : d.planned.tiled_tokens_per_group;
      d.tiled_columns = coopmat ? d.planned.coopmat_columns_per_group : d.planned.tiled_columns_per_group;
      d.tiled_label = f16 ? " (tensor cores, f16 rows)" : coopmat ? " (tensor cores)" : " (tiled)";
      for (size_t slot = 0; f16 && slot < 3; ++slot) {
        const std::string& name = d.planned.weights[slot];
        if (name.empty() || placed_f16_.count(name) == 0 || f16_copy_pipelines_.count(name) > 0) continue;
        absl::StatusOr<VkPipeline> copy = pipeline_for(*d.planned.f16_copy_kernels[slot]);
        if (!copy.ok()) return copy.status();
        f16_copy_pipelines_[name] = *copy;
      }
      d.tiled_reads_16_bytes = coopmat;
      // On workgroup-scope cooperative matrices where the device and the
      // artifact have them (the arena then has room for their f16
      // activations: act_f16_halves_, set in Init).
      if (f16 && act_f16_halves_ > 0 && d.planned.coopmat2_kernel &&
          module_keys_.count(d.planned.coopmat2_kernel->Key()) > 0 &&
          module_keys_.count(d.planned.coopmat2_small_kernel->Key()) > 0 &&
          (!d.planned.silu_mul_kernel || module_keys_.count(d.planned.silu_mul_kernel->Key()) > 0) &&
          module_keys_.count(d.planned.activations_f16_kernel->Key()) > 0) {
        absl::StatusOr<VkPipeline> cm2 = pipeline_for(*d.planned.coopmat2_kernel);
        if (!cm2.ok()) return cm2.status();
        absl::StatusOr<VkPipeline> small = pipeline_for(*d.planned.coopmat2_small_kernel);
        if (!small.ok()) return small.status();
        d.small_pipeline = *small;
        if (d.planned.silu_mul_kernel) {
          absl::StatusOr<VkPipeline> silu = pipeline_for(*d.planned.silu_mul_kernel);
          if (!silu.ok()) return silu.status();
          d.silu_pipeline = *silu;
        }
        // (Artifacts from before split K lack them: their launches run unsplit.)
        bool slices = d.planned.split_sum_kernel && module_keys_.count(d.planned.split_sum_kernel->Key()) > 0;
        for (const KernelInstance& k : d.planned.coopmat2_slice_kernels)
          slices = slices && module_keys_.count(k.Key()) > 0;
        if (slices) {
          for (const KernelInstance& k : d.planned.coopmat2_slice_kernels) {
            absl::StatusOr<VkPipeline> slice = pipeline_for(k);
            if (!slice.ok()) return slice.status();
            d.slice_pipelines.push_back(*slice);
          }
          absl::StatusOr<VkPipeline> sum = pipeline_for(*d.planned.split_sum_kernel);
          if (!sum.ok()) return sum.status();
          d.split_sum_pipeline = *sum;
        }
        absl::StatusOr<VkPipeline> act = pipeline_for(*d.planned.activations_f16_kernel);
        if (!act.ok()) return act.status();
        d.tiled_pipeline = *cm2;
        d.act_pipeline = *act;
        d.tiled_tokens = d.planned.coopmat2_tokens_per_group;
        d.tiled_columns = d.planned.coopmat2_columns_per_group;
        d.tiled_label = " (workgroup tensor cores)";
      }
    }
    if (cm2_attention && d.planned.coopmat2_prefill_kernel &&
        module_keys_.count(d.planned.coopmat2_prefill_kernel->Key()) > 0) {
      absl::StatusOr<VkPipeline> prefill = pipeline_for(*d.planned.coopmat2_prefill_kernel);
      if (!prefill.ok()) return prefill.status();
      d.prefill_attention_pipeline = *prefill;
      d.prefill_attention_tokens = d.planned.coopmat2_prefill_tokens_per_group;
      d.prefill_attention_label = " (workgroup tensor cores)";
    } else if (prefill_attention && d.planned.prefill_kernel &&
               module_keys_.count(d.planned.prefill_kernel->Key()) > 0 &&
               dev_.shuffle_width() >= d.planned.prefill_lanes) {
      absl::StatusOr<VkPipeline> prefill = pipeline_for(*d.planned.prefill_kernel);
      if (!prefill.ok()) return prefill.status();
      d.prefill_attention_pipeline = *prefill;
      d.prefill_attention_tokens = d.planned.prefill_tokens_per_group;
      d.prefill_attention_label = " (query tiles)";
    }
    if (fold_combine_ && d.planned.fold_kernel) {
      absl::StatusOr<VkPipeline> fold = pipeline_for(*d.planned.fold_kernel);
      if (!fold.ok()) return fold.status();
      d.fold_pipeline = *fold;
    }
  }
  return absl::OkStatus();
}

absl::Status VulkanExecutor::MakeF16Copy() {
  if (f16_copy_pipelines_.empty()) return absl::OkStatus();
  absl::StatusOr<VkDescriptorPool> pool = dev_.CreateDescriptorPool(static_cast<uint32_t>(f16_copy_pipelines_.size()), 8);
  if (!pool.ok()) return pool.status();
  struct Copy {
    VkPipeline pipeline;
    VkDescriptorSet set;
    uint32_t rows, groups;
  };
  std::vector<Copy> copies;
  absl::Status made = absl::OkStatus();
  for (const auto& [name, pipeline] : f16_copy_pipelines_) {
    const PlanWeight* w = plan_.FindWeight(name);
    const Placed& from = placed_weights_.at(name);
    const Placed& to = placed_f16_.at(name);
    absl::StatusOr<VkDescriptorSet> set = dev_.AllocateDescriptorSet(*pool, set_layout_);
    if (!set.ok()) {
      made = set.status();
      break;
    }
    Copy c{pipeline, *set, static_cast<uint32_t>(w->shape[0]), 1};
    VkDescriptorBufferInfo info[8];
    for (auto& i : info) i = VkDescriptorBufferInfo{dummy_.buffer, 0, VK_WHOLE_SIZE};
    info[0] = VkDescriptorBufferInfo{weights_.buffer, from.offset, (from.size + 3) / 4 * 4};
    info[5] = VkDescriptorBufferInfo{weights_f16_.buffer, to.offset, to.size};
    dev_.WriteStorageBuffers(c.set, info);
    // A word (8 elements) per invocation, 256 a workgroup, striding past the grid's limit.
    const uint64_t words = static_cast<uint64_t>(w->shape[0]) * w->shape[1] / 8;
    c.groups = static_cast<uint32_t>(
        std::clamp<uint64_t>((words + 255) / 256, 1, dev_.props().limits.maxComputeWorkGroupCount[0]));
    copies.push_back(c);
  }
  if (made.ok()) {
    made = dev_.RunOnce([&](VkCommandBuffer cb) {
      for (const Copy& c : copies) {
        PushConstants pc;
        pc.in0 = c.rows;
        dev_.api().vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline);
        dev_.api().vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_layout_, 0, 1, &c.set, 0, nullptr);
        dev_.api().vkCmdPushConstants(cb, pipeline_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
        dev_.api().vkCmdDispatch(cb, c.groups, 1, 1);
      }
    });
  }
  dev_.api().vkDestroyDescriptorPool(dev_.device(), *pool, nullptr);
  return made;
}

absl::Status VulkanExecutor::WriteDescriptorSets() {
  uint32_t sets = static_cast<uint32_t>(dispatches_.size());
  for (const Dispatch& d : dispatches_) sets += d.tiled_f16 ? 1 : 0;
  absl::StatusOr<VkDescriptorPool> pool = dev_.CreateDescriptorPool(sets, 8);
  if (!pool.ok()) return pool.status();
  descriptor_pool_ = *pool;
  const int64_t layer_bytes = 2 * kv_half_elements_ * plan_.pool.element_bytes();
  // f16: the set of tiled_f16 dispatches' prefill variant (weight slots on
  // the f16 copies).
  auto write_set = [&](const Dispatch& d, bool f16, VkDescriptorSet* set) -> absl::Status {
    absl::StatusOr<VkDescriptorSet> allocated = dev_.AllocateDescriptorSet(descriptor_pool_, set_layout_);
    if (!allocated.ok()) return allocated.status();
    *set = *allocated;
    VkDescriptorBufferInfo info[8];
    for (auto& i : info) i = VkDescriptorBufferInfo{dummy_.buffer, 0, VK_WHOLE_SIZE};
    if (d.planned.uses_partials) info[0] = VkDescriptorBufferInfo{partials_.buffer, 0, VK_WHOLE_SIZE};
    for (size_t slot = 0; slot < 3; ++slot) {
      if (d.planned.weights[slot].empty()) continue;
      auto copy = placed_f16_.find(d.planned.weights[slot]);
      const bool from_copy = f16 && copy != placed_f16_.end();
      const Placed& p = from_copy ? copy->second : placed_weights_.at(d.planned.weights[slot]);
      info[slot] = VkDescriptorBufferInfo{from_copy ? weights_f16_.buffer : weights_.buffer, p.offset, (p.size + 3) / 4 * 4};
    }
    // The rope table of d.planned.rope (at binding 4, or 3 for a matmul that appends k).
    auto rope_table = [&](VkDescriptorBufferInfo* at) {
      for (const auto& [t, p] : rope_tables_) {
        if (t == d.planned.rope) *at = VkDescriptorBufferInfo{weights_.buffer, p.offset, p.size};
      }
    };
    if (!d.planned.vector_weight.empty()) {
      const Placed& p = placed_weights_.at(d.planned.vector_weight);
      info[4] = VkDescriptorBufferInfo{weights_.buffer, p.offset, p.size};
    } else if (d.planned.uses_rope_table) {
      rope_table(&info[4]);
    }
    info[3] = VkDescriptorBufferInfo{io_.buffer, 0, VK_WHOLE_SIZE};
    if (d.planned.appends_kv_rope) rope_table(&info[3]);
    info[5] = VkDescriptorBufferInfo{arena_.buffer, 0, VK_WHOLE_SIZE};
    if (const int64_t layer = std::max(d.planned.layer, d.planned.appends_kv_layer); layer >= 0) {
      const VkDeviceSize start = layer * layer_bytes;
      const VkDeviceSize bind = start / dev_.storage_align() * dev_.storage_align();
      info[6] = VkDescriptorBufferInfo{kv_.buffer, bind, std::min<VkDeviceSize>(kv_.size - bind, start - bind + layer_bytes)};
    }
    if (f16 && d.act_pipeline != VK_NULL_HANDLE) {
      // matmul_coopmat2 reads the f16 activations from offset 0 of binding 6.
      info[6] = VkDescriptorBufferInfo{arena_.buffer, static_cast<VkDeviceSize>(ActF16Floats()) * 4,
                                       static_cast<VkDeviceSize>(act_f16_halves_) * 2};
    }
    info[7] = VkDescriptorBufferInfo{step_inputs_.buffer, 0, VK_WHOLE_SIZE};
    dev_.WriteStorageBuffers(*set, info);
    return absl::OkStatus();
  };
  for (Dispatch& d : dispatches_) {
    if (absl::Status s = write_set(d, false, &d.set); !s.ok()) return s;
    if (d.tiled_f16) {
      if (absl::Status s = write_set(d, true, &d.f16_set); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

int64_t VulkanExecutor::ArenaFloats(const std::string& role, const PlanLaunch* l, size_t bucket) const {
  if (l == nullptr) return plan_.results.front().arena[bucket] / 4;  // copy_logits: the plan's result
  if (role == kRowRmsRole) return RowRmsFloats();
  const PlanBinding* b = l->Find(role);
  return b->arena[bucket] / 4;
}

absl::StatusOr<VkCommandBuffer> VulkanExecutor::Record(size_t bucket, bool greedy, VkQueryPool timestamps,
                                                       std::vector<KernelTime>* labels) {
  const int64_t B = plan_.buckets[bucket];
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = dev_.command_pool();
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  VkCommandBuffer cb;
  KILN_VK_CHECK(dev_.api().vkAllocateCommandBuffers(dev_.device(), &cai, &cb), "vkAllocateCommandBuffers");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  dev_.api().vkBeginCommandBuffer(cb, &begin);
  auto barrier = [&](VkPipelineStageFlags src, VkAccessFlags src_access, VkPipelineStageFlags dst,
                     VkAccessFlags dst_access) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = src_access;
    mb.dstAccessMask = dst_access;
    dev_.api().vkCmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, nullptr, 0, nullptr);
  };
  if (options_.poison_arena) {
    dev_.api().vkCmdFillBuffer(cb, arena_.buffer, 0, VK_WHOLE_SIZE, 0x7FC00000u);  // quiet NaN
  }
  // The step inputs into device memory: everything before the block tables,
  // and the block tables of at most B sequences. The previous step's kernels
  // have read the old inputs (they ran before this submit's fence wait).
  barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT, 0);
  const VkDeviceSize tables = io_offsets_[kIoBlockTables] * 4;
  const VkBufferCopy inputs[2] = {{0, 0, tables}, {tables, tables, static_cast<VkDeviceSize>(B * pages_per_seq_capacity_ * 4)}};
  dev_.api().vkCmdCopyBuffer(cb, io_.buffer, step_inputs_.buffer, 2, inputs);
  // The previous step's work and this step's copies are done before its kernels run.
  barrier(VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  uint32_t query = 0;
  if (timestamps != VK_NULL_HANDLE) {
    dev_.api().vkCmdResetQueryPool(cb, timestamps, 0, static_cast<uint32_t>(MaxTimestamps()));
    dev_.api().vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps, query++);
  }
  std::vector<Access> pending_reads, pending_writes;
  // A barrier before a dispatch whose accesses overlap a write since the
  // last barrier (or whose writes overlap a read), then its accesses pend.
  auto order = [&](const std::vector<Access>& reads, const std::vector<Access>& writes) {
    bool hazard = false;
    for (const Access& a : reads) {
      for (const Access& w : pending_writes) hazard = hazard || a.Overlaps(w);
    }
    for (const Access& a : writes) {
      for (const Access& w : pending_writes) hazard = hazard || a.Overlaps(w);
      for (const Access& r : pending_reads) hazard = hazard || a.Overlaps(r);
    }
    if (hazard) {
      barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT,
              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      pending_reads.clear();
      pending_writes.clear();
    }
    pending_reads.insert(pending_reads.end(), reads.begin(), reads.end());
    pending_writes.insert(pending_writes.end(), writes.begin(), writes.end());
  };
  VkPipeline bound = VK_NULL_HANDLE;
  const int64_t layer_elements = 2 * kv_half_elements_, kv_bytes = plan_.pool.element_bytes();
  const int64_t splits = AttentionSplits(B, max_attention_splits_);
  int64_t appended_layer = -1;  // the layer whose k and v rows a matmul wrote into its pages
  for (const Dispatch& d : dispatches_) {
    const PlannedDispatch& p = d.planned;
    if (p.only_when_split && (splits == 1 || fold_combine_)) continue;
    if (p.only_when_tiled && B < p.tiled_min_bucket) continue;
    if (d.role == (greedy ? Role::kCopyLogits : Role::kGreedyIds)) continue;
    if (p.kernel.template_name == "kv_append" && p.layer == appended_layer) continue;
    // Decode-sized buckets run the matmul's one-token variant, prefill-sized
    // ones its tiled variant, where it has them.
    const PlanLaunch* l = d.launch < plan_.launches.size() ? &plan_.launches[d.launch] : nullptr;
    const bool gated = p.decode_kernel && B > p.decode_max_bucket && l != nullptr && logit_rows_[d.launch][bucket];
    if (d.logits_twin && !gated) continue;
    const bool decode_variant = p.decode_kernel && (B <= p.decode_max_bucket || d.logits_twin);
    const bool tiled_variant = !decode_variant && p.tiled_kernel && B >= p.tiled_min_bucket;
    std::vector<Access> reads, writes;
    PushConstants pc;
    pc.bucket = static_cast<uint32_t>(B);
    if (gated) pc.rows_gate = static_cast<int32_t>(d.logits_twin ? p.decode_max_bucket : -p.decode_max_bucket);
    for (int f = kIoTokens; f <= kIoLogitsOut; ++f) pc.io_field[f - kIoTokens] = static_cast<int32_t>(io_offsets_[f]);
    if (p.uses_partials) {
      pc.splits = static_cast<uint32_t>(splits);
      if (splits > 1) (p.only_when_split ? reads : writes).push_back({3, 0, static_cast<int64_t>(partials_.size)});
    }
    uint32_t* in[2] = {&pc.in0, &pc.in1};
    uint32_t* out[3] = {&pc.out0, &pc.out1, &pc.out2};
    for (size_t i = 0; i < 2; ++i) {
      if (p.inputs[i].width == 0) continue;
      const int64_t at = ArenaFloats(p.inputs[i].role, l, bucket);
      *in[i] = static_cast<uint32_t>(at);
      reads.push_back({0, at * 4, (at + B * p.inputs[i].width) * 4});
    }
    for (size_t i = 0; i < 3; ++i) {
      if (p.outputs[i].width == 0) continue;
      const int64_t at = ArenaFloats(p.outputs[i].role, l, bucket);
      *out[i] = static_cast<uint32_t>(at);
      writes.push_back({0, at * 4, (at + B * p.outputs[i].width) * 4});
    }
    if (p.reads_row_rms) {
      const int64_t at = RowRmsFloats();
      pc.row_rms = static_cast<uint32_t>(at);
      reads.push_back({0, at * 4, (at + B) * 4});
    }
    const bool appends_kv = decode_variant && p.appends_kv_layer >= 0;
    if (appends_kv) appended_layer = p.appends_kv_layer;
    if (const int64_t layer = appends_kv ? p.appends_kv_layer : p.layer; layer >= 0) {
      const int64_t start = layer * layer_elements * kv_bytes;
      const int64_t bind = start / static_cast<int64_t>(dev_.storage_align()) * static_cast<int64_t>(dev_.storage_align());
      pc.kv_base = static_cast<uint32_t>((start - bind) / kv_bytes);
      pc.kv_half = static_cast<uint32_t>(kv_half_elements_);
      const Access kv{1, start, start + layer_elements * kv_bytes};
      (p.kernel.template_name == "kv_append" || appends_kv ? writes : reads).push_back(kv);
    }
    if (l == nullptr) writes.push_back({2, 0, static_cast<int64_t>(io_.size)});
    // The last dispatch reads the R result rows.
    pc.rows_are_logit_rows = l == nullptr || logit_rows_[d.launch][bucket] ? 1 : 0;
    if (((tiled_variant && d.tiled_reads_16_bytes) || (decode_variant && d.decode_reads_16_bytes)) && pc.in0 % 4 != 0) {
      // kiln's plans align every buffer to 256 bytes; another plan gets an
      // error, not activations read from the wrong place.
      return absl::FailedPreconditionError(absl::StrCat("vulkan: launch '", l != nullptr ? l->kernel : "?",
                                                        "': its input's arena offset is not a multiple of 16 bytes at bucket ",
                                                        B, " (recompile the artifact with this kiln)"));
    }
    if (tiled_variant && d.act_pipeline != VK_NULL_HANDLE) {
      // activations_f16 first: the input (normalised) as f16 rows, which the
      // matmul then reads in place of the input.
      PushConstants act = pc;
      const int64_t halves = ActF16Floats() * 2;
      act.out0 = static_cast<uint32_t>(halves);
      const std::vector<Access> act_writes = {{0, halves * 2, (halves + B * p.inputs[0].width) * 2}};
      std::vector<Access> act_reads = {{0, pc.in0 * int64_t{4}, (pc.in0 + B * p.inputs[0].width) * 4}};
      if (p.reads_row_rms) act_reads.push_back({0, pc.row_rms * int64_t{4}, (pc.row_rms + B) * 4});
      order(act_reads, act_writes);
      const int64_t groups = std::clamp<int64_t>((B * p.inputs[0].width / 8 + 255) / 256, 1, LaunchShape::kMaxStrideGroups);
      dev_.api().vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.act_pipeline);
      bound = d.act_pipeline;
      dev_.api().vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_layout_, 0, 1, &d.f16_set, 0, nullptr);
      dev_.api().vkCmdPushConstants(cb, pipeline_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(act), &act);
      dev_.api().vkCmdDispatch(cb, static_cast<uint32_t>(groups), 1, 1);
      if (timestamps != VK_NULL_HANDLE) {
        dev_.api().vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps, query++);
        labels->push_back({"activations_f16", l != nullptr ? l->kernel : std::string(), 0.0,
                           absl::StrCat(B, "x", p.inputs[0].width)});
      }
      reads.front() = act_writes.front();  // the matmul reads them, not the input
    }
    // matmul_coopmat2's tiles. A residual_add launch whose large tiles
    // times its K slices fit the SMs at once runs its slice instances side
    // by side (then split_sum); KILN_VULKAN_CM2_SPLITK=0 / 1 turns that off
    // / on everywhere it can. Otherwise small tiles where their waves (two
    // workgroups an SM, each ~3/4 of a large tile's wave: the H100's 512-token
    // q, k, v ran 96 large tiles in 151 us, 384 small in 227, session 47)
    // take less time than the large tiles' waves (one workgroup an SM).
    int64_t tiled_tokens = d.tiled_tokens, tiled_columns = d.tiled_columns;
    bool small_tiles = false;
    int64_t k_slices = 1;
    if (tiled_variant && d.small_pipeline != VK_NULL_HANDLE) {
      const int64_t large =
          (B + tiled_tokens - 1) / tiled_tokens * ((p.coopmat2_columns + tiled_columns - 1) / tiled_columns);
      const int64_t small =
          (2 * B + tiled_tokens - 1) / tiled_tokens * ((2 * p.coopmat2_columns + tiled_columns - 1) / tiled_columns);
      const int64_t units = dev_.compute_units();
      if (!d.slice_pipelines.empty() && units > 0) {
        const int64_t n = static_cast<int64_t>(d.slice_pipelines.size());
        bool split = n * large <= units;
        if (const char* env = std::getenv("KILN_VULKAN_CM2_SPLITK"); env != nullptr)
          split = std::string_view(env) != "0";
        k_slices = split ? n : 1;
      }
      small_tiles =
          k_slices == 1 && units > 0 && 3 * ((small + 2 * units - 1) / (2 * units)) < 4 * ((large + units - 1) / units);
      const char* env = std::getenv("KILN_VULKAN_CM2_TILE");
      if (env != nullptr) small_tiles = std::string_view(env) == "small";
      if (small_tiles) {
        k_slices = 1;  // (the slice instances have large tiles)
        tiled_tokens /= 2;
        tiled_columns /= 2;
      }
    }
    // The slices' sums lie past the arena (where a silu_mul launch's gate
    // and up sums lie), each B x columns floats; split_sum writes the output.
    const uint32_t split_out = pc.out0;
    if (k_slices > 1) {
      const int64_t at = SiluFloats(), width = p.outputs[0].width;
      pc.out0 = static_cast<uint32_t>(at);
      writes = {{0, at * 4, (at + k_slices * B * width) * 4}};
    }
    // A silu_mul launch on matmul_coopmat2: gate's and up's sums apart, past
    // the arena; elementwise's silu_mul writes the launch's output after it.
    const bool silu_after = tiled_variant && d.silu_pipeline != VK_NULL_HANDLE;
    const uint32_t silu_out = pc.out0;
    if (silu_after) {
      const int64_t width = p.outputs[0].width, gate = SiluFloats(), up = gate + B * width;
      pc.out0 = static_cast<uint32_t>(gate);
      pc.out1 = static_cast<uint32_t>(up);
      writes = {{0, gate * 4, (up + B * width) * 4}};
    }
    order(reads, writes);
    // Attention over one split of a prefill-sized step: query tiles.
    const bool prefill_attention =
        d.prefill_attention_pipeline != VK_NULL_HANDLE && splits == 1 && B >= d.prefill_attention_tokens;
    const bool folded = splits > 1 && d.fold_pipeline != VK_NULL_HANDLE;
    const VkPipeline pipeline = decode_variant      ? d.decode_pipeline
                                : small_tiles       ? d.small_pipeline
                                : tiled_variant     ? d.tiled_pipeline
                                : prefill_attention ? d.prefill_attention_pipeline
                                : folded            ? d.fold_pipeline
                                                    : d.pipeline;
    const int64_t wg = p.kernel.workgroup_size;
    const int64_t tokens_per_group = decode_variant ? 1 : tiled_variant ? tiled_tokens : p.shape.tokens_per_group;
    const int64_t decode_columns =
        d.decode_reads_16_bytes ? p.decode_dp4_columns_per_group : p.decode_columns_per_group;
    const int64_t columns_per_group = decode_variant  ? decode_columns
                                      : tiled_variant ? tiled_columns
                                                      : p.shape.columns_per_group;
    int64_t x = 1, y = 1, z = 1;
    switch (p.shape.kind) {
      case LaunchShape::Kind::kStride:
        x = std::clamp<int64_t>((B * p.shape.items_per_token + wg - 1) / wg, 1, LaunchShape::kMaxStrideGroups);
        break;
      case LaunchShape::Kind::kPerRow:
        x = B;
        break;
      case LaunchShape::Kind::kMatmul:
        x = std::clamp<int64_t>(
            ((tiled_variant && d.act_pipeline != VK_NULL_HANDLE ? p.coopmat2_columns : p.shape.columns) + columns_per_group - 1) /
                columns_per_group,
            1, dev_.props().limits.maxComputeWorkGroupCount[0]);
        // The decode variant stages its token once per workgroup and then
        // takes rows round by round: as many workgroups as the GPU holds at
        // once, not one per row group.
        if (decode_variant && dev_.compute_units() > 0) {
          x = std::min<int64_t>(x, int64_t{dev_.compute_units()} * p.decode_groups_per_unit);
        }
        y = (B + tokens_per_group - 1) / tokens_per_group;
        if (d.logits_twin) y = std::min(y, p.decode_max_bucket);
        // Tensor-core tiles of a launch with more workgroups than the GPU
        // holds at once (~2 an SM) run token tiles fastest, so that those in
        // flight share their weights through L2; launches that fit keep
        // columns fastest (on the H200 token tiles first cost down and o
        // 4-6%, and took gate/up's 896 workgroups 46.4 -> 44.0 ms a step).
        if (tiled_variant && d.tiled_reads_16_bytes && dev_.compute_units() > 0 &&
            x * y > 2 * int64_t{dev_.compute_units()}) {
          pc.tokens_first = 1;
        }
        break;
      case LaunchShape::Kind::kPerHeadToken:
        x = p.shape.heads / p.shape.heads_per_group;
        y = B;
        z = p.uses_partials ? splits : 1;
        if (prefill_attention) y = (B + d.prefill_attention_tokens - 1) / d.prefill_attention_tokens;
        break;
    }
    // matmul_coopmat2's large tiles whose last wave would hold at most half
    // the SMs: the last columns as small tiles (a quarter of a large one
    // each, two an SM) in a second dispatch beside the first, so that the
    // last wave is short. KILN_VULKAN_CM2_TAIL=0 keeps one dispatch; =N
    // runs the last N columns small wherever large tiles run (for tests).
    int64_t tail = 0;  // large column tiles that run as small ones
    if (tiled_variant && d.act_pipeline != VK_NULL_HANDLE && d.small_pipeline != VK_NULL_HANDLE && !small_tiles &&
        k_slices == 1 && dev_.compute_units() > 0) {
      const char* env = std::getenv("KILN_VULKAN_CM2_TAIL");
      const int64_t units = dev_.compute_units(), rest = x * y % units;
      const int64_t lead = (x * y - rest) / y;  // whole columns of large tiles in whole waves
      if (env != nullptr) {
        tail = std::clamp<int64_t>(std::atoll(env), 0, x - 1);
      } else if (x * y > units && rest > 0 && 2 * (x - lead) * y <= units) {
        tail = x - lead;
      }
    }
    const VkDescriptorSet set = tiled_variant && d.tiled_f16 ? d.f16_set : d.set;
    // K slices: one dispatch each, with no barrier between (their stores
    // are disjoint), so that they run side by side.
    for (int64_t slice = 0; slice < k_slices; ++slice) {
      const VkPipeline run = k_slices > 1 ? d.slice_pipelines[slice] : pipeline;
      if (run != bound) {
        dev_.api().vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, run);
        bound = run;
      }
      if (slice == 0) {
        dev_.api().vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_layout_, 0, 1, &set, 0,
                                           nullptr);
        dev_.api().vkCmdPushConstants(cb, pipeline_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(pc), &pc);
      }
      dev_.api().vkCmdDispatch(cb, static_cast<uint32_t>(x - tail), static_cast<uint32_t>(y), static_cast<uint32_t>(z));
    }
    if (tail > 0) {
      PushConstants small = pc;
      small.column_tile_base = static_cast<uint32_t>(2 * (x - tail));
      const int64_t small_tokens = tiled_tokens / 2;
      dev_.api().vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.small_pipeline);
      bound = d.small_pipeline;
      dev_.api().vkCmdPushConstants(cb, pipeline_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(small), &small);
      dev_.api().vkCmdDispatch(cb, static_cast<uint32_t>(2 * tail),
                               static_cast<uint32_t>((B + small_tokens - 1) / small_tokens), 1);
    }
    if (timestamps != VK_NULL_HANDLE) {
      // Bottom of pipe: written once every command before it has finished.
      dev_.api().vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps, query++);
      // Matmuls with their rows x K (o and down share a launch name).
      std::string shape;
      if (l != nullptr && p.shape.kind == LaunchShape::Kind::kMatmul) shape = absl::StrCat(p.shape.columns, "x", p.inputs[0].width);
      const std::string sliced = absl::StrCat(" (workgroup tensor cores, K in ", k_slices, " slices)");
      const std::string tailed = absl::StrCat(" (workgroup tensor cores, last ", tail, " column tiles small)");
      labels->push_back({absl::StrCat(p.kernel.template_name, decode_variant  ? " (decode)"
                                                              : small_tiles   ? " (workgroup tensor cores, small tiles)"
                                                              : k_slices > 1  ? sliced.c_str()
                                                              : tail > 0      ? tailed.c_str()
                                                              : tiled_variant ? d.tiled_label
                                                              : prefill_attention ? d.prefill_attention_label
                                                                                  : ""),
                         l != nullptr ? l->kernel : std::string(), 0.0, std::move(shape)});
    }
    // An elementwise pass after the matmul over its B x width outputs
    // (split_sum, silu_mul), ordered after the accesses it names.
    const int64_t width = p.outputs[0].width;
    auto elementwise_after = [&](VkPipeline run, const PushConstants& push, const std::vector<Access>& in,
                                 const Access& out, std::string label) {
      order(in, {out});
      const int64_t groups = std::clamp<int64_t>((B * width + 255) / 256, 1, LaunchShape::kMaxStrideGroups);
      dev_.api().vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, run);
      bound = run;
      dev_.api().vkCmdPushConstants(cb, pipeline_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(push), &push);
      dev_.api().vkCmdDispatch(cb, static_cast<uint32_t>(groups), 1, 1);
      if (timestamps != VK_NULL_HANDLE) {
        dev_.api().vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamps, query++);
        labels->push_back(
            {std::move(label), l != nullptr ? l->kernel : std::string(), 0.0, absl::StrCat(B, "x", width)});
      }
    };
    if (k_slices > 1) {
      PushConstants sum = pc;
      sum.in0 = pc.out0;
      sum.out0 = split_out;
      sum.splits = static_cast<uint32_t>(k_slices);
      elementwise_after(d.split_sum_pipeline, sum,
                        {{0, sum.in0 * int64_t{4}, (sum.in0 + k_slices * B * width) * 4},
                         {0, sum.in1 * int64_t{4}, (sum.in1 + B * width) * 4}},
                        {0, split_out * int64_t{4}, (split_out + B * width) * 4},
                        absl::StrCat("elementwise (split_sum of ", k_slices, ")"));
    }
    if (silu_after) {
      PushConstants silu = pc;
      silu.in0 = pc.out0;
      silu.in1 = pc.out1;
      silu.out0 = silu_out;
      elementwise_after(d.silu_pipeline, silu, {{0, silu.in0 * int64_t{4}, (silu.in1 + B * width) * 4}},
                        {0, silu_out * int64_t{4}, (silu_out + B * width) * 4}, "elementwise (silu_mul)");
    }
  }
  barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
          VK_ACCESS_HOST_READ_BIT);
  KILN_VK_CHECK(dev_.api().vkEndCommandBuffer(cb), "recording a step");
  return cb;
}

absl::Status VulkanExecutor::SubmitAndWait(VkCommandBuffer cb) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  KILN_VK_CHECK(dev_.api().vkResetFences(dev_.device(), 1, &fence_), "vkResetFences");
  KILN_VK_CHECK(dev_.api().vkQueueSubmit(dev_.queue(), 1, &si, fence_), "vkQueueSubmit");
  const double wait_start = ThreadCpuSeconds();
  const VkResult waited = dev_.api().vkWaitForFences(dev_.device(), 1, &fence_, VK_TRUE, UINT64_MAX);
  wait_cpu_seconds_ += ThreadCpuSeconds() - wait_start;
  KILN_VK_CHECK(waited, "vkWaitForFences");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KernelTime>> VulkanExecutor::ProfileStep(const StepBatch& batch) {
  if (dev_.timestamp_bits() == 0) {
    return absl::UnimplementedError(absl::StrCat(Describe(), ": its compute queue has no timestamps"));
  }
  absl::StatusOr<size_t> bucket = WriteInputs(batch);
  if (!bucket.ok()) return bucket.status();
  VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qi.queryCount = static_cast<uint32_t>(MaxTimestamps());
  VkQueryPool pool = VK_NULL_HANDLE;
  KILN_VK_CHECK(dev_.api().vkCreateQueryPool(dev_.device(), &qi, nullptr, &pool), "vkCreateQueryPool");
  std::vector<KernelTime> times;
  absl::StatusOr<VkCommandBuffer> cb = Record(*bucket, /*greedy=*/false, pool, &times);
  absl::Status run = cb.ok() ? SubmitAndWait(*cb) : cb.status();
  std::vector<uint64_t> ticks(times.size() + 1);
  if (run.ok() && !ticks.empty()) {
    const VkResult got = dev_.api().vkGetQueryPoolResults(
        dev_.device(), pool, 0, static_cast<uint32_t>(ticks.size()), ticks.size() * sizeof(uint64_t), ticks.data(),
        sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (got != VK_SUCCESS) run = absl::InternalError(absl::StrCat("vkGetQueryPoolResults: ", VkResultName(got)));
  }
  if (cb.ok()) dev_.api().vkFreeCommandBuffers(dev_.device(), dev_.command_pool(), 1, &*cb);
  dev_.api().vkDestroyQueryPool(dev_.device(), pool, nullptr);
  if (!run.ok()) return run;
  // Ticks count timestampPeriod nanoseconds in the low timestamp_bits bits.
  const uint64_t mask = dev_.timestamp_bits() >= 64 ? ~0ull : (1ull << dev_.timestamp_bits()) - 1;
  const double period = dev_.props().limits.timestampPeriod * 1e-9;
  for (size_t i = 0; i < times.size(); ++i) times[i].seconds = static_cast<double>((ticks[i + 1] - ticks[i]) & mask) * period;
  return times;
}

// Why "auto" passes over a CPU implementation of Vulkan (lavapipe).
absl::Status CpuImplementation(int index, const VkPhysicalDeviceProperties& props) {
  return absl::UnavailableError(absl::StrCat("device ", index, " (", props.deviceName,
                                             ") is a CPU implementation of Vulkan; the CPU executor is faster "
                                             "(--backend vulkan uses it anyway)"));
}

absl::Status VulkanExecutor::Init(const WeightSource& weights, std::span<const uint8_t> bundle) {
  absl::StatusOr<std::vector<SpirvModule>> modules = ParseBundle(bundle);
  if (!modules.ok()) return modules.status();
  for (const SpirvModule& m : *modules) module_keys_.insert(m.Key());
  absl::StatusOr<std::vector<std::vector<PlannedDispatch>>> planned = PlanDispatches(plan_);
  if (!planned.ok()) return planned.status();
  for (size_t i = 0; i < planned->size(); ++i) {
    for (PlannedDispatch& p : (*planned)[i]) dispatches_.push_back(Dispatch{std::move(p), i});
  }
  dispatches_.push_back(Dispatch{CopyLogitsDispatch(plan_), plan_.launches.size(), Role::kCopyLogits});
  if (PlannedDispatch greedy = GreedyIdsDispatch(plan_); module_keys_.count(greedy.kernel.Key()) > 0) {
    dispatches_.push_back(Dispatch{std::move(greedy), plan_.launches.size(), Role::kGreedyIds});
  }
  logit_rows_ = RowsAreLogitRows(plan_);
  // The twins of the matmuls of logit rows that prefill-sized buckets run.
  for (size_t i = 0; i < dispatches_.size(); ++i) {
    const Dispatch& d = dispatches_[i];
    if (d.role != Role::kLaunch || !d.planned.decode_kernel) continue;
    bool prefill_logits = false;
    for (size_t b = 0; b < plan_.buckets.size(); ++b) {
      prefill_logits = prefill_logits || (plan_.buckets[b] > d.planned.decode_max_bucket && logit_rows_[d.launch][b]);
    }
    if (!prefill_logits) continue;
    Dispatch twin = d;
    twin.logits_twin = true;
    dispatches_.insert(dispatches_.begin() + static_cast<std::ptrdiff_t>(i), std::move(twin));
    ++i;
  }
  const JsonValue* vocab = plan_.model.Find("n_vocab");
  if (vocab == nullptr || !vocab->int_value() || *vocab->int_value() <= 0) {
    return absl::InvalidArgumentError("plan: model.n_vocab is missing");
  }
  n_vocab_ = *vocab->int_value();
  max_token_ = INT64_MAX;
  for (const Dispatch& d : dispatches_) {
    if (d.planned.kernel.template_name != "embedding") continue;
    const PlanWeight* table = plan_.FindWeight(d.planned.weights[0]);
    max_token_ = std::min(max_token_, table->shape[0]);
  }

  if (absl::Status s = dev_.Open(options_.device); !s.ok()) return s;
  // The greedy ids' argmax runs 1024 threads a row; a device that allows
  // fewer a workgroup (Vulkan guarantees 128) reads the logits instead.
  if (const VkPhysicalDeviceLimits& lim = dev_.props().limits;
      dispatches_.back().role == Role::kGreedyIds &&
      (lim.maxComputeWorkGroupInvocations < dispatches_.back().planned.kernel.workgroup_size ||
       lim.maxComputeWorkGroupSize[0] < dispatches_.back().planned.kernel.workgroup_size)) {
    dispatches_.pop_back();
  }
  if (dev_.props().deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
    if (options_.skip_cpu_devices) return CpuImplementation(options_.device, dev_.props());
    max_attention_splits_ = 4;
  }
  if (options_.max_attention_splits != 0) {
    if (options_.max_attention_splits < 1 || options_.max_attention_splits > kMaxAttentionSplits) {
      return absl::InvalidArgumentError(absl::StrCat("vulkan: attention splits must be 1 to ", kMaxAttentionSplits, ", not ",
                                                     options_.max_attention_splits));
    }
    max_attention_splits_ = options_.max_attention_splits;
  }
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  KILN_VK_CHECK(dev_.api().vkCreateFence(dev_.device(), &fci, nullptr, &fence_), "vkCreateFence");
  if (absl::Status s = UploadWeights(weights); !s.ok()) return s;
  // The plan's arena, then the row_rms dispatches' 1 / rms per token, then
  // (where the device has workgroup-scope cooperative matrices and the
  // artifact matmul_coopmat2) the f16 activations of the widest launch it may
  // run. KILN_VULKAN_COOPMAT2=0 keeps matmul_coopmat (and the arena smaller).
  coopmat2_ = dev_.has_coopmat2() && !SwitchedOff("KILN_VULKAN_COOPMAT2");
  if (coopmat2_) {
    for (const Dispatch& d : dispatches_) {
      if (!d.planned.coopmat2_kernel || module_keys_.count(d.planned.coopmat2_kernel->Key()) == 0) continue;
      act_f16_halves_ = std::max(act_f16_halves_, d.planned.inputs[0].width * plan_.buckets.back());
      if (d.planned.silu_mul_kernel) silu_floats_ = std::max(silu_floats_, d.planned.coopmat2_columns * plan_.buckets.back());
      const int64_t slices = static_cast<int64_t>(d.planned.coopmat2_slice_kernels.size());
      silu_floats_ = std::max(silu_floats_, slices * d.planned.coopmat2_columns * plan_.buckets.back());
    }
  }
  const int64_t arena_bytes =
      act_f16_halves_ > 0 ? (SiluFloats() + silu_floats_) * 4 : (RowRmsFloats() + plan_.buckets.back()) * 4;
  absl::StatusOr<Buffer> arena = dev_.CreateBuffer(arena_bytes, false, "arena");
  if (!arena.ok()) return arena.status();
  arena_ = *arena;

  const int64_t needed = (plan_.pool.max_tokens + plan_.pool.page_size - 1) / plan_.pool.page_size;
  const int64_t page_elements = plan_.pool.page_size * plan_.pool.kv_heads * plan_.pool.head_dim;
  const uint64_t range = dev_.props().limits.maxStorageBufferRange;
  num_pages_ = options_.num_pages > 0 ? options_.num_pages : needed;
  if (options_.num_pages == 0 && options_.kv_fraction > 0) {
    // Sized from free memory, but never past what one layer's binding can address.
    int64_t cap = static_cast<int64_t>((range - std::min<uint64_t>(range, dev_.storage_align())) /
                                       (2 * page_elements * plan_.pool.element_bytes()));
    if (options_.max_kv_pages > 0) cap = std::min(cap, options_.max_kv_pages);
    absl::StatusOr<int64_t> pages =
        KvPagesForFreeMemory(dev_.device_heap_free(), options_.kv_fraction, plan_.pool.page_bytes(), cap,
                             "device memory free after the weights");
    if (!pages.ok()) return pages.status();
    num_pages_ = *pages;
  }
  kv_half_elements_ = num_pages_ * page_elements;
  const int64_t layer_kv_bytes = 2 * kv_half_elements_ * plan_.pool.element_bytes();
  if (static_cast<uint64_t>(layer_kv_bytes) + dev_.storage_align() > range ||
      static_cast<uint64_t>(arena_bytes) > range) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "vulkan: a layer's KV pages (%d bytes) or the arena (%d bytes) exceed the device's %d-byte storage buffer "
        "range; use fewer pages or smaller buckets",
        layer_kv_bytes, arena_bytes, range));
  }
  absl::StatusOr<Buffer> kv = dev_.CreateBuffer(plan_.pool.layers * layer_kv_bytes, false, "KV pages");
  if (!kv.ok()) return kv.status();
  kv_ = *kv;
  // Split-K attention partials: the most any bucket's attention writes,
  // after the fold's counts (a word per (token, KV head) of a split step,
  // which has fewer than kMaxAttentionSplits tokens; zeroed below).
  const int64_t fold_counts = kMaxAttentionSplits * plan_.pool.kv_heads;
  int64_t partial_floats = fold_counts + 1;
  for (const Dispatch& d : dispatches_) {
    if (!d.planned.uses_partials || d.planned.only_when_split) continue;
    for (int64_t b : plan_.buckets) {
      const int64_t s = AttentionSplits(b, max_attention_splits_);
      if (s > 1) {
        partial_floats =
            std::max(partial_floats, fold_counts + b * d.planned.shape.heads * s * (plan_.pool.head_dim + 2));
      }
    }
  }
  absl::StatusOr<Buffer> partials = dev_.CreateBuffer(partial_floats * 4, false, "attention partials");
  if (!partials.ok()) return partials.status();
  partials_ = *partials;
  absl::StatusOr<Buffer> dummy = dev_.CreateBuffer(16, false, "placeholder");
  if (!dummy.ok()) return dummy.status();
  dummy_ = *dummy;

  // io: header, step inputs for the largest bucket, then the logit rows.
  const int64_t max_b = plan_.buckets.back();
  pages_per_seq_capacity_ = std::max(num_pages_, needed);
  int64_t at = kIoHeaderInts;
  const std::pair<IoField, int64_t> fields[] = {{kIoTokens, max_b},     {kIoPositions, max_b},
                                                {kIoQueryStarts, max_b + 1}, {kIoContextLens, max_b},
                                                {kIoLogitRows, max_b},  {kIoBlockTables, max_b * pages_per_seq_capacity_},
                                                {kIoLogitsOut, max_b * n_vocab_}};
  for (const auto& [field, n] : fields) {
    io_offsets_[field] = at;
    at += n;
  }
  if (static_cast<uint64_t>(at) * 4 > range) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "vulkan: the io buffer for %d-token steps (%d bytes) exceeds the device's %d-byte storage buffer range", max_b,
        at * 4, range));
  }
  absl::StatusOr<Buffer> io = dev_.CreateBuffer(at * 4, true, "io");
  if (!io.ok()) return io.status();
  io_ = *io;
  absl::StatusOr<Buffer> inputs = dev_.CreateBuffer(io_offsets_[kIoLogitsOut] * 4, false, "step inputs");
  if (!inputs.ok()) return inputs.status();
  step_inputs_ = *inputs;
  int32_t* header = static_cast<int32_t*>(io_.mapped);
  for (int f = kIoTokens; f <= kIoLogitsOut; ++f) header[f] = static_cast<int32_t>(io_offsets_[f]);
  if (absl::Status s = dev_.RunOnce([&](VkCommandBuffer cb) {
        dev_.api().vkCmdFillBuffer(cb, kv_.buffer, 0, VK_WHOLE_SIZE, 0);
        dev_.api().vkCmdFillBuffer(cb, arena_.buffer, 0, VK_WHOLE_SIZE, 0);
        dev_.api().vkCmdFillBuffer(cb, partials_.buffer, 0, VK_WHOLE_SIZE, 0);  // the fold's counts
      });
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CreatePipelines(*modules); !s.ok()) return s;
  if (absl::Status s = MakeF16Copy(); !s.ok()) return s;
  if (absl::Status s = WriteDescriptorSets(); !s.ok()) return s;
  const bool has_greedy = dispatches_.back().role == Role::kGreedyIds;
  for (size_t b = 0; b < plan_.buckets.size(); ++b) {
    absl::StatusOr<VkCommandBuffer> cb = Record(b, /*greedy=*/false);
    if (!cb.ok()) return cb.status();
    commands_.push_back(*cb);
    if (!has_greedy) continue;
    absl::StatusOr<VkCommandBuffer> greedy = Record(b, /*greedy=*/true);
    if (!greedy.ok()) return greedy.status();
    greedy_commands_.push_back(*greedy);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<const float>> VulkanExecutor::Step(const StepBatch& batch) {
  absl::StatusOr<size_t> bucket = WriteInputs(batch);
  if (!bucket.ok()) return bucket.status();
  if (absl::Status s = SubmitAndWait(commands_[*bucket]); !s.ok()) return s;
  const int32_t* io = static_cast<const int32_t*>(io_.mapped);
  const size_t n = batch.logit_rows.size() * n_vocab_;
  logits_.resize(n);
  std::memcpy(logits_.data(), io + io_offsets_[kIoLogitsOut], n * sizeof(float));
  return std::span<const float>(logits_);
}

absl::StatusOr<std::span<const int32_t>> VulkanExecutor::StepGreedy(const StepBatch& batch) {
  if (greedy_commands_.empty()) return Executor::StepGreedy(batch);
  absl::StatusOr<size_t> bucket = WriteInputs(batch);
  if (!bucket.ok()) return bucket.status();
  if (absl::Status s = SubmitAndWait(greedy_commands_[*bucket]); !s.ok()) return s;
  const int32_t* io = static_cast<const int32_t*>(io_.mapped);
  greedy_ids_.assign(io + io_offsets_[kIoLogitsOut], io + io_offsets_[kIoLogitsOut] + batch.logit_rows.size());
  return std::span<const int32_t>(greedy_ids_);
}

absl::StatusOr<size_t> VulkanExecutor::WriteInputs(const StepBatch& batch) {
  absl::StatusOr<size_t> bucket = ValidateStepBatch(plan_, num_pages_, batch);
  if (!bucket.ok()) return bucket.status();
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    if (batch.tokens[i] < 0 || batch.tokens[i] >= max_token_) {
      return absl::InvalidArgumentError(absl::StrFormat("step: token %d (entry %d) is outside the vocabulary of %d",
                                                        batch.tokens[i], i, max_token_));
    }
  }
  const int64_t table_capacity = plan_.buckets[*bucket] * pages_per_seq_capacity_;
  if (static_cast<int64_t>(batch.block_tables.size()) > table_capacity) {
    return absl::OutOfRangeError(absl::StrFormat("step: %d block-table entries exceed the %d a %d-token step holds",
                                                 batch.block_tables.size(), table_capacity, plan_.buckets[*bucket]));
  }
  int32_t* io = static_cast<int32_t*>(io_.mapped);
  io[kIoT] = static_cast<int32_t>(batch.tokens.size());
  io[kIoS] = static_cast<int32_t>(batch.context_lens.size());
  io[kIoR] = static_cast<int32_t>(batch.logit_rows.size());
  io[kIoPagesPerSeq] = batch.pages_per_seq;
  auto put = [&](IoField f, const std::vector<int32_t>& v) {
    std::memcpy(io + io_offsets_[f], v.data(), v.size() * sizeof(int32_t));
  };
  put(kIoTokens, batch.tokens);
  put(kIoPositions, batch.positions);
  put(kIoQueryStarts, batch.query_starts);
  put(kIoContextLens, batch.context_lens);
  put(kIoLogitRows, batch.logit_rows);
  put(kIoBlockTables, batch.block_tables);
  return *bucket;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> CreateVulkanExecutor(const Plan& plan, const WeightSource& weights,
                                                               std::span<const uint8_t> bundle,
                                                               const VulkanExecutorOptions& options) {
  auto ex = std::make_unique<VulkanExecutor>(plan, options);
  if (absl::Status s = ex->Init(weights, bundle); !s.ok()) return s;
  return std::unique_ptr<Executor>(std::move(ex));
}

absl::StatusOr<std::unique_ptr<Executor>> CreateVulkanExecutor(const Program& program, const BackendOptions& options) {
  const KernelBundle* kernels = program.FindKernels("vulkan");
  if (kernels == nullptr) return absl::UnavailableError("the artifact has no vulkan kernels");
  VulkanExecutorOptions vk;
  vk.device = options.device;
  vk.num_pages = options.num_pages;
  vk.kv_fraction = options.gpu_kv_fraction;
  vk.max_kv_pages = options.max_kv_pages;
  vk.skip_cpu_devices = options.backend == "auto";
  return CreateVulkanExecutor(program.plan, program.weights, kernels->bytes, vk);
}

absl::StatusOr<std::string> VulkanTargetOfDevice(const BackendOptions& options) {
  // The device's type only: the executor opens it next (opening it here
  // too cost a second logical device on every in-memory compile).
  absl::StatusOr<VkPhysicalDeviceProperties> props = VulkanDevice::Properties(options.device);
  if (!props.ok()) return props.status();
  if (props->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && options.backend == "auto") {
    return CpuImplementation(options.device, *props);
  }
  return std::string("vulkan");
}

}  // namespace kiln::vulkan

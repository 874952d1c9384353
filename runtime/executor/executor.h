// What every backend (cpu, cuda, vulkan) offers the layers above it: one step
// of the model over a ragged batch, with the KV cache in a page pool that the
// caller addresses through block tables. The generator, the speculative loop
// and the serving scheduler are written against this and nothing else.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/executor/plan.h"

namespace kiln {

// The bytes of one weight as a weight source holds them.
struct WeightBytes {
  cpu::WeightStorage storage;
  std::span<const uint8_t> data;
  // The bytes lie in a read-only private mapping of a file: pages dropped
  // from the process (madvise MADV_DONTNEED) come back from the file.
  bool file_mapped = false;
};
// Looks a weight up by name (in a GGUF file or an artifact).
using WeightSource = std::function<absl::StatusOr<WeightBytes>(const std::string& name)>;

// One step's inputs, the flattened layout of the step function (see
// docs/architecture.md): T tokens of S sequences.
struct StepBatch {
  std::vector<int32_t> tokens;        // [T]
  std::vector<int32_t> positions;     // [T]
  std::vector<int32_t> query_starts;  // [S+1]
  std::vector<int32_t> context_lens;  // [S]
  std::vector<int32_t> block_tables;  // [S, pages_per_seq], row-major
  int32_t pages_per_seq = 0;
  std::vector<int32_t> logit_rows;    // [R]
};

// Checks a batch against a plan and a pool of `num_pages` pages: sizes agree,
// positions lie inside their sequences, pages inside the pool, T fits a
// bucket. Returns the bucket index. Every backend calls this before running.
absl::StatusOr<size_t> ValidateStepBatch(const Plan& plan, int64_t num_pages, const StepBatch& batch);

// The pages of a KV pool sized from free memory (`kiln serve`'s default):
// `fraction` of `free_bytes`, in pages of `page_bytes`, at most `max_pages`
// (0: no cap). An error naming what was free when not one page fits.
// `memory` says which memory for the message: "free device memory".
absl::StatusOr<int64_t> KvPagesForFreeMemory(uint64_t free_bytes, double fraction, uint64_t page_bytes,
                                             int64_t max_pages, std::string_view memory);

// The GPU time of one kernel of a profiled step.
struct KernelTime {
  std::string kernel;  // the kernel template (and variant) it ran
  std::string launch;  // the plan launch it served ("" for the backend's own)
  double seconds = 0;
  std::string shape;   // where the backend says: what tells launches of one name apart ("14336x4096")
};

class Executor {
 public:
  virtual ~Executor() = default;

  // Runs one step; returns the logits of the requested rows, [R, n_vocab],
  // valid until the next Step. T must fit the largest bucket (callers chunk
  // long prompts); positions and block tables must stay inside the pool.
  virtual absl::StatusOr<std::span<const float>> Step(const StepBatch& batch) = 0;

  // The greedy id of each requested row (its logits' argmax, lowest id on
  // ties), valid until the next step. GPU backends override it to pick the
  // ids on the device, so that only R ids cross to the host.
  virtual absl::StatusOr<std::span<const int32_t>> StepGreedy(const StepBatch& batch);

  // Runs `batch` once with a timestamp after every kernel (on a GPU, the
  // gap to the previous timestamp: kernels that overlap share it; on the
  // CPU, each launch's wall time); returns each kernel's time in launch
  // order. The step's effects are those of Step. Backends without it
  // answer Unimplemented (CUDA: profile with ncu).
  virtual absl::StatusOr<std::vector<KernelTime>> ProfileStep(const StepBatch& batch);

  // CPU time the calling thread has spent waiting for the device (fence and
  // stream waits, which may spin) since the executor was made: the host's own
  // cost of a step is its thread CPU time less this. nullopt where nothing
  // waits on a device (the CPU backend: all of its time is the step).
  virtual std::optional<double> DeviceWaitCpuSeconds() const { return std::nullopt; }

  // Which backend this is and on what, for messages: "cpu (avx2, 2 threads)".
  virtual std::string Describe() const = 0;
  // The backend's name alone: "cpu", "cuda", "vulkan" (Describe's first word).
  std::string BackendName() const;

  virtual const Plan& plan() const = 0;
  virtual int64_t num_pages() const = 0;
  int64_t page_size() const { return plan().pool.page_size; }
  int64_t max_step_tokens() const { return plan().buckets.back(); }
  int64_t n_vocab() const;

 private:
  std::vector<int32_t> greedy_;
};

}  // namespace kiln

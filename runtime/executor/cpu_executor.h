// Runs a plan on the CPU: one step of the model over a ragged batch, with
// the KV cache in a page pool addressed through block tables. This is the
// reference every other backend is checked against.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/rope.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/plan.h"

namespace kiln {

struct CpuExecutorOptions {
  int threads = 0;        // 0: all cores
  int64_t num_pages = 0;  // KV pages in the pool; 0: sized as below
  // With num_pages 0 and a fraction: that fraction of the available RAM once
  // the weights are bound, at most max_kv_pages; else one context's pages.
  double kv_fraction = 0;
  int64_t max_kv_pages = 0;
  // Int8 activations for quantised weights where AVX2 has the integer
  // kernels (cpu/matmul.h); kF32 for the exact reference (the GPU backends'
  // kernel tests).
  cpu::Activations activations = cpu::Activations::kInt8;
};

class CpuExecutor final : public Executor {
 public:
  // Binds every weight of the plan from `weights`, converting those whose
  // plan storage differs from the source's (the repack the compiler
  // recorded), and allocates the arena and the page pool.
  static absl::StatusOr<std::unique_ptr<CpuExecutor>> Create(Plan plan, const WeightSource& weights,
                                                             const CpuExecutorOptions& options);

  absl::StatusOr<std::span<const float>> Step(const StepBatch& batch) override;
  // Step with each launch timed by the wall clock (its threads' work done
  // when it returns): the kernel is the plan's kernel name, the shape a
  // matmul's weight rows x columns.
  absl::StatusOr<std::vector<KernelTime>> ProfileStep(const StepBatch& batch) override;
  std::string Describe() const override;
  const Plan& plan() const override { return plan_; }
  int64_t num_pages() const override { return num_pages_; }
  int threads() const { return pool_.num_threads(); }
  // Whether some quantised weight meets int8 activations (the integer
  // kernels) here.
  bool UsesIntegerKernels() const;

 private:
  struct BoundWeight {
    cpu::WeightStorage storage;
    int64_t rows = 1, cols = 0;
    const uint8_t* data = nullptr;
    std::vector<uint8_t> owned;  // repacked bytes (and 1-D weights, as f32)
    // q4_K / q6_K rows in groups of eight (cpu/row_groups.h), from std::aligned_alloc.
    std::unique_ptr<uint8_t, void (*)(void*)> row_groups{nullptr, std::free};
  };
  CpuExecutor(Plan plan, int threads) : plan_(std::move(plan)), pool_(threads) {}
  // The plan's launches over a checked batch, each timed into `times` where
  // given; returns the batch's bucket.
  absl::StatusOr<size_t> RunLaunches(const StepBatch& batch, std::vector<KernelTime>* times);
  absl::Status RunLaunch(const PlanLaunch& launch, const StepBatch& batch, size_t bucket);
  absl::Status RunAttentionOrRope(const PlanLaunch& launch, const StepBatch& batch, size_t bucket);

  Plan plan_;
  cpu::ThreadPool pool_;
  cpu::Activations activations_ = cpu::Activations::kInt8;
  std::map<std::string, BoundWeight, std::less<>> weights_;
  std::vector<uint8_t> arena_;
  // [layer][page][slot][kv_head][head_dim], K then V halves per layer: in
  // kv_, or in kv_f16_ when the plan's pool is f16.
  std::vector<float> kv_;
  std::vector<uint16_t> kv_f16_;
  std::vector<float> scratch_;
  std::map<int64_t, int64_t> rows_at_;  // arena offset -> rows written there in this step
  int64_t num_pages_ = 0;
  int64_t n_vocab_ = 0;
};

}  // namespace kiln

// The serving engine: one thread owns the scheduler (which is not
// thread-safe) and runs steps while there is work; HTTP handler threads
// submit requests and cancel them through it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/serving/scheduler.h"

namespace kiln {

class Engine {
 public:
  // `drafter` (optional, not owned): see Scheduler.
  Engine(Executor& executor, KvPageManager& pages, SchedulerOptions options, StepDrafter* drafter = nullptr);
  ~Engine();  // Stop()

  absl::StatusOr<int64_t> Submit(ScheduledRequest request);
  void Cancel(int64_t id);
  void Stop();

  SchedulerStats stats() const;
  bool speculative() const { return speculative_; }  // has a drafter
  KvPageStats page_stats() const;

 private:
  void Loop();

  KvPageManager& pages_;
  Scheduler scheduler_;
  const bool speculative_;
  mutable std::mutex mu_;  // guards scheduler_ and pages_
  // Threads waiting for mu_: the engine steps aside between steps until
  // they have had it (std::mutex is not fair, and the engine would
  // otherwise take it back at once while there is work).
  mutable std::atomic<int> waiters_{0};
  std::condition_variable work_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kiln

// A fixed set of worker threads for the CPU kernels' parallel loops. One pool
// serves every call (threads are started once, not per kernel); the calling
// thread works too, so a pool of N threads starts N - 1 workers.
//
// Work is handed out in chunks from a shared counter, so which thread runs
// which chunk varies from call to call: kernels must make each output depend
// only on its index (never on the partition) to be thread-count independent.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace kiln::cpu {

class ThreadPool {
 public:
  // `num_threads` <= 0: one per hardware thread.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges that together cover [0, n), each
  // at most `grain` long (grain <= 0 means 1), and returns when all are done.
  // Calls from several threads are serialised; a call from inside `fn` (or
  // from a one-thread pool) runs inline on the calling thread.
  void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void WorkerLoop();
  // Waits for a job newer than `seen`: spins briefly (decode steps launch
  // hundreds of small jobs back to back, and waking a thread from a condition
  // variable costs about 10 us), then blocks. False on shutdown.
  bool WaitForJob(uint64_t seen);
  // Enters the open job, if there is one: false when it is closed (the
  // caller has taken or finished every chunk) or when no job was ever open.
  bool TryJoin();
  // Takes chunks of the current job until none is left.
  void RunChunks();

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one ParallelFor at a time

  std::mutex mu_;                        // guards the sleeping side of the two signals below
  std::condition_variable wake_;         // workers: a new job or shutdown
  std::condition_variable done_;         // caller: the last worker left the closed job
  std::atomic<uint64_t> generation_{0};  // bumped per job
  // kOpen while workers may still join the current job, plus the number of
  // workers inside it. The caller waits only for workers that joined: one
  // that was descheduled before it joined (a loaded or oversubscribed host)
  // finds the job closed when it runs and is not waited for.
  static constexpr uint64_t kOpen = uint64_t{1} << 63;
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> shutdown_{false};

  // The current job, written before generation_ is bumped.
  absl::FunctionRef<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  std::atomic<int64_t> next_{0};
};

}  // namespace kiln::cpu

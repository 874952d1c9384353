#include "runtime/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace kiln::cpu {

namespace {

// Set on pool threads (and on a caller while it runs a job) so that a nested
// ParallelFor runs inline instead of waiting on itself.
thread_local bool inside_job = false;

// How long a thread polls before sleeping: long enough to bridge the gap
// between the kernels of one step, short enough not to hold a core idle.
constexpr auto kSpin = std::chrono::microseconds(50);

// Polls `ready` (yielding the core between polls) for up to kSpin.
template <class Ready>
bool SpinUntil(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (i % 64 == 63 && std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 0; i + 1 < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t begin = next_.fetch_add(job_grain_, std::memory_order_relaxed);
    if (begin >= job_n_) return;
    (*job_)(begin, std::min(job_n_, begin + job_grain_));
  }
}

bool ThreadPool::WaitForJob(uint64_t seen) {
  auto ready = [&] {
    return shutdown_.load(std::memory_order_acquire) ||
           generation_.load(std::memory_order_acquire) != seen;
  };
  if (!SpinUntil(ready)) {
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, ready);
  }
  return !shutdown_.load(std::memory_order_acquire);
}

bool ThreadPool::TryJoin() {
  uint64_t s = state_.load(std::memory_order_acquire);
  while (s & kOpen) {
    // Acquire: the job's fields were written before the caller opened it.
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  }
  return false;
}

void ThreadPool::WorkerLoop() {
  inside_job = true;
  uint64_t seen = 0;
  while (WaitForJob(seen)) {
    seen = generation_.load(std::memory_order_acquire);
    if (!TryJoin()) continue;
    RunChunks();
    if (state_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The last worker out of a closed job (the state was exactly one
      // worker, not open). Taking the lock orders this notify after the
      // caller's check-then-wait.
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || inside_job || n <= grain) {
    for (int64_t begin = 0; begin < n; begin += grain) fn(begin, std::min(n, begin + grain));
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  next_.store(0, std::memory_order_relaxed);
  // No worker is inside a job here: the previous call waited for them all.
  state_.store(kOpen, std::memory_order_release);
  {
    // Bumped under the lock so that a worker between its check and its wait
    // cannot miss it; the release publishes the job fields above.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  inside_job = true;
  RunChunks();
  inside_job = false;
  // Every chunk is taken: close the job, then wait only for the workers that
  // joined it (they may still be running their last chunk).
  state_.fetch_and(~kOpen, std::memory_order_acq_rel);
  auto all_done = [&] { return state_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(all_done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, all_done);
  }
  job_ = nullptr;
}

}  // namespace kiln::cpu

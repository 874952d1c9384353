#include "runtime/serving/engine.h"

#include <cstdio>

namespace kiln {

Engine::Engine(Executor& executor, KvPageManager& pages, SchedulerOptions options, StepDrafter* drafter)
    : pages_(pages), scheduler_(executor, pages, options, drafter), speculative_(drafter != nullptr) {
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {
// Holds `mu` while announcing itself in `waiters` until it has it.
class FairLock {
 public:
  FairLock(std::mutex& mu, std::atomic<int>& waiters) : mu_(mu) {
    ++waiters;
    mu_.lock();
    --waiters;
  }
  ~FairLock() { mu_.unlock(); }

 private:
  std::mutex& mu_;
};
}  // namespace

absl::StatusOr<int64_t> Engine::Submit(ScheduledRequest request) {
  absl::StatusOr<int64_t> id;
  {
    FairLock lock(mu_, waiters_);
    if (stopping_) return absl::UnavailableError("the server is shutting down");
    id = scheduler_.Submit(std::move(request));
  }
  work_.notify_all();
  return id;
}

void Engine::Cancel(int64_t id) {
  FairLock lock(mu_, waiters_);
  scheduler_.Cancel(id);
}

SchedulerStats Engine::stats() const {
  FairLock lock(mu_, waiters_);
  return scheduler_.stats();
}

KvPageStats Engine::page_stats() const {
  FairLock lock(mu_, waiters_);
  return pages_.Stats();
}

void Engine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [this] { return stopping_ || !scheduler_.idle(); });
    if (stopping_) return;
    // The callbacks of a step run here, under the lock: they only queue
    // tokens for the handler threads.
    absl::StatusOr<bool> more = scheduler_.Step();
    if (!more.ok()) {
      const std::string why(more.status().message());
      std::fprintf(stderr, "kiln serve: step failed: %s\n", why.c_str());
      scheduler_.FailAll("error: " + why);
    }
    // Let submitters, cancellers and /metrics in between steps.
    lock.unlock();
    while (waiters_.load() > 0) std::this_thread::yield();
    lock.lock();
  }
}

}  // namespace kiln

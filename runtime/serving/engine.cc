#include "runtime/serving/engine.h"

#include <cstdio>

namespace kiln {

Engine::Engine(CpuExecutor& executor, KvPageManager& pages, SchedulerOptions options)
    : pages_(pages), scheduler_(executor, pages, options) {
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

absl::StatusOr<int64_t> Engine::Submit(ScheduledRequest request) {
  absl::StatusOr<int64_t> id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the server is shutting down");
    id = scheduler_.Submit(std::move(request));
  }
  work_.notify_all();
  return id;
}

void Engine::Cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  scheduler_.Cancel(id);
}

SchedulerStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scheduler_.stats();
}

KvPageStats Engine::page_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
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
  }
}

}  // namespace kiln

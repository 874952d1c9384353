// Continuous (iteration-level) batching: every step gathers one token of
// each running decode and chunks of pending prompts up to a token budget into
// one ragged step, so requests join and leave between steps and long prompts
// never stall decodes. Pages come from the KV page manager; when they run
// out, the youngest running request is preempted (its pages freed, its
// tokens recomputed later), never a crash.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/executor/executor.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serving/kv_page_manager.h"

namespace kiln {

struct ScheduledRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::function<bool(int32_t)> is_end_of_generation;
  // Sees every generated token; returning false cancels the request (the
  // client went away).
  std::function<bool(int32_t token, const SampledToken& sampled)> on_token;
  // Called once at the end: "length", "eog", "cancelled", or an error message.
  std::function<void(const std::string& finish_reason)> on_finish;
  int logprobs = Sampler::kNoLogprobs;
};

struct SchedulerOptions {
  int64_t token_budget = 256;  // tokens per step (at most the largest planned bucket)
  int64_t max_running = 64;    // sequences per step
};

struct SchedulerStats {
  int64_t steps = 0, prefill_tokens = 0, decode_tokens = 0, preemptions = 0, finished = 0;
  int64_t running = 0, waiting = 0;  // now
};

class Scheduler {
 public:
  Scheduler(Executor& executor, KvPageManager& pages, SchedulerOptions options);

  // Queues a request (FCFS); returns its id. Errors: an empty prompt, a
  // prompt plus max_tokens longer than the context, bad sampling parameters.
  absl::StatusOr<int64_t> Submit(ScheduledRequest request);
  void Cancel(int64_t id);
  // Ends every request with `reason` (after a step failed: never leave a
  // client waiting).
  void FailAll(const std::string& reason);
  // Runs one step if any request is waiting or running; false when idle.
  absl::StatusOr<bool> Step();
  bool idle() const { return running_.empty() && waiting_.empty(); }
  SchedulerStats stats() const {
    SchedulerStats s = stats_;
    s.running = static_cast<int64_t>(running_.size());
    s.waiting = static_cast<int64_t>(waiting_.size());
    return s;
  }

 private:
  struct Sequence {
    int64_t id = 0;
    ScheduledRequest request;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t computed = 0;         // tokens whose KV is in the pool
    int64_t generated = 0;
    std::optional<Sampler> sampler;
    bool cancelled = false;
  };
  void Finish(Sequence& seq, const std::string& reason);
  void Preempt(Sequence& seq);

  Executor& executor_;
  KvPageManager& pages_;
  SchedulerOptions options_;
  std::map<int64_t, std::unique_ptr<Sequence>> sequences_;
  std::deque<int64_t> waiting_;   // FCFS
  std::vector<int64_t> running_;  // admission order: the youngest last
  int64_t next_id_ = 1;
  SchedulerStats stats_;
};

}  // namespace kiln

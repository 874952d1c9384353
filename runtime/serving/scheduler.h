// Continuous (iteration-level) batching: every step gathers one token of
// each running decode and chunks of pending prompts up to a token budget into
// one ragged step, so requests join and leave between steps and long prompts
// never stall decodes. Pages come from the KV page manager; when they run
// out, the youngest running request is preempted (its pages freed, its
// tokens recomputed later), never a crash.
//
// With a drafter, decoding sequences speculate inside the same steps: such a
// sequence contributes its last token plus k drafted tokens, with a logit row
// for each, next to the other sequences' decode tokens and prefill chunks;
// the target keeps the accepted prefix and its own next token, and the
// rejected positions are rolled back by truncating the sequence's KV (pages
// past it released, nothing copied) in the target's and the drafter's pool.
// How k is chosen per step: see PlanDrafts in scheduler.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/executor/executor.h"
#include "runtime/executor/speculative.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serving/kv_page_manager.h"
#include "runtime/serving/step_drafter.h"

namespace kiln {

struct ScheduledRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::function<bool(int32_t)> is_end_of_generation;
  // Sees every generated token; returning false cancels the request (the
  // client went away).
  std::function<bool(int32_t token, const SampledToken& sampled)> on_token;
  // Called once at the end: "length", "eog", "cancelled", or an error
  // message; with what speculation did for the request (steps: its
  // verifications that carried a draft).
  std::function<void(const std::string& finish_reason, const SpeculativeStats& speculation)> on_finish;
  int logprobs = Sampler::kNoLogprobs;
  // Speculate with the scheduler's drafter, if it has one. Sampled requests
  // that ask for logprobs never speculate (verification reports logprobs
  // for greedy requests only).
  bool speculative = true;
  // The id of an earlier request with the same prompt (the other choices of
  // an n > 1 completion), or 0: this one waits (others may pass it) until
  // that one has computed the prompt's whole pages, then finds them in the
  // prefix cache, so the prompt is computed once rather than n times.
  int64_t prompt_shared_with = 0;
};

struct SchedulerOptions {
  int64_t token_budget = 256;  // tokens per step (at most the largest planned bucket)
  int64_t max_running = 64;    // sequences per step
  // With a drafter: the longest draft of a sequence, and the step size (in
  // tokens) up to which a step costs about the same whatever its size (it is
  // reading the weights, memory-bound); drafted tokens only fill the room
  // below it.
  int draft_max = 8;
  int64_t verify_budget = 64;
  // While sequences are decoding, a step holds at most this many tokens
  // (0: token_budget): their next token waits for one small step, not for a
  // long prefill chunk (on an H200 a 512-token step costs 4x a decode step
  // of 8 sequences); the decodes are counted first, prefill chunks take the
  // rest (at least one token, so prompts always advance). With none
  // decoding, prefill chunks use token_budget.
  int64_t decoding_step_budget = 0;
};

struct SchedulerStats {
  int64_t steps = 0, prefill_tokens = 0, decode_tokens = 0, preemptions = 0, finished = 0;
  int64_t running = 0, waiting = 0;  // now
  // Speculation, summed over requests: drafted and accepted tokens, and
  // verifications that carried a draft.
  int64_t spec_drafted = 0, spec_accepted = 0, spec_verifications = 0;
  // The latest step: its tokens, its sequences, the drafted tokens among them.
  int64_t last_step_tokens = 0, last_step_sequences = 0, last_step_drafted = 0;
  // Wall time of all steps, and the part spent in the executor (the rest is
  // host work between GPU steps: planning, sampling, callbacks).
  double step_seconds = 0, executor_seconds = 0;
};

class Scheduler {
 public:
  // `drafter` (optional, not owned) makes decoding sequences speculate.
  Scheduler(Executor& executor, KvPageManager& pages, SchedulerOptions options, StepDrafter* drafter = nullptr);

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
  bool speculative() const { return drafter_ != nullptr; }
  SchedulerStats stats() const {
    SchedulerStats s = stats_;
    s.running = static_cast<int64_t>(running_.size());
    s.waiting = static_cast<int64_t>(waiting_.size());
    return s;
  }

 private:
  // Step() without its timing.
  absl::StatusOr<bool> RunStep();
  struct Sequence {
    int64_t id = 0;
    ScheduledRequest request;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t computed = 0;         // tokens whose KV is in the pool
    int64_t generated = 0;
    std::optional<Sampler> sampler;
    bool cancelled = false;
    // Speculation: whether it may, its adaptive draft length, its recent
    // acceptance rate, the coins of the rejection rule, its totals.
    bool speculates = false;
    int draft_cap = 1;
    double acceptance = 0.5;
    std::mt19937_64 rng;
    SpeculativeStats spec;
  };
  struct Slot {
    Sequence* seq;
    int64_t begin, count;
    Draft draft;  // drafted tokens verified after the slot's own
  };
  void Finish(Sequence& seq, const std::string& reason);
  // Whether a waiting sequence may be admitted now (prompt_shared_with).
  bool MayAdmit(const Sequence& seq) const;
  void Preempt(Sequence& seq);
  // Draft lengths for this step's decoding speculative slots (see the .cc).
  std::vector<int> PlanDrafts(const std::vector<Slot>& slots, int64_t step_tokens) const;
  // Drafts for the planned slots, with target pages for them; a slot whose
  // pages run out verifies no draft.
  absl::Status DraftSlots(std::vector<Slot>& slots, const std::vector<int>& lengths);
  // After the step: accepts or rejects the slot's draft, rolls back the
  // rejected positions, emits the kept tokens.
  void Verify(Slot& slot, std::span<const float> rows);
  // Hands one kept token to the request; false when it finished.
  bool Emit(Sequence& s, const SampledToken& token);

  Executor& executor_;
  KvPageManager& pages_;
  SchedulerOptions options_;
  StepDrafter* drafter_;
  std::map<int64_t, std::unique_ptr<Sequence>> sequences_;
  std::deque<int64_t> waiting_;   // FCFS
  std::vector<int64_t> running_;  // admission order: the youngest last
  int64_t next_id_ = 1;
  SchedulerStats stats_;
  // Rows of a step are sampled in parallel from this vocabulary size on, by
  // up to kSamplingThreads threads (started on first use).
  static constexpr int64_t kParallelSamplingVocab = 32768;
  static constexpr int kSamplingThreads = 8;
  std::unique_ptr<cpu::ThreadPool> sampling_pool_;
};

}  // namespace kiln

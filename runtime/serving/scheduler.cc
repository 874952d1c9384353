#include "runtime/serving/scheduler.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {

Scheduler::Scheduler(Executor& executor, KvPageManager& pages, SchedulerOptions options, StepDrafter* drafter)
    : executor_(executor), pages_(pages), options_(options), drafter_(drafter) {
  options_.token_budget = std::clamp<int64_t>(options_.token_budget, 1, executor_.max_step_tokens());
  options_.max_running = std::max<int64_t>(options_.max_running, 1);
  options_.draft_max = std::max(options_.draft_max, 1);
}

absl::StatusOr<int64_t> Scheduler::Submit(ScheduledRequest request) {
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (request.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be at least 1");
  const int64_t context = executor_.plan().pool.max_tokens;
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (total > context) {
    return absl::OutOfRangeError(absl::StrFormat(
        "the prompt (%d tokens) plus max_tokens %d exceeds the context of %d tokens", request.prompt.size(),
        request.max_tokens, context));
  }
  if ((total + pages_.page_size() - 1) / pages_.page_size() > pages_.num_pages()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the request needs %d tokens of KV cache; the whole pool holds %d", total, pages_.num_pages() * pages_.page_size()));
  }
  absl::StatusOr<Sampler> sampler = Sampler::Create(request.sampling);
  if (!sampler.ok()) return sampler.status();
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->tokens = request.prompt;
  sampler->Accept(request.prompt);
  seq->sampler = *std::move(sampler);
  seq->speculates = drafter_ != nullptr && request.speculative &&
                    (request.sampling.temperature == 0 || request.logprobs == Sampler::kNoLogprobs);
  seq->draft_cap = std::max(1, options_.draft_max / 2);
  seq->rng.seed(request.sampling.seed ^ 0x5bd1e9955bd1e995ull);
  seq->request = std::move(request);
  const int64_t id = seq->id;
  sequences_[id] = std::move(seq);
  waiting_.push_back(id);
  return id;
}

void Scheduler::Cancel(int64_t id) {
  if (auto it = sequences_.find(id); it != sequences_.end()) it->second->cancelled = true;
}

void Scheduler::FailAll(const std::string& reason) {
  while (!sequences_.empty()) Finish(*sequences_.begin()->second, reason);
}

void Scheduler::Finish(Sequence& seq, const std::string& reason) {
  if (pages_.Contains(seq.id)) (void)pages_.Free(seq.id);
  if (drafter_ != nullptr) drafter_->Release(seq.id);
  running_.erase(std::remove(running_.begin(), running_.end(), seq.id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq.id), waiting_.end());
  ++stats_.finished;
  if (seq.request.on_finish) seq.request.on_finish(reason, seq.spec);
  sequences_.erase(seq.id);  // `seq` is gone after this
}

bool Scheduler::MayAdmit(const Sequence& seq) const {
  auto it = sequences_.find(seq.request.prompt_shared_with);
  if (it == sequences_.end()) return true;  // none, or it has finished
  const int64_t whole_pages = static_cast<int64_t>(seq.request.prompt.size()) / pages_.page_size() * pages_.page_size();
  return it->second->computed >= whole_pages;
}

void Scheduler::Preempt(Sequence& seq) {
  // Recompute: drop the KV, keep prompt + generated tokens and the sampler.
  (void)pages_.Free(seq.id);
  if (drafter_ != nullptr) drafter_->Release(seq.id);
  seq.computed = 0;
  running_.erase(std::remove(running_.begin(), running_.end(), seq.id), running_.end());
  waiting_.push_front(seq.id);
  ++stats_.preemptions;
}

absl::StatusOr<bool> Scheduler::Step() {
  const auto begin = std::chrono::steady_clock::now();
  absl::StatusOr<bool> more = RunStep();
  stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return more;
}

absl::StatusOr<bool> Scheduler::RunStep() {
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    Sequence& s = *it->second;
    ++it;
    if (s.cancelled) Finish(s, "cancelled");
  }
  if (idle()) return false;

  std::vector<Slot> slots;
  int64_t budget = options_.token_budget;
  // What prefill chunks (slots of more than one pending token) may take.
  int64_t prefill_room = budget;
  if (options_.decoding_step_budget > 0) {
    int64_t decoding = 0;
    for (int64_t id : running_) {
      const Sequence& s = *sequences_.at(id);
      decoding += static_cast<int64_t>(s.tokens.size()) - s.computed == 1;
    }
    if (decoding > 0) {
      budget = std::min(budget, std::max(options_.decoding_step_budget, decoding + 1));
      prefill_room = budget - decoding;
    }
  }
  auto is_prefill = [](const Slot& slot) { return static_cast<int64_t>(slot.seq->tokens.size()) - slot.begin > 1; };
  // Tokens a sequence with `pending` uncomputed ones gets this step.
  auto chunk = [&](int64_t pending) {
    return pending > 1 ? std::min({pending, budget, prefill_room}) : std::min(pending, budget);
  };

  // Running sequences first, oldest first: decodes and prefill chunks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& s = *sequences_.at(running_[i]);
    const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.computed;
    const int64_t count = chunk(pending);
    if (count <= 0) {  // a prefill chunk with no room left this step
      ++i;
      continue;
    }
    absl::Status grown = pages_.Grow(s.id, std::max(pages_.NumTokens(s.id), s.computed + count));
    if (absl::IsResourceExhausted(grown)) {
      // Out of pages: the youngest running request gives its pages back.
      Sequence& youngest = *sequences_.at(running_.back());
      const bool self = youngest.id == s.id;
      std::vector<Slot> kept;
      for (const Slot& slot : slots) {
        if (slot.seq->id != youngest.id) {
          kept.push_back(slot);
        } else {
          budget += slot.count;
          if (is_prefill(slot)) prefill_room += slot.count;
        }
      }
      slots = std::move(kept);
      Preempt(youngest);
      if (self) continue;  // running_[i] is now the next one
      continue;            // retry this sequence
    }
    if (!grown.ok()) return grown;
    slots.push_back({&s, s.computed, count, {}});
    budget -= count;
    if (pending > 1) prefill_room -= count;
    ++i;
  }
  // Admission, FCFS, while budget and pages allow (a request waiting for its
  // prompt's pages from another lets the ones behind it pass).
  for (size_t w = 0; w < waiting_.size() && budget > 0 && prefill_room > 0 &&
                     static_cast<int64_t>(running_.size()) < options_.max_running;) {
    Sequence& s = *sequences_.at(waiting_[w]);
    if (!MayAdmit(s)) {
      ++w;
      continue;
    }
    absl::StatusOr<int64_t> cached = pages_.AllocateWithPrefix(s.id, s.tokens);
    if (absl::IsResourceExhausted(cached.status())) break;
    if (!cached.ok()) return cached.status();
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    running_.push_back(s.id);
    s.computed = *cached;
    const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.computed;
    const int64_t count = chunk(pending);
    slots.push_back({&s, s.computed, count, {}});
    budget -= count;
    if (pending > 1) prefill_room -= count;
  }
  if (slots.empty()) {
    // Nothing fits: only possible when one request needs more than the pool.
    if (!waiting_.empty() && running_.empty()) {
      // (The first that may be admitted: one waiting for another's prompt did not try.)
      for (int64_t id : waiting_) {
        if (Sequence& s = *sequences_.at(id); MayAdmit(s)) {
          Finish(s, "error: the request does not fit the KV pool");
          break;
        }
      }
    }
    return !idle();
  }

  if (drafter_ != nullptr) {
    int64_t step_tokens = 0;
    for (const Slot& slot : slots) step_tokens += slot.count;
    const std::vector<int> lengths = PlanDrafts(slots, step_tokens);
    if (absl::Status drafted = DraftSlots(slots, lengths); !drafted.ok()) return drafted;
  }

  StepBatch batch;
  int32_t max_pages = 0;
  for (const Slot& slot : slots) {
    max_pages = std::max<int32_t>(max_pages, static_cast<int32_t>(pages_.BlockTable(slot.seq->id).size()));
  }
  batch.pages_per_seq = max_pages;
  batch.query_starts.push_back(0);
  std::vector<int> row_of_slot(slots.size(), -1);
  int64_t drafted = 0;
  for (size_t k = 0; k < slots.size(); ++k) {
    const Slot& slot = slots[k];
    const int64_t kd = static_cast<int64_t>(slot.draft.tokens.size());
    for (int64_t p = slot.begin; p < slot.begin + slot.count; ++p) {
      batch.tokens.push_back(slot.seq->tokens[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
    }
    for (int64_t j = 0; j < kd; ++j) {
      batch.tokens.push_back(slot.draft.tokens[j]);
      batch.positions.push_back(static_cast<int32_t>(slot.begin + slot.count + j));
    }
    drafted += kd;
    batch.query_starts.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.context_lens.push_back(static_cast<int32_t>(slot.begin + slot.count + kd));
    std::span<const int32_t> table = pages_.BlockTable(slot.seq->id);
    batch.block_tables.insert(batch.block_tables.end(), table.begin(), table.end());
    batch.block_tables.resize(batch.block_tables.size() + (max_pages - table.size()), 0);
    if (slot.begin + slot.count == static_cast<int64_t>(slot.seq->tokens.size())) {
      // A row for the slot's last own token and one after each drafted token.
      row_of_slot[k] = static_cast<int>(batch.logit_rows.size());
      for (int64_t j = kd; j >= 0; --j) batch.logit_rows.push_back(static_cast<int32_t>(batch.tokens.size() - 1 - j));
    }
  }
  if (batch.logit_rows.empty()) batch.logit_rows.push_back(static_cast<int32_t>(batch.tokens.size() - 1));
  // When every row is a plain argmax, the backend picks the ids (on the GPU:
  // R ids come back instead of R x n_vocab logits, and no host argmax).
  bool argmax_only = drafted == 0;
  for (size_t k = 0; k < slots.size() && argmax_only; ++k) {
    const Sequence& s = *slots[k].seq;
    if (row_of_slot[k] >= 0) argmax_only = s.request.logprobs == Sampler::kNoLogprobs && s.sampler->IsPlainArgmax();
  }
  absl::StatusOr<std::span<const float>> logits = std::span<const float>();
  absl::StatusOr<std::span<const int32_t>> ids = std::span<const int32_t>();
  const auto executor_begin = std::chrono::steady_clock::now();
  if (argmax_only) {
    ids = executor_.StepGreedy(batch);
    if (!ids.ok()) return ids.status();
  } else {
    logits = executor_.Step(batch);
    if (!logits.ok()) return logits.status();
  }
  stats_.executor_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - executor_begin).count();
  ++stats_.steps;
  stats_.last_step_tokens = static_cast<int64_t>(batch.tokens.size());
  stats_.last_step_sequences = static_cast<int64_t>(slots.size());
  stats_.last_step_drafted = drafted;

  const int64_t vocab = executor_.n_vocab();
  // The sampled rows, drawn before any token is emitted: each sequence's
  // sampler depends only on its own row and history, so drawing them side by
  // side changes no token. Over a large vocabulary a row costs ~1 ms of host
  // time (a 64-sequence step spent 50 ms sampling on the H200's host, more
  // than the GPU step), so the rows go to a thread pool there.
  std::vector<std::optional<absl::StatusOr<SampledToken>>> sampled;
  if (!argmax_only) {
    sampled.resize(slots.size());
    std::vector<size_t> rows;
    for (size_t k = 0; k < slots.size(); ++k) {
      if (slots[k].draft.tokens.empty() && row_of_slot[k] >= 0) rows.push_back(k);
    }
    const auto sample = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const size_t k = rows[i];
        Sequence& s = *slots[k].seq;
        sampled[k] = s.sampler->Sample(logits->subspan(static_cast<size_t>(row_of_slot[k]) * vocab, vocab),
                                       s.request.logprobs);
      }
    };
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n > 1 && vocab >= kParallelSamplingVocab) {
      if (sampling_pool_ == nullptr) {
        const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        sampling_pool_ = std::make_unique<cpu::ThreadPool>(std::min(kSamplingThreads, cores));
      }
      sampling_pool_->ParallelFor(n, 1, sample);
    } else {
      sample(0, n);
    }
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    Sequence& s = *slots[k].seq;
    if (!slots[k].draft.tokens.empty()) {
      const size_t rows = slots[k].draft.tokens.size() + 1;
      Verify(slots[k], logits->subspan(static_cast<size_t>(row_of_slot[k]) * vocab, rows * vocab));
      continue;
    }
    s.computed += slots[k].count;
    // A chunk of more than one token is prompt (or recompute after preemption).
    (slots[k].count > 1 || s.generated == 0 ? stats_.prefill_tokens : stats_.decode_tokens) += slots[k].count;
    (void)pages_.CommitFullPages(s.id, s.tokens);
    if (row_of_slot[k] < 0) continue;
    if (argmax_only) {
      Emit(s, s.sampler->AcceptArgmax((*ids)[row_of_slot[k]]));
      continue;
    }
    const absl::StatusOr<SampledToken>& next = *sampled[k];
    if (!next.ok()) {
      Finish(s, absl::StrCat("error: ", next.status().message()));
      continue;
    }
    Emit(s, *next);
  }
  return !idle();
}

bool Scheduler::Emit(Sequence& s, const SampledToken& token) {
  s.tokens.push_back(token.token);
  ++s.generated;
  const bool keep = !s.request.on_token || s.request.on_token(token.token, token);
  if (!keep) {
    Finish(s, "cancelled");
  } else if (s.request.is_end_of_generation && s.request.is_end_of_generation(token.token)) {
    Finish(s, "eog");
  } else if (s.generated >= s.request.max_tokens) {
    Finish(s, "length");
  } else {
    return true;
  }
  return false;
}

// The draft-length rule. A drafted token costs the step one more token to
// verify. While a step is small it is memory-bound (its time is reading the
// weights), so those extra tokens are about free and drafting gains the
// expected accepted tokens; past `verify_budget` tokens the step is
// compute-bound, every verified token costs what a decoded one does, and a
// drafted token accepted with probability below 1 is a loss. So the room for
// drafts is verify_budget (at most the token budget) minus the step's own
// tokens (decodes and prefill chunks), handed out one token per round to
// the decoding speculative sequences with the best recent acceptance first,
// each up to its adaptive length (NextDraftLength: one longer after a fully
// accepted draft, else one past what was accepted) and to what it may still
// generate. A batch of verify_budget decodes leaves no room: every k is 0,
// and the step is plain decoding.
std::vector<int> Scheduler::PlanDrafts(const std::vector<Slot>& slots, int64_t step_tokens) const {
  std::vector<int> lengths(slots.size(), 0);
  int64_t room = std::min(options_.verify_budget, options_.token_budget) - step_tokens;
  std::vector<size_t> order;
  std::vector<int> cap(slots.size(), 0);
  for (size_t k = 0; k < slots.size(); ++k) {
    const Sequence& s = *slots[k].seq;
    const bool decoding = slots[k].count == 1 && s.generated > 0 &&
                          slots[k].begin + 1 == static_cast<int64_t>(s.tokens.size());
    if (!s.speculates || !decoding) continue;
    // Keep the accepted tokens plus the target's own within max_tokens.
    cap[k] = static_cast<int>(std::min<int64_t>(s.draft_cap, s.request.max_tokens - s.generated - 1));
    if (cap[k] > 0) order.push_back(k);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ra = slots[a].seq->acceptance, rb = slots[b].seq->acceptance;
    return ra > rb || (ra == rb && a < b);
  });
  for (bool gave = true; room > 0 && gave;) {
    gave = false;
    for (size_t k : order) {
      if (room == 0) break;
      if (lengths[k] >= cap[k]) continue;
      ++lengths[k];
      --room;
      gave = true;
    }
  }
  return lengths;
}

absl::Status Scheduler::DraftSlots(std::vector<Slot>& slots, const std::vector<int>& lengths) {
  std::vector<DraftWant> wants;
  std::vector<size_t> slot_of;
  for (size_t k = 0; k < slots.size(); ++k) {
    if (lengths[k] == 0) continue;
    const Sequence& s = *slots[k].seq;
    wants.push_back({s.id, s.tokens, lengths[k], &s.request.sampling});
    slot_of.push_back(k);
  }
  if (wants.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<Draft>> drafts = drafter_->Propose(wants);
  if (!drafts.ok()) return drafts.status();
  for (size_t w = 0; w < wants.size(); ++w) {
    Slot& slot = slots[slot_of[w]];
    Draft& d = (*drafts)[w];
    if (static_cast<int>(d.tokens.size()) > lengths[slot_of[w]]) d.tokens.resize(lengths[slot_of[w]]);
    if (d.tokens.empty()) continue;
    const int64_t need = slot.begin + slot.count + static_cast<int64_t>(d.tokens.size());
    // Speculation takes free pages only; it never preempts anyone.
    if (!pages_.Grow(slot.seq->id, std::max(pages_.NumTokens(slot.seq->id), need)).ok()) continue;
    if (!d.q.empty()) d.q.resize(d.tokens.size());
    slot.draft = std::move(d);
  }
  return absl::OkStatus();
}

void Scheduler::Verify(Slot& slot, std::span<const float> rows) {
  Sequence& s = *slot.seq;
  const int kd = static_cast<int>(slot.draft.tokens.size());
  absl::StatusOr<Verdict> verdict =
      VerifyDraft(*s.sampler, slot.draft, rows, executor_.n_vocab(), s.rng, s.request.logprobs);
  if (!verdict.ok()) {
    Finish(s, absl::StrCat("error: ", verdict.status().message()));
    return;
  }
  const int accepted = verdict->accepted;
  // The slot's own token and the accepted drafts now have their KV; the
  // rejected positions are dropped (the pages past them go back).
  s.computed += slot.count + accepted;
  // Never refused: the committed pages end at or before s.computed.
  if (absl::Status cut = pages_.Truncate(s.id, s.computed); !cut.ok()) {
    Finish(s, absl::StrCat("error: ", cut.message()));
    return;
  }
  drafter_->Commit(s.id, s.computed);
  ++s.spec.steps;
  s.spec.drafted += kd;
  s.spec.accepted += accepted;
  ++stats_.spec_verifications;
  stats_.spec_drafted += kd;
  stats_.spec_accepted += accepted;
  stats_.decode_tokens += slot.count;
  s.acceptance = 0.7 * s.acceptance + 0.3 * static_cast<double>(accepted) / kd;
  s.draft_cap = NextDraftLength(s.draft_cap, kd, accepted, options_.draft_max);
  for (const SampledToken& t : verdict->tokens) {
    if (!Emit(s, t)) return;  // finished: `s` is gone
  }
  (void)pages_.CommitFullPages(s.id, s.tokens);
}

}  // namespace kiln

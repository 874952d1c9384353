#include "runtime/serving/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {

Scheduler::Scheduler(Executor& executor, KvPageManager& pages, SchedulerOptions options)
    : executor_(executor), pages_(pages), options_(options) {
  options_.token_budget = std::clamp<int64_t>(options_.token_budget, 1, executor_.max_step_tokens());
  options_.max_running = std::max<int64_t>(options_.max_running, 1);
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
  running_.erase(std::remove(running_.begin(), running_.end(), seq.id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq.id), waiting_.end());
  ++stats_.finished;
  if (seq.request.on_finish) seq.request.on_finish(reason);
  sequences_.erase(seq.id);  // `seq` is gone after this
}

void Scheduler::Preempt(Sequence& seq) {
  // Recompute: drop the KV, keep prompt + generated tokens and the sampler.
  (void)pages_.Free(seq.id);
  seq.computed = 0;
  running_.erase(std::remove(running_.begin(), running_.end(), seq.id), running_.end());
  waiting_.push_front(seq.id);
  ++stats_.preemptions;
}

absl::StatusOr<bool> Scheduler::Step() {
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    Sequence& s = *it->second;
    ++it;
    if (s.cancelled) Finish(s, "cancelled");
  }
  if (idle()) return false;

  struct Slot {
    Sequence* seq;
    int64_t begin, count;
  };
  std::vector<Slot> slots;
  int64_t budget = options_.token_budget;

  // Running sequences first, oldest first: decodes and prefill chunks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& s = *sequences_.at(running_[i]);
    const int64_t pending = static_cast<int64_t>(s.tokens.size()) - s.computed;
    const int64_t count = std::min(pending, budget);
    absl::Status grown = pages_.Grow(s.id, std::max(pages_.NumTokens(s.id), s.computed + count));
    if (absl::IsResourceExhausted(grown)) {
      // Out of pages: the youngest running request gives its pages back.
      Sequence& youngest = *sequences_.at(running_.back());
      const bool self = youngest.id == s.id;
      std::vector<Slot> kept;
      for (const Slot& slot : slots) {
        if (slot.seq->id != youngest.id) kept.push_back(slot);
        else budget += slot.count;
      }
      slots = std::move(kept);
      Preempt(youngest);
      if (self) continue;  // running_[i] is now the next one
      continue;            // retry this sequence
    }
    if (!grown.ok()) return grown;
    slots.push_back({&s, s.computed, count});
    budget -= count;
    ++i;
  }
  // Admission, FCFS, while budget and pages allow.
  while (budget > 0 && !waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_running) {
    Sequence& s = *sequences_.at(waiting_.front());
    absl::StatusOr<int64_t> cached = pages_.AllocateWithPrefix(s.id, s.tokens);
    if (absl::IsResourceExhausted(cached.status())) break;
    if (!cached.ok()) return cached.status();
    waiting_.pop_front();
    running_.push_back(s.id);
    s.computed = *cached;
    const int64_t count = std::min(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    slots.push_back({&s, s.computed, count});
    budget -= count;
  }
  if (slots.empty()) {
    // Nothing fits: only possible when one request needs more than the pool.
    if (!waiting_.empty() && running_.empty()) {
      Finish(*sequences_.at(waiting_.front()), "error: the request does not fit the KV pool");
    }
    return !idle();
  }

  StepBatch batch;
  int32_t max_pages = 0;
  for (const Slot& slot : slots) {
    max_pages = std::max<int32_t>(max_pages, static_cast<int32_t>(pages_.BlockTable(slot.seq->id).size()));
  }
  batch.pages_per_seq = max_pages;
  batch.query_starts.push_back(0);
  std::vector<int> row_of_slot(slots.size(), -1);
  for (size_t k = 0; k < slots.size(); ++k) {
    const Slot& slot = slots[k];
    for (int64_t p = slot.begin; p < slot.begin + slot.count; ++p) {
      batch.tokens.push_back(slot.seq->tokens[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
    }
    batch.query_starts.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.context_lens.push_back(static_cast<int32_t>(slot.begin + slot.count));
    std::span<const int32_t> table = pages_.BlockTable(slot.seq->id);
    batch.block_tables.insert(batch.block_tables.end(), table.begin(), table.end());
    batch.block_tables.resize(batch.block_tables.size() + (max_pages - table.size()), 0);
    if (slot.begin + slot.count == static_cast<int64_t>(slot.seq->tokens.size())) {
      row_of_slot[k] = static_cast<int>(batch.logit_rows.size());
      batch.logit_rows.push_back(static_cast<int32_t>(batch.tokens.size() - 1));
    }
  }
  if (batch.logit_rows.empty()) batch.logit_rows.push_back(static_cast<int32_t>(batch.tokens.size() - 1));
  absl::StatusOr<std::span<const float>> logits = executor_.Step(batch);
  if (!logits.ok()) return logits.status();
  ++stats_.steps;

  const int64_t vocab = executor_.n_vocab();
  for (size_t k = 0; k < slots.size(); ++k) {
    Sequence& s = *slots[k].seq;
    s.computed += slots[k].count;
    // A chunk of more than one token is prompt (or recompute after preemption).
    (slots[k].count > 1 || s.generated == 0 ? stats_.prefill_tokens : stats_.decode_tokens) += slots[k].count;
    (void)pages_.CommitFullPages(s.id, s.tokens);
    if (row_of_slot[k] < 0) continue;
    std::span<const float> row = logits->subspan(static_cast<size_t>(row_of_slot[k]) * vocab, vocab);
    absl::StatusOr<SampledToken> next = s.sampler->Sample(row, s.request.logprobs);
    if (!next.ok()) {
      Finish(s, absl::StrCat("error: ", next.status().message()));
      continue;
    }
    s.tokens.push_back(next->token);
    ++s.generated;
    const bool keep = !s.request.on_token || s.request.on_token(next->token, *next);
    if (!keep) {
      Finish(s, "cancelled");
    } else if (s.request.is_end_of_generation && s.request.is_end_of_generation(next->token)) {
      Finish(s, "eog");
    } else if (s.generated >= s.request.max_tokens) {
      Finish(s, "length");
    }
  }
  return !idle();
}

}  // namespace kiln

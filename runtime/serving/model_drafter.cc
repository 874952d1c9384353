#include "runtime/serving/model_drafter.h"

#include <algorithm>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"

namespace kiln {

struct ModelDrafter::Work {
  int64_t seq = 0;
  State* state = nullptr;
  std::vector<int32_t> ext;  // the sequence, then its draft so far
  int64_t n = 0;             // tokens of the sequence
  int k = 0;
  std::optional<Sampler> sampler;
  std::mt19937_64 rng;
  Draft* draft = nullptr;
};

absl::StatusOr<std::vector<Draft>> ModelDrafter::Propose(std::span<const DraftWant> wants) {
  std::vector<Draft> drafts(wants.size());
  std::vector<Work> works;
  works.reserve(wants.size());
  const int64_t context = executor_.plan().pool.max_tokens;
  for (size_t i = 0; i < wants.size(); ++i) {
    const DraftWant& w = wants[i];
    const int64_t n = static_cast<int64_t>(w.tokens.size());
    // Running k tokens writes positions up to n + k - 2.
    const int k = static_cast<int>(std::min<int64_t>(w.k, context - n + 1));
    if (k <= 0 || n == 0) continue;
    if (auto it = states_.find(w.seq); it != states_.end()) {
      // Commit keeps the draft's KV a prefix of the sequence; should the two
      // ever disagree, start the sequence's draft KV over rather than write
      // into pages that may be shared.
      const State& old = it->second;
      const int64_t limit = std::min<int64_t>(old.cached, n - 1);
      if (!std::equal(old.fed.begin(), old.fed.begin() + limit, w.tokens.begin())) Release(w.seq);
    }
    State& st = states_[w.seq];
    if (!pages_.Contains(w.seq)) {
      absl::StatusOr<int64_t> cached = pages_.AllocateWithPrefix(w.seq, w.tokens);
      if (absl::IsResourceExhausted(cached.status())) {
        states_.erase(w.seq);
        continue;
      }
      if (!cached.ok()) return cached.status();
      st.fed.assign(w.tokens.begin(), w.tokens.begin() + *cached);
      st.cached = *cached;
    }
    const int64_t valid = std::min<int64_t>(st.cached, n - 1);
    st.cached = valid;
    st.fed.resize(valid);
    absl::Status room = pages_.Truncate(w.seq, std::min(pages_.NumTokens(w.seq), valid));
    if (room.ok()) room = pages_.Grow(w.seq, std::max(pages_.NumTokens(w.seq), n + k - 1));
    if (absl::IsResourceExhausted(room)) {
      Release(w.seq);
      continue;
    }
    if (!room.ok()) return room;

    SamplingParams params = w.sampling != nullptr ? *w.sampling : SamplingParams{.temperature = 0};
    params.seed = params.seed + 0x9e3779b97f4a7c15ull * ++st.draws;
    absl::StatusOr<Sampler> sampler = Sampler::Create(params);
    if (!sampler.ok()) return sampler.status();
    sampler->Accept(w.tokens);
    Work& work = works.emplace_back();
    work.seq = w.seq;
    work.state = &st;
    work.ext.assign(w.tokens.begin(), w.tokens.end());
    work.n = n;
    work.k = k;
    work.sampler = *std::move(sampler);
    work.rng.seed(params.seed);
    work.draft = &drafts[i];
  }
  if (works.empty()) return drafts;

  // Round 0 catches up (at least the sequence's last token) and drafts the
  // first token; round j feeds draft token j and drafts token j + 1.
  std::vector<Piece> pieces;
  for (Work& w : works) pieces.push_back({&w, w.state->cached, w.n});
  if (absl::Status s = RunRound(std::move(pieces)); !s.ok()) return s;
  int longest = 0;
  for (const Work& w : works) longest = std::max(longest, w.k);
  for (int j = 1; j < longest; ++j) {
    pieces.clear();
    for (Work& w : works) {
      if (w.k > j) pieces.push_back({&w, w.n + j - 1, w.n + j});
    }
    if (absl::Status s = RunRound(std::move(pieces)); !s.ok()) return s;
  }
  for (Work& w : works) {
    // The last draft token was never run: the KV holds the rest.
    w.state->fed.assign(w.ext.begin(), w.ext.end() - 1);
    w.state->cached = static_cast<int64_t>(w.state->fed.size());
    if (absl::Status s = pages_.CommitFullPages(w.seq, std::span<const int32_t>(w.ext).first(w.n)); !s.ok()) return s;
  }
  return drafts;
}

absl::Status ModelDrafter::RunRound(std::vector<Piece> pieces) {
  const int64_t max_tokens = executor_.max_step_tokens();
  const int64_t vocab = executor_.n_vocab();
  size_t next = 0;
  int64_t split = -1;  // where the piece at `next` resumes after a split
  while (next < pieces.size()) {
    StepBatch batch;
    std::vector<Piece> ran;
    int64_t room = max_tokens;
    while (next < pieces.size() && room > 0) {
      Piece p = pieces[next];
      if (split >= 0) p.begin = split;
      const int64_t end = std::min(p.end, p.begin + room);
      ran.push_back({p.work, p.begin, end});
      room -= end - p.begin;
      if (end == p.end) {
        ++next;
        split = -1;
      } else {
        split = end;
      }
    }
    int32_t max_pages = 0;
    for (const Piece& p : ran) {
      max_pages = std::max<int32_t>(max_pages, static_cast<int32_t>(pages_.BlockTable(p.work->seq).size()));
    }
    batch.pages_per_seq = max_pages;
    batch.query_starts.push_back(0);
    std::vector<int> row_of(ran.size(), -1);
    for (size_t r = 0; r < ran.size(); ++r) {
      const Piece& p = ran[r];
      for (int64_t pos = p.begin; pos < p.end; ++pos) {
        batch.tokens.push_back(p.work->ext[pos]);
        batch.positions.push_back(static_cast<int32_t>(pos));
      }
      batch.query_starts.push_back(static_cast<int32_t>(batch.tokens.size()));
      batch.context_lens.push_back(static_cast<int32_t>(p.end));
      std::span<const int32_t> table = pages_.BlockTable(p.work->seq);
      batch.block_tables.insert(batch.block_tables.end(), table.begin(), table.end());
      batch.block_tables.resize(batch.block_tables.size() + (max_pages - table.size()), 0);
      if (p.end == static_cast<int64_t>(p.work->ext.size())) {
        row_of[r] = static_cast<int>(batch.logit_rows.size());
        batch.logit_rows.push_back(static_cast<int32_t>(batch.tokens.size() - 1));
      }
    }
    if (batch.logit_rows.empty()) batch.logit_rows.push_back(static_cast<int32_t>(batch.tokens.size() - 1));
    absl::StatusOr<std::span<const float>> logits = executor_.Step(batch);
    if (!logits.ok()) return absl::Status(logits.status().code(), absl::StrCat("draft model: ", logits.status().message()));
    ++steps_;
    for (size_t r = 0; r < ran.size(); ++r) {
      if (row_of[r] < 0) continue;
      Work& w = *ran[r].work;
      absl::StatusOr<int32_t> token = ChooseDraftToken(
          *w.sampler, logits->subspan(static_cast<size_t>(row_of[r]) * vocab, vocab), w.rng, w.draft->q);
      if (!token.ok()) return token.status();
      w.draft->tokens.push_back(*token);
      w.ext.push_back(*token);
    }
  }
  return absl::OkStatus();
}

void ModelDrafter::Commit(int64_t seq, int64_t kept) {
  auto it = states_.find(seq);
  if (it == states_.end() || !pages_.Contains(seq)) return;
  State& st = it->second;
  if (kept < st.cached) {
    st.cached = kept;
    st.fed.resize(kept);
  }
  // Never refused (the pages committed hold verified tokens only); if it
  // were, the draft state starts over rather than keep stale KV.
  if (!pages_.Truncate(seq, std::min(pages_.NumTokens(seq), st.cached)).ok()) {
    Release(seq);
    return;
  }
  // Only now are the pages' tokens known final.
  (void)pages_.CommitFullPages(seq, st.fed);
}

void ModelDrafter::Release(int64_t seq) {
  states_.erase(seq);
  if (pages_.Contains(seq)) (void)pages_.Free(seq);
}

}  // namespace kiln

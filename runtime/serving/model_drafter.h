// A draft model serving every speculative sequence of the scheduler: a second
// executor (same vocabulary as the target) with its own KV page manager.
//
// One Propose runs the draft for all sequences together: first a catch-up
// round (each sequence feeds what its draft KV lacks: the whole prompt the
// first time, afterwards the one or two tokens the target added; chunked
// across several steps when it exceeds the draft's largest batch), whose
// logits give every sequence its first draft token; then one round per
// further draft token, one token per sequence, all in one ragged step.
//
// Rollback is truncation: Commit() shortens the sequence's draft KV to the
// tokens that are final (pages past them released, nothing copied). Full
// pages of final tokens are registered for prefix reuse, so requests that
// share a prompt share the draft's pages too.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/executor/executor.h"
#include "runtime/serving/kv_page_manager.h"
#include "runtime/serving/step_drafter.h"

namespace kiln {

class ModelDrafter : public StepDrafter {
 public:
  // `pages` manages `executor`'s page pool (the same page count and size).
  ModelDrafter(Executor& executor, KvPageManager& pages) : executor_(executor), pages_(pages) {}

  // A sequence whose draft KV cannot get pages gets an empty draft this step
  // (and gives back what it held): speculation never preempts anything.
  absl::StatusOr<std::vector<Draft>> Propose(std::span<const DraftWant> wants) override;
  void Commit(int64_t seq, int64_t kept) override;
  void Release(int64_t seq) override;
  std::string name() const override { return "draft-model"; }

  int64_t steps() const { return steps_; }  // draft executor steps run so far
  const KvPageManager& pages() const { return pages_; }

 private:
  struct State {
    std::vector<int32_t> fed;  // the tokens at positions [0, cached) of its KV
    int64_t cached = 0;
    uint64_t draws = 0;  // proposals so far: varies the draft's sampling seed
  };
  struct Work;
  // A piece of one sequence to run: positions [begin, end) of its tokens;
  // the last piece of a round (end == the round's end) gets a logit row.
  struct Piece {
    Work* work;
    int64_t begin, end;
  };
  // Runs `pieces` in as few steps as fit the draft's largest batch, choosing
  // each work's next draft token from the logits of its last piece.
  absl::Status RunRound(std::vector<Piece> pieces);

  Executor& executor_;
  KvPageManager& pages_;
  std::unordered_map<int64_t, State> states_;  // node-based: Work keeps pointers into it
  int64_t steps_ = 0;
};

}  // namespace kiln

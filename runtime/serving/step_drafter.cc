#include "runtime/serving/step_drafter.h"

namespace kiln {

absl::StatusOr<std::vector<Draft>> LookupStepDrafter::Propose(std::span<const DraftWant> wants) {
  std::vector<Draft> drafts;
  drafts.reserve(wants.size());
  for (const DraftWant& w : wants) {
    absl::StatusOr<Draft> d = lookup_.Propose(w.tokens, w.k);
    if (!d.ok()) return d.status();
    drafts.push_back(*std::move(d));
  }
  return drafts;
}

}  // namespace kiln

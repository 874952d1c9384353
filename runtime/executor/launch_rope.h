// The rotary embedding a plan launch asks for (its rope_* constants), read
// the same way by every backend.
#pragma once

#include "absl/status/statusor.h"
#include "runtime/cpu/rope.h"
#include "runtime/executor/plan.h"

namespace kiln {

// rope_theta, rope_dims, rope_style ("interleaved" / "half") and the
// optional rope_scaling ("none" / "linear" with rope_factor). Errors name the
// launch: missing constants, an unknown style or scaling, dims not even and
// positive, theta or factor not positive.
absl::StatusOr<cpu::RopeParams> LaunchRope(const PlanLaunch& launch);

}  // namespace kiln

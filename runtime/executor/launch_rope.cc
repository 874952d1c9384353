#include "runtime/executor/launch_rope.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

absl::Status RopeError(const PlanLaunch& l, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("launch '", l.kernel, "': ", what));
}

}  // namespace

absl::StatusOr<cpu::RopeParams> LaunchRope(const PlanLaunch& l) {
  absl::StatusOr<double> theta = l.Float("rope_theta");
  absl::StatusOr<int64_t> dims = l.Int("rope_dims");
  absl::StatusOr<std::string> style = l.String("rope_style");
  if (!theta.ok()) return theta.status();
  if (!dims.ok()) return dims.status();
  if (!style.ok()) return style.status();
  if (*style != "interleaved" && *style != "half") return RopeError(l, "unknown rope style " + *style);
  cpu::RopeParams r;
  r.theta = *theta;
  r.dims = *dims;
  r.style = *style == "half" ? cpu::RopeStyle::kHalf : cpu::RopeStyle::kInterleaved;
  if (l.constants.Find("rope_scaling")) {
    absl::StatusOr<std::string> scaling = l.String("rope_scaling");
    if (!scaling.ok()) return scaling.status();
    if (*scaling != "none" && *scaling != "linear") return RopeError(l, "rope scaling '" + *scaling + "' is not implemented");
    if (*scaling == "linear") {
      absl::StatusOr<double> factor = l.Float("rope_factor");
      if (!factor.ok()) return factor.status();
      r.linear_factor = *factor;
    }
  }
  if (r.dims <= 0 || r.dims % 2 != 0 || !(r.theta > 0) || !(r.linear_factor > 0)) {
    return RopeError(l, "rope needs even positive dims and positive theta and factor");
  }
  return r;
}

}  // namespace kiln

// The GPU's two ceilings, measured on the device by `kiln bench --probe`:
// device-to-device copy bandwidth (bytes read + written) and the bf16 matrix
// rate of an 8192^3 product through cuBLAS, the library the peers' ceilings
// were measured with (loaded with dlopen only here; the runtime proper never
// needs it). Random data throughout: zeros run faster than real data.
#pragma once

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"

namespace kiln::cuda {

// On options.device; flops_per_second is 0 (and `what` says why) when no
// cuBLAS can be loaded.
absl::StatusOr<Ceilings> ProbeCudaCeilings(const BackendOptions& options);

}  // namespace kiln::cuda

// The GPU's two ceilings, measured on the device by `kiln bench --probe`:
// device-to-device copy bandwidth (bytes read + written) and the bf16 matrix
// rate of an 8192^3 product through cuBLAS, the library the peers' ceilings
// were measured with (loaded with dlopen only here; the runtime proper never
// needs it). Random data throughout: zeros run faster than real data.
#pragma once

#include "absl/status/statusor.h"

namespace kiln::cuda {

struct GpuCeilings {
  double bytes_per_second = 0;
  double flops_per_second = 0;  // 0 when no cuBLAS could be loaded
  std::string what;
};

absl::StatusOr<GpuCeilings> ProbeGpuCeilings(int device);

}  // namespace kiln::cuda

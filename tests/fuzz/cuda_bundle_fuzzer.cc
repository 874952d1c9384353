// Feeds arbitrary bytes to the CUDA kernels-section parser: it must refuse
// or accept without crashing, and whatever it accepts must serialize back to
// the same bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/cuda/cuda_bundle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  absl::StatusOr<kiln::cuda::CudaBundle> bundle = kiln::cuda::ParseBundle(bytes);
  if (!bundle.ok()) return 0;
  (void)kiln::cuda::DescribeBundle(*bundle);
  const std::vector<uint8_t> written = kiln::cuda::SerializeBundle(*bundle);
  if (written.size() != size || !std::equal(written.begin(), written.end(), data)) __builtin_trap();
  return 0;
}

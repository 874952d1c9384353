#include "runtime/vulkan/q4k_decode_copy.h"

#include <cmath>
#include <cstring>

#include "runtime/formats/quant.h"
#include "runtime/util/half.h"
#include "runtime/vulkan/vulkan_kernels.h"

namespace kiln::vulkan {
namespace {
constexpr int64_t kQ4KBlockBytes = 144, kQ4KCodeBytes = 128;
}  // namespace

int64_t Q4KDecodeCopyBytes(int64_t blocks_bytes) { return blocks_bytes / kQ4KBlockBytes * kQ4KCopyBlockBytes; }

bool MakeQ4KDecodeCopy(std::span<const uint8_t> blocks, std::span<uint8_t> copy) {
  const int64_t n = static_cast<int64_t>(blocks.size()) / kQ4KBlockBytes;
  bool fits = true;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* b = blocks.data() + i * kQ4KBlockBytes;
    uint8_t* out = copy.data() + i * kQ4KCopyBlockBytes;
    uint16_t d16, dmin16;
    std::memcpy(&d16, b, 2);
    std::memcpy(&dmin16, b + 2, 2);
    const float d = F16ToF32(d16), dmin = F16ToF32(dmin16);
    std::memcpy(out, b + 16, kQ4KCodeBytes);
    uint16_t products[16];  // pair p: A(2p), A(2p + 1), M(2p), M(2p + 1)
    for (int s = 0; s < 8; ++s) {
      int sc, mn;
      GetScaleMinK4(b + 4, s, &sc, &mn);
      const float a = d * static_cast<float>(sc), m = dmin * static_cast<float>(mn);  // exact in f32
      const uint16_t ha = F32ToF16(a), hm = F32ToF16(m);
      // Finite products that round to infinity (a header already infinite
      // or NaN stays so, as the in-place read sees it).
      if ((std::isfinite(a) && (ha & 0x7FFF) == 0x7C00) || (std::isfinite(m) && (hm & 0x7FFF) == 0x7C00)) fits = false;
      products[4 * (s / 2) + s % 2] = ha;
      products[4 * (s / 2) + 2 + s % 2] = hm;
    }
    std::memcpy(out + kQ4KCodeBytes, products, sizeof(products));
  }
  return fits;
}

}  // namespace kiln::vulkan

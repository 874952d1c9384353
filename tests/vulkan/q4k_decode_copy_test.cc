// q4_K's decode copy (runtime/vulkan/q4k_decode_copy.h) against the
// reference decoder: the same codes, and scale products within f16's
// rounding; products past f16's range refused.
#include "runtime/vulkan/q4k_decode_copy.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/formats/ggml_types.h"
#include "runtime/formats/quant.h"
#include "runtime/util/half.h"
#include "runtime/vulkan/vulkan_kernels.h"

namespace kiln::vulkan {
namespace {

constexpr int kBlockBytes = 144;

// Element x (0..255) of block i of the copy, as the decode kernel forms it:
// A q - M with A = d sc, M = dmin mn of its sub-block.
float CopyElement(const std::vector<uint8_t>& copy, int64_t i, int x) {
  const uint8_t* b = copy.data() + i * kQ4KCopyBlockBytes;
  const int s = x / 32;
  const int q = (b[(x / 64) * 32 + x % 32] >> (4 * (s % 2))) & 15;
  uint16_t a, m;
  std::memcpy(&a, b + 128 + 8 * (s / 2) + 2 * (s % 2), 2);
  std::memcpy(&m, b + 128 + 8 * (s / 2) + 4 + 2 * (s % 2), 2);
  return F16ToF32(a) * static_cast<float>(q) - F16ToF32(m);
}

TEST(Q4KDecodeCopy, CodesAndScaleProductsOfEveryBlock) {
  constexpr int64_t kBlocks = 64;
  std::mt19937 rng(7);
  std::vector<float> weights(kBlocks * 256);
  for (int64_t i = 0; i < kBlocks; ++i) {
    // Blocks of very different magnitudes, some all positive (a zero min).
    const float scale = std::ldexp(1.0f, static_cast<int>(i % 24) - 16);
    std::normal_distribution<float> normal(i % 5 == 0 ? 3.0f : 0.0f, 1.0f);
    for (int j = 0; j < 256; ++j) weights[i * 256 + j] = scale * normal(rng);
  }
  std::vector<uint8_t> blocks(kBlocks * kBlockBytes);
  ASSERT_TRUE(Quantize(GgmlType::kQ4_K, weights, blocks).ok());
  std::vector<float> reference(weights.size());
  ASSERT_TRUE(Dequantize(GgmlType::kQ4_K, blocks, reference).ok());

  ASSERT_EQ(Q4KDecodeCopyBytes(kBlocks * kBlockBytes), kBlocks * kQ4KCopyBlockBytes);
  std::vector<uint8_t> copy(kBlocks * kQ4KCopyBlockBytes, 0xAB);
  ASSERT_TRUE(MakeQ4KDecodeCopy(blocks, copy));
  for (int64_t i = 0; i < kBlocks; ++i) {
    EXPECT_EQ(std::memcmp(copy.data() + i * kQ4KCopyBlockBytes, blocks.data() + i * kBlockBytes + 16, 128), 0)
        << "block " << i;
    uint16_t d16, dmin16;
    std::memcpy(&d16, blocks.data() + i * kBlockBytes, 2);
    std::memcpy(&dmin16, blocks.data() + i * kBlockBytes + 2, 2);
    const float d = F16ToF32(d16), dmin = F16ToF32(dmin16);
    for (int x = 0; x < 256; ++x) {
      // A and M each within half an f16 ulp of d sc, dmin mn: 2^-11 of them,
      // or 2^-25 where they are subnormal halves.
      const float want = reference[i * 256 + x];
      const float bound = std::ldexp(1.0f, -11) * (15.0f * 63.0f * std::fabs(d) + 63.0f * std::fabs(dmin)) +
                          16.0f * std::ldexp(1.0f, -25);
      ASSERT_NEAR(CopyElement(copy, i, x), want, bound) << "block " << i << " element " << x;
    }
  }
}

TEST(Q4KDecodeCopy, RefusesProductsPastHalfRange) {
  std::vector<uint8_t> block(kBlockBytes, 0);
  const uint16_t d = F32ToF16(2048.0f);  // 2048 x 63 > 65504
  std::memcpy(block.data(), &d, 2);
  block[4] = 63;  // sub-block 0's scale
  std::vector<uint8_t> copy(kQ4KCopyBlockBytes);
  EXPECT_FALSE(MakeQ4KDecodeCopy(block, copy));
  block[4] = 31;  // 2048 x 31 = 63488 fits
  EXPECT_TRUE(MakeQ4KDecodeCopy(block, copy));
  uint16_t a;
  std::memcpy(&a, copy.data() + 128, 2);
  EXPECT_EQ(F16ToF32(a), 63488.0f);
  // A header already infinite stays so (as the in-place read sees it).
  const uint16_t inf = 0x7C00;
  std::memcpy(block.data(), &inf, 2);
  EXPECT_TRUE(MakeQ4KDecodeCopy(block, copy));
}

}  // namespace
}  // namespace kiln::vulkan

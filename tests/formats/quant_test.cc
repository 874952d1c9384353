// Tests of the reference quantisers in runtime/formats/quant.h:
//  1. hand-built blocks decode to exactly the floats ggml's layout defines,
//  2. quantise -> dequantise round trips stay within a per-type error bound,
//  3. (RealData*) blocks written by llama.cpp's llama-quantize decode to the
//     original weights, and our legacy quantisers reproduce its bytes,
//  4. bad sizes and unsupported types are rejected,
//  5. kiln's group-wise int4 / int2: hand-built groups, round trips, errors.

#include "runtime/formats/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/formats/ggml_types.h"
#include "runtime/formats/gguf.h"
#include "runtime/util/half.h"
#include "tests/test_support.h"

namespace kiln {
namespace {

// ---------------------------------------------------------------------------
// Helpers.

// Standard normal samples from a fixed seed (Box-Muller over mt19937, whose
// output is fixed by the standard, unlike std::normal_distribution's).
std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  auto uniform = [&rng] { return (static_cast<double>(rng()) + 0.5) / 4294967296.0; };
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double u1 = uniform(), u2 = uniform();
    out[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return out;
}

size_t RowBytes(GgmlType type, size_t n) { return static_cast<size_t>(*GgmlRowBytes(type, n)); }

std::vector<float> Decode(GgmlType type, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n, -12345.0f);
  const absl::Status st = Dequantize(type, bytes, out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

std::vector<uint8_t> Encode(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(RowBytes(type, x.size()), 0xAA);
  const absl::Status st = Quantize(type, x, out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

void PutF16(std::vector<uint8_t>& b, size_t at, float v) {
  const uint16_t h = F32ToF16(v);
  ASSERT_EQ(F16ToF32(h), v) << "test scale must be exact in f16";
  b[at] = static_cast<uint8_t>(h);
  b[at + 1] = static_cast<uint8_t>(h >> 8);
}

// Bytes that differ from one position to the next, so that a decoder reading
// the wrong byte or nibble gives a visibly different result.
uint8_t Pattern(int i) { return static_cast<uint8_t>((i * 73 + 41) ^ (i >> 3)); }

// ---------------------------------------------------------------------------
// 1. Hand-built blocks. The expected values are written the way ggml's
// dequantize_row_* loops walk the block (not with the element-index formulas
// that quant.cc uses), so the two descriptions check each other.

TEST(QuantBlockTest, Q8_0) {
  std::vector<uint8_t> b(34);
  PutF16(b, 0, 0.5f);
  for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 8 - 128));
  const std::vector<float> y = Decode(GgmlType::kQ8_0, b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.5f * static_cast<float>(i * 8 - 128)) << i;
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[31], 60.0f);
}

TEST(QuantBlockTest, Q4_0) {
  std::vector<uint8_t> b(18);
  PutF16(b, 0, 2.0f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = Decode(GgmlType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * static_cast<float>(j - 8)) << j;            // low nibbles first
    EXPECT_EQ(y[j + 16], 2.0f * static_cast<float>(7 - j)) << j + 16;  // then high nibbles
  }
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[16], 14.0f);
}

TEST(QuantBlockTest, Q4_1) {
  std::vector<uint8_t> b(20);
  PutF16(b, 0, 0.25f);
  PutF16(b, 2, -3.0f);
  for (int j = 0; j < 16; ++j) b[4 + j] = Pattern(j);
  const std::vector<float> y = Decode(GgmlType::kQ4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>(Pattern(j) & 15) - 3.0f) << j;
    EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(Pattern(j) >> 4) - 3.0f) << j;
  }
}

TEST(QuantBlockTest, Q5_0AndQ5_1) {
  // qh is a little-endian uint32: bit j is the fifth bit of element j.
  const uint32_t qh = 0x8421F0A5u;
  for (GgmlType type : {GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    const bool has_min = type == GgmlType::kQ5_1;
    const size_t qh_at = has_min ? 4 : 2;
    std::vector<uint8_t> b(has_min ? 24 : 22);
    PutF16(b, 0, 0.5f);
    if (has_min) PutF16(b, 2, 1.0f);
    for (int k = 0; k < 4; ++k) b[qh_at + k] = static_cast<uint8_t>(qh >> (8 * k));
    for (int j = 0; j < 16; ++j) b[qh_at + 4 + j] = Pattern(j);
    const std::vector<float> y = Decode(type, b, 32);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (Pattern(j) & 15) | static_cast<int>(((qh >> j) & 1) << 4);
      const int q1 = (Pattern(j) >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      if (has_min) {
        EXPECT_EQ(y[j], 0.5f * static_cast<float>(q0) + 1.0f) << j;
        EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(q1) + 1.0f) << j;
      } else {
        EXPECT_EQ(y[j], 0.5f * static_cast<float>(q0 - 16)) << j;
        EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(q1 - 16)) << j;
      }
    }
  }
}

TEST(QuantBlockTest, Q2_K) {
  // scales[16] | qs[64] | d | dmin.
  std::vector<uint8_t> b(84);
  for (int s = 0; s < 16; ++s) b[s] = Pattern(s + 100);
  for (int i = 0; i < 64; ++i) b[16 + i] = Pattern(i);
  PutF16(b, 80, 0.5f);
  PutF16(b, 82, 0.25f);
  const std::vector<float> y = Decode(GgmlType::kQ2_K, b, 256);
  // Two halves of 128; in each, four 2-bit planes (shift 0, 2, 4, 6) of the
  // half's 32 qs bytes; each plane is two sub-blocks of 16 with their own scale.
  int out = 0, is = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = &b[16 + 32 * half];
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++is) {
        const float dl = 0.5f * static_cast<float>(b[is] & 15);
        const float ml = 0.25f * static_cast<float>(b[is] >> 4);
        for (int l = 0; l < 16; ++l, ++out) {
          EXPECT_EQ(y[out], dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml) << out;
        }
      }
    }
  }
  ASSERT_EQ(out, 256);
}

TEST(QuantBlockTest, Q3_K) {
  // hmask[32] | qs[64] | scales[12] | d.
  std::vector<uint8_t> b(110);
  for (int i = 0; i < 32; ++i) b[i] = Pattern(i + 200);
  for (int i = 0; i < 64; ++i) b[32 + i] = Pattern(i);
  // Sixteen 6-bit scales (stored +32) chosen to use every bit position.
  const int scale[16] = {-32, -31, -17, -1, 0, 1, 15, 16, 31, 7, -8, 20, -20, 3, -3, 12};
  int raw[16];
  for (int s = 0; s < 16; ++s) raw[s] = scale[s] + 32;
  // Packing as ggml's scale table: bytes 0..7 hold the low nibbles of scales
  // 0..7 (low) and 8..15 (high); bytes 8..11 hold the top two bits, scale s in
  // byte 8 + s % 4 at bit 2 * (s / 4).
  for (int i = 0; i < 8; ++i)
    b[96 + i] = static_cast<uint8_t>((raw[i] & 15) | ((raw[i + 8] & 15) << 4));
  for (int k = 0; k < 4; ++k) {
    b[104 + k] = static_cast<uint8_t>((raw[k] >> 4) | ((raw[k + 4] >> 4) << 2) |
                                      ((raw[k + 8] >> 4) << 4) | ((raw[k + 12] >> 4) << 6));
  }
  PutF16(b, 108, 0.125f);
  const std::vector<float> y = Decode(GgmlType::kQ3_K, b, 256);
  int out = 0, is = 0;
  uint8_t m = 1;  // hmask bit, advancing every 32 outputs
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = &b[32 + 32 * half];
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int part = 0; part < 2; ++part, ++is) {
        const float dl = 0.125f * static_cast<float>(scale[is]);
        for (int l = 0; l < 16; ++l, ++out) {
          const int low = (q[16 * part + l] >> shift) & 3;
          const int v = low - ((b[16 * part + l] & m) ? 0 : 4);
          EXPECT_EQ(y[out], dl * static_cast<float>(v)) << out;
        }
      }
    }
  }
  ASSERT_EQ(out, 256);
}

// The 12-byte scale/min table of q4_K and q5_K, built literally. Scales and
// mins of sub-blocks 4..7 exceed 15 so that their top bits are exercised.
constexpr int kK4Scale[8] = {1, 2, 3, 4, 17, 33, 50, 63};
constexpr int kK4Min[8] = {0, 1, 2, 3, 20, 40, 60, 63};
// bytes 0..3: scale s (6 bits) | top 2 bits of scale s + 4 in bits 6..7
// bytes 4..7: min s (6 bits)   | top 2 bits of min s + 4 in bits 6..7
// bytes 8..11: low nibble of scale s + 4 | low nibble of min s + 4 << 4
constexpr uint8_t kK4Table[12] = {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81,
                                  0xC2, 0xC3, 0x41, 0x81, 0xC2, 0xFF};

TEST(QuantBlockTest, Q4_K) {
  // d | dmin | scales[12] | qs[128].
  std::vector<uint8_t> b(144);
  PutF16(b, 0, 1.0f);
  PutF16(b, 2, 0.5f);
  std::memcpy(&b[4], kK4Table, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = Pattern(i);
  const std::vector<float> y = Decode(GgmlType::kQ4_K, b, 256);
  // Four chunks of 64: the low nibbles of the chunk's 32 bytes (sub-block
  // 2c), then their high nibbles (sub-block 2c + 1).
  int out = 0;
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = &b[16 + 32 * c];
    for (int nib = 0; nib < 2; ++nib) {
      const int s = 2 * c + nib;
      for (int l = 0; l < 32; ++l, ++out) {
        const int v = nib == 0 ? (q[l] & 15) : (q[l] >> 4);
        EXPECT_EQ(y[out],
                  static_cast<float>(kK4Scale[s] * v) - 0.5f * static_cast<float>(kK4Min[s]))
            << out;
      }
    }
  }
  ASSERT_EQ(out, 256);
  // Spot values worked out by hand: element 0 is the low nibble of qs[0]
  // (Pattern(0) = 0x29 -> 9) in sub-block 0: 1 * 9 - 0.5 * 0 = 9. Element 255
  // is the high nibble of qs[127] (Pattern(127) = 0x6F -> 6) in sub-block 7:
  // 63 * 6 - 0.5 * 63 = 346.5.
  EXPECT_EQ(Pattern(0), 0x29);
  EXPECT_EQ(Pattern(127), 0x6F);
  EXPECT_EQ(y[0], 9.0f);
  EXPECT_EQ(y[255], 346.5f);
}

TEST(QuantBlockTest, Q5_K) {
  // d | dmin | scales[12] | qh[32] | qs[128].
  std::vector<uint8_t> b(176);
  PutF16(b, 0, 0.5f);
  PutF16(b, 2, 0.25f);
  std::memcpy(&b[4], kK4Table, 12);
  for (int i = 0; i < 32; ++i) b[16 + i] = Pattern(i + 300);
  for (int i = 0; i < 128; ++i) b[48 + i] = Pattern(i);
  const std::vector<float> y = Decode(GgmlType::kQ5_K, b, 256);
  // As q4_K; the fifth bit of output 32 * s + l is bit s of qh[l].
  int out = 0;
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = &b[48 + 32 * c];
    for (int nib = 0; nib < 2; ++nib) {
      const int s = 2 * c + nib;
      for (int l = 0; l < 32; ++l, ++out) {
        const int v = (nib == 0 ? (q[l] & 15) : (q[l] >> 4)) + (((b[16 + l] >> s) & 1) ? 16 : 0);
        EXPECT_EQ(y[out], 0.5f * static_cast<float>(kK4Scale[s]) * static_cast<float>(v) -
                              0.25f * static_cast<float>(kK4Min[s]))
            << out;
      }
    }
  }
  ASSERT_EQ(out, 256);
}

TEST(QuantBlockTest, Q6_K) {
  // ql[128] | qh[64] | int8 scales[16] | d.
  std::vector<uint8_t> b(210);
  for (int i = 0; i < 128; ++i) b[i] = Pattern(i);
  for (int i = 0; i < 64; ++i) b[128 + i] = Pattern(i + 500);
  int8_t scale[16];
  for (int s = 0; s < 16; ++s) {
    scale[s] = static_cast<int8_t>(s % 2 ? -(s * 8 + 1) : s * 8 + 1);  // -121..113, both signs
    b[192 + s] = static_cast<uint8_t>(scale[s]);
  }
  PutF16(b, 208, 0.25f);
  const std::vector<float> y = Decode(GgmlType::kQ6_K, b, 256);
  // Two halves of 128 (ql += 64, qh += 32, scales += 8 per half). Within a
  // half, output l + 32k takes: k = 0: low nibble of ql[l], qh[l] bits 0-1;
  // k = 1: low nibble of ql[l + 32], bits 2-3; k = 2: high nibble of ql[l],
  // bits 4-5; k = 3: high nibble of ql[l + 32], bits 6-7. Scale: 2k + l / 16.
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = &b[64 * half];
    const uint8_t* qh = &b[128 + 32 * half];
    const int8_t* sc = &scale[8 * half];
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      const float* yy = &y[128 * half];
      EXPECT_EQ(yy[l], 0.25f * static_cast<float>(sc[is + 0]) * static_cast<float>(q1)) << l;
      EXPECT_EQ(yy[l + 32], 0.25f * static_cast<float>(sc[is + 2]) * static_cast<float>(q2)) << l;
      EXPECT_EQ(yy[l + 64], 0.25f * static_cast<float>(sc[is + 4]) * static_cast<float>(q3)) << l;
      EXPECT_EQ(yy[l + 96], 0.25f * static_cast<float>(sc[is + 6]) * static_cast<float>(q4)) << l;
    }
  }
  // By hand: element 0 = low nibble of ql[0] (0x29 -> 9) | (qh[0] & 3) << 4
  // (Pattern(500) = 0x83 -> 3) = 57, minus 32 = 25; scale 1: 0.25 * 25.
  EXPECT_EQ(Pattern(500), 0x83);
  EXPECT_EQ(y[0], 6.25f);
}

TEST(QuantBlockTest, PlainTypes) {
  const std::vector<float> x = {1.0f,     -2.5f,   0.0f,
                                65504.0f, 3.0e-5f, std::numeric_limits<float>::infinity()};
  std::vector<uint8_t> f32(x.size() * 4);
  std::memcpy(f32.data(), x.data(), f32.size());
  EXPECT_EQ(Decode(GgmlType::kF32, f32, x.size()), x);
  EXPECT_EQ(Encode(GgmlType::kF32, x), f32);

  // f16 and bf16 are little-endian 16-bit values.
  const std::vector<uint8_t> f16 = {0x00, 0x3C, 0x00, 0xC1, 0x00, 0x80};  // 1, -2.5, -0
  const std::vector<float> y16 = Decode(GgmlType::kF16, f16, 3);
  EXPECT_EQ(y16[0], 1.0f);
  EXPECT_EQ(y16[1], -2.5f);
  EXPECT_TRUE(y16[2] == 0.0f && std::signbit(y16[2]));
  const std::vector<uint8_t> bf16 = {0x80, 0x3F, 0x20, 0xC0};  // 1, -2.5
  EXPECT_EQ(Decode(GgmlType::kBF16, bf16, 2), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(Encode(GgmlType::kBF16, {1.0f, -2.5f}), bf16);
  EXPECT_EQ(Encode(GgmlType::kF16, {1.0f, -2.5f}), (std::vector<uint8_t>{0x00, 0x3C, 0x00, 0xC1}));
}

// Pseudo-random blocks decoded by an independent implementation: the expected
// hashes were computed with the numpy dequantisers of llama.cpp's gguf-py
// (PyPI package gguf 0.19.0, gguf.quants.dequantize) from the same bytes
// (a 32-bit LCG, byte = state >> 24, seed 12345, and every f16 field masked
// with 0xBFFF so that it is finite and below 2 in magnitude). Hash: FNV-1a 64
// over the little-endian f32 bits of the output, with -0 counted as +0.
struct OracleCase {
  GgmlType type;
  std::vector<size_t> f16_fields;  // byte offsets within a block
  uint64_t hash;
  double sum;  // of the outputs, to tell a near miss from garbage on failure
};

TEST(QuantBlockTest, RandomBlocksMatchGgufPy) {
  const OracleCase cases[] = {
      {GgmlType::kQ4_0, {0}, 0xb1f058cc3b532537u, 188.9773889183998},
      {GgmlType::kQ4_1, {0, 2}, 0x0e4faa345d889455u, -816.6107049584389},
      {GgmlType::kQ5_0, {0}, 0x35d625a2d8310433u, -340.2564508318901},
      {GgmlType::kQ5_1, {0, 2}, 0x7970b4f18f37f2a1u, 339.3653197288513},
      {GgmlType::kQ8_0, {0}, 0xbed88688cb541c04u, -1496.6974292993546},
      {GgmlType::kQ2_K, {80, 82}, 0x5793fd837e6648a5u, 926.8353469371796},
      {GgmlType::kQ3_K, {108}, 0x8278fa1eda5d7059u, -3073.874850153923},
      {GgmlType::kQ4_K, {0, 2}, 0x9b906690de673a35u, -34928.39128446579},
      {GgmlType::kQ5_K, {0, 2}, 0xa322b698e691484au, -194005.80013799667},
      {GgmlType::kQ6_K, {208}, 0x002dd8cce403f8f1u, -1398.8424854278564},
  };
  for (const OracleCase& c : cases) {
    SCOPED_TRACE(std::string(GgmlTypeName(c.type)));
    const GgmlTypeInfo& info = GetGgmlTypeInfo(c.type);
    const size_t blocks = info.block_elems == 32 ? 128 : 8;
    const size_t bb = static_cast<size_t>(info.block_bytes);
    std::vector<uint8_t> bytes(blocks * bb);
    uint32_t state = 12345;
    for (uint8_t& v : bytes) {
      state = state * 1664525u + 1013904223u;
      v = static_cast<uint8_t>(state >> 24);
    }
    for (size_t b = 0; b < blocks; ++b) {
      for (size_t off : c.f16_fields) bytes[b * bb + off + 1] &= 0xBF;
    }
    const std::vector<float> y =
        Decode(c.type, bytes, blocks * static_cast<size_t>(info.block_elems));
    uint64_t hash = 0xcbf29ce484222325u;
    double sum = 0;
    for (float v : y) {
      if (v == 0.0f) v = 0.0f;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      for (int k = 0; k < 4; ++k) {
        hash ^= (bits >> (8 * k)) & 0xFF;
        hash *= 0x100000001b3u;
      }
      sum += v;
    }
    EXPECT_EQ(hash, c.hash);
    EXPECT_NEAR(sum, c.sum, std::fabs(c.sum) * 1e-6);
  }
}

// ---------------------------------------------------------------------------
// 2. Round trips on N(0, 1) data.
//
// Bounds on the relative L2 error ||x - deq(q(x))|| / ||x||, worst case over
// the sizes and seeds below. Each is the measured worst case (in the comment)
// with some margin, and each is well below what a block whose elements are
// decoded in the wrong order, with the wrong scale, or with the wrong offset
// would give (such errors are of order 100%; even swapping which sub-block a
// scale belongs to typically exceeds 20%).
constexpr double kBoundF32 = 0.0;      // exact
constexpr double kBoundF16 = 0.0003;   // measured 0.00023 (11-bit mantissa)
constexpr double kBoundBF16 = 0.0025;  // measured 0.0019 (8-bit mantissa)
constexpr double kBoundQ8_0 = 0.0065;  // measured 0.0055
constexpr double kBoundQ4_0 = 0.10;    // measured 0.089
constexpr double kBoundQ4_1 = 0.095;   // measured 0.080
constexpr double kBoundQ5_0 = 0.053;   // measured 0.046
constexpr double kBoundQ5_1 = 0.046;   // measured 0.040
constexpr double kBoundQ2_K = 0.33;    // measured 0.289
constexpr double kBoundQ3_K = 0.18;    // measured 0.155
constexpr double kBoundQ4_K = 0.085;   // measured 0.075
constexpr double kBoundQ5_K = 0.045;   // measured 0.039
constexpr double kBoundQ6_K = 0.021;   // measured 0.018

struct RoundTripCase {
  GgmlType type;
  double bound;
};

class QuantRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantRoundTripTest, GaussianWithinBound) {
  const RoundTripCase& c = GetParam();
  const int64_t block = GetGgmlTypeInfo(c.type).block_elems;
  double worst = 0;
  for (int64_t blocks : {1, 3, 16, 64}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const size_t n = static_cast<size_t>(block * blocks * (block == 1 ? 37 : 1));
      const std::vector<float> x = Gaussian(n, seed * 7919 + static_cast<uint32_t>(n));
      const std::vector<uint8_t> q = Encode(c.type, x);
      const std::vector<float> y = Decode(c.type, q, n);
      const double err = testing::RelativeL2(y, x);
      worst = std::max(worst, err);
      EXPECT_LE(err, c.bound) << GgmlTypeName(c.type) << " n=" << n << " seed=" << seed;
      // Scaling the data must scale the error alike (scales are relative).
      std::vector<float> x_small = x;
      for (float& v : x_small) v *= 1e-3f;
      EXPECT_LE(testing::RelativeL2(Decode(c.type, Encode(c.type, x_small), n), x_small), c.bound * 1.05 + 1e-6)
          << GgmlTypeName(c.type) << " n=" << n << " scaled by 1e-3";
    }
  }
  std::printf("[ measure  ] %-5s worst relative L2 %.5f (bound %.5f)\n",
              std::string(GgmlTypeName(c.type)).c_str(), worst, c.bound);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, QuantRoundTripTest,
    ::testing::Values(
        RoundTripCase{GgmlType::kF32, kBoundF32}, RoundTripCase{GgmlType::kF16, kBoundF16},
        RoundTripCase{GgmlType::kBF16, kBoundBF16}, RoundTripCase{GgmlType::kQ8_0, kBoundQ8_0},
        RoundTripCase{GgmlType::kQ4_0, kBoundQ4_0}, RoundTripCase{GgmlType::kQ4_1, kBoundQ4_1},
        RoundTripCase{GgmlType::kQ5_0, kBoundQ5_0}, RoundTripCase{GgmlType::kQ5_1, kBoundQ5_1},
        RoundTripCase{GgmlType::kQ2_K, kBoundQ2_K}, RoundTripCase{GgmlType::kQ3_K, kBoundQ3_K},
        RoundTripCase{GgmlType::kQ4_K, kBoundQ4_K}, RoundTripCase{GgmlType::kQ5_K, kBoundQ5_K},
        RoundTripCase{GgmlType::kQ6_K, kBoundQ6_K}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) {
      return std::string(GgmlTypeName(info.param.type));
    });

// Blocks that need care: all zeros, a constant, a single spike, all negative.
TEST(QuantRoundTripTest, SpecialBlocks) {
  const GgmlType types[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                            GgmlType::kQ5_1, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                            GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType type : types) {
    SCOPED_TRACE(std::string(GgmlTypeName(type)));
    const size_t n = 256;
    const std::vector<float> zeros(n, 0.0f);
    EXPECT_EQ(Decode(type, Encode(type, zeros), n), zeros);

    std::vector<float> spike(n, 0.0f);
    spike[77] = -3.0f;
    const std::vector<float> ys = Decode(type, Encode(type, spike), n);
    EXPECT_NEAR(ys[77], -3.0f, 0.1f);
    for (size_t i = 0; i < n; ++i) {
      if (i != 77) EXPECT_NEAR(ys[i], 0.0f, 0.1f) << i;
    }

    std::vector<float> negative = Gaussian(n, 99);
    for (float& v : negative) v = -std::fabs(v) - 1.0f;
    EXPECT_LT(testing::RelativeL2(Decode(type, Encode(type, negative), n), negative), 0.3);
  }
}

// ---------------------------------------------------------------------------
// 3. Real data: stories260K quantised by llama.cpp's llama-quantize (an oracle
// we did not write), compared with the F32 original of each tensor.
//
// Bounds on the relative L2 error against the F32 weights. Trained weights
// differ from N(0, 1), so these are set on their own: each is the worst tensor
// measured (in the comment) with some margin.
constexpr double kRealBoundF16 = 0.0003;  // measured 0.00021 (worst of 42 tensors)
constexpr double kRealBoundQ8_0 = 0.007;  // measured 0.0062 (worst of 33)
constexpr double kRealBoundQ5_0 = 0.052;  // measured 0.044 (token_embd, the only one)
constexpr double kRealBoundQ4_0 = 0.11;   // measured 0.096 (worst of 30)

double RealBound(GgmlType type) {
  switch (type) {
    case GgmlType::kF16:
      return kRealBoundF16;
    case GgmlType::kQ8_0:
      return kRealBoundQ8_0;
    case GgmlType::kQ5_0:
      return kRealBoundQ5_0;
    case GgmlType::kQ4_0:
      return kRealBoundQ4_0;
    default:
      return 0.0;
  }
}

std::vector<float> DecodeTensor(const GgufTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.nelements));
  const absl::Status st = Dequantize(t.type, t.bytes(), out);
  EXPECT_TRUE(st.ok()) << t.name << ": " << st;
  return out;
}

// Checks every non-F32 tensor of `rel` against stories260K.gguf; returns how
// many tensors of each type it compared.
std::map<GgmlType, int> CheckAgainstF32(const std::string& rel) {
  std::map<GgmlType, int> seen;
  const std::filesystem::path ref_path = ::kiln::testing::TestDataFile("models/stories260K.gguf");
  const std::filesystem::path q_path = ::kiln::testing::TestDataFile(rel);
  if (ref_path.empty() || q_path.empty()) return seen;
  absl::StatusOr<std::unique_ptr<GgufFile>> ref = GgufFile::Open(ref_path.string());
  absl::StatusOr<std::unique_ptr<GgufFile>> q = GgufFile::Open(q_path.string());
  EXPECT_TRUE(ref.ok()) << ref.status();
  EXPECT_TRUE(q.ok()) << q.status();
  if (!ref.ok() || !q.ok()) return seen;
  for (const GgufTensor& t : (*q)->tensors()) {
    if (t.type == GgmlType::kF32) continue;
    SCOPED_TRACE(rel + " " + t.name + " (" + std::string(GgmlTypeName(t.type)) + ")");
    const GgufTensor* orig = (*ref)->FindTensor(t.name);
    if (orig == nullptr || orig->type != GgmlType::kF32 || orig->dims != t.dims) {
      ADD_FAILURE() << "no F32 original of the same shape";
      continue;
    }
    const std::vector<float> x = DecodeTensor(*orig);
    const std::vector<float> y = DecodeTensor(t);
    const double err = testing::RelativeL2(y, x);
    EXPECT_LE(err, RealBound(t.type));
    std::printf("[ measure  ] %-28s %-5s relative L2 %.5f\n", t.name.c_str(),
                std::string(GgmlTypeName(t.type)).c_str(), err);

    // The legacy quantisers round as ggml's reference ones do, and
    // llama-quantize uses those for these types when it has no importance
    // matrix: re-quantising the original must give the file's bytes.
    const std::vector<uint8_t> ours = Encode(t.type, x);
    const std::span<const uint8_t> theirs = t.bytes();
    size_t differing = 0;
    for (size_t i = 0; i < ours.size() && i < theirs.size(); ++i) differing += ours[i] != theirs[i];
    EXPECT_EQ(ours.size(), theirs.size());
    EXPECT_EQ(differing, 0u) << "bytes differ from llama-quantize's";
    ++seen[t.type];
  }
  return seen;
}

TEST(QuantRealDataTest, F16) {
  KILN_REQUIRE_TESTDATA(ref, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(path, "models/stories260K-f16.gguf");
  const std::map<GgmlType, int> seen = CheckAgainstF32("models/stories260K-f16.gguf");
  EXPECT_EQ(seen.at(GgmlType::kF16), 37);  // every 2-D tensor
}

TEST(QuantRealDataTest, Q8_0Mix) {
  KILN_REQUIRE_TESTDATA(ref, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(path, "models/stories260K-q8_0-mix.gguf");
  const std::map<GgmlType, int> seen = CheckAgainstF32("models/stories260K-q8_0-mix.gguf");
  EXPECT_EQ(seen.at(GgmlType::kQ8_0), 2 + 5 * 6);  // token_embd, output, 6 per layer
  EXPECT_EQ(seen.at(GgmlType::kF16), 5);           // ffn_down
}

TEST(QuantRealDataTest, Q4_0Mix) {
  KILN_REQUIRE_TESTDATA(ref, "models/stories260K.gguf");
  KILN_REQUIRE_TESTDATA(path, "models/stories260K-q4_0-mix.gguf");
  const std::map<GgmlType, int> seen = CheckAgainstF32("models/stories260K-q4_0-mix.gguf");
  EXPECT_EQ(seen.at(GgmlType::kQ4_0), 5 * 6);  // attn_q/k/v/output, ffn_gate/up
  EXPECT_EQ(seen.at(GgmlType::kQ5_0), 1);      // token_embd
  EXPECT_EQ(seen.at(GgmlType::kQ8_0), 1);      // output
  EXPECT_EQ(seen.at(GgmlType::kF16), 5);       // ffn_down
}

// ---------------------------------------------------------------------------
// 4. Errors.

TEST(QuantErrorTest, RejectsBadSizes) {
  std::vector<float> f(64);
  std::vector<uint8_t> b(RowBytes(GgmlType::kQ4_0, 64));

  // Partial block.
  absl::Status st = Dequantize(GgmlType::kQ4_0, std::span<const uint8_t>(b).first(18),
                               std::span<float>(f).first(33));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q4_0"), std::string_view::npos) << st;
  st = Quantize(GgmlType::kQ4_K, std::span<const float>(f).first(32), b);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q4_K"), std::string_view::npos) << st;

  // Byte count off by one either way.
  EXPECT_EQ(Dequantize(GgmlType::kQ4_0, std::span<const uint8_t>(b).first(35), f).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> big(b.size() + 1);
  EXPECT_EQ(Dequantize(GgmlType::kQ4_0, big, f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quantize(GgmlType::kQ4_0, f, big).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quantize(GgmlType::kF16, f, b).code(), absl::StatusCode::kInvalidArgument);

  // Nothing is written when the sizes are wrong.
  std::vector<float> untouched(32, 7.0f);
  std::vector<uint8_t> q8(RowBytes(GgmlType::kQ8_0, 64), 1);
  EXPECT_FALSE(Dequantize(GgmlType::kQ8_0, q8, untouched).ok());
  EXPECT_EQ(untouched, std::vector<float>(32, 7.0f));

  // Empty input is zero whole blocks: fine.
  EXPECT_TRUE(Dequantize(GgmlType::kQ6_K, {}, {}).ok());
  EXPECT_TRUE(Quantize(GgmlType::kQ2_K, {}, {}).ok());
}

TEST(QuantErrorTest, RejectsUnsupportedTypes) {
  std::vector<float> f(256);
  for (GgmlType type :
       {GgmlType::kIQ2_XXS, GgmlType::kQ8_K, GgmlType::kQ8_1, GgmlType::kI32, GgmlType::kTQ1_0}) {
    std::vector<uint8_t> b(RowBytes(type, 256));
    const absl::Status d = Dequantize(type, b, f);
    EXPECT_EQ(d.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(d.message().find(std::string(GgmlTypeName(type))), std::string_view::npos) << d;
    const absl::Status q = Quantize(type, f, b);
    EXPECT_EQ(q.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(q.message().find(std::string(GgmlTypeName(type))), std::string_view::npos) << q;
  }
  // An id that is no ggml type at all.
  const absl::Status st = Dequantize(static_cast<GgmlType>(999), {}, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("999"), std::string_view::npos) << st;
}

TEST(QuantErrorTest, RejectsNonFiniteInputForBlockFormats) {
  std::vector<float> f(32, 1.0f);
  f[5] = std::nanf("");
  std::vector<uint8_t> b(RowBytes(GgmlType::kQ8_0, 32));
  const absl::Status st = Quantize(GgmlType::kQ8_0, f, b);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("element 5"), std::string_view::npos) << st;
  // Plain float types carry inf and nan through.
  std::vector<uint8_t> h(64);
  EXPECT_TRUE(Quantize(GgmlType::kF16, f, h).ok());
}

// ---------------------------------------------------------------------------
// 5. kiln's group-wise int4 / int2.

std::vector<float> DecodeGrouped(GroupedKind kind, int64_t group, const std::vector<uint8_t>& bytes,
                                 size_t n) {
  std::vector<float> out(n, -12345.0f);
  const absl::Status st = DequantizeGrouped(kind, group, bytes, out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

std::vector<uint8_t> EncodeGrouped(GroupedKind kind, int64_t group, const std::vector<float>& x) {
  std::vector<uint8_t> out(static_cast<size_t>(*GroupedRowBytes(kind, group, x.size())), 0xAA);
  const absl::Status st = QuantizeGrouped(kind, group, x, out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(GroupedBlockTest, RowBytes) {
  EXPECT_EQ(GroupedRowBytes(GroupedKind::kInt4, 32, 64), 2u * (16 + 4));
  EXPECT_EQ(GroupedRowBytes(GroupedKind::kInt2, 32, 64), 2u * (8 + 4));
  EXPECT_EQ(GroupedRowBytes(GroupedKind::kInt4, 8, 8), 8u);
  EXPECT_EQ(GroupedRowBytes(GroupedKind::kInt2, 128, 384), 3u * (32 + 4));
  EXPECT_EQ(GroupedRowBytes(GroupedKind::kInt4, 32, 0), 0u);
  EXPECT_FALSE(GroupedRowBytes(GroupedKind::kInt4, 32, 48));  // partial group
  EXPECT_FALSE(GroupedRowBytes(GroupedKind::kInt4, 12, 24));  // not a multiple of 8
  EXPECT_FALSE(GroupedRowBytes(GroupedKind::kInt2, 0, 0));
  EXPECT_FALSE(GroupedRowBytes(GroupedKind::kInt2, -8, 8));
  EXPECT_EQ(GroupedKindName(GroupedKind::kInt4), "int4");
  EXPECT_EQ(GroupedKindName(GroupedKind::kInt2), "int2");
}

// Two groups of 16, decoded by the layout's words: element j of a group is
// nibble j % 2 (low first) of codes byte j / 2 (int4), or bits 2 * (j % 4) of
// codes byte j / 4 (int2); each group has its own d and m.
TEST(GroupedBlockTest, Int4HandBuilt) {
  const int group = 16;
  std::vector<uint8_t> b(2 * (group / 2 + 4));
  const float d[2] = {0.5f, -0.25f}, m[2] = {-3.0f, 1.5f};
  for (int g = 0; g < 2; ++g) {
    const size_t at = static_cast<size_t>(g) * (group / 2 + 4);
    PutF16(b, at, d[g]);
    PutF16(b, at + 2, m[g]);
    for (int i = 0; i < group / 2; ++i) b[at + 4 + i] = Pattern(i + 8 * g);
  }
  const std::vector<float> y = DecodeGrouped(GroupedKind::kInt4, group, b, 2 * group);
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < group / 2; ++i) {
      const uint8_t byte = Pattern(i + 8 * g);
      EXPECT_EQ(y[group * g + 2 * i], d[g] * static_cast<float>(byte & 15) + m[g]) << g << " " << i;
      EXPECT_EQ(y[group * g + 2 * i + 1], d[g] * static_cast<float>(byte >> 4) + m[g])
          << g << " " << i;
    }
  }
  // By hand: Pattern(0) = 0x29, so element 0 is 0.5 * 9 - 3 and element 1 is 0.5 * 2 - 3.
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -2.0f);
}

TEST(GroupedBlockTest, Int2HandBuilt) {
  const int group = 16;
  std::vector<uint8_t> b(2 * (group / 4 + 4));
  const float d[2] = {2.0f, 0.125f}, m[2] = {-1.0f, 0.0f};
  for (int g = 0; g < 2; ++g) {
    const size_t at = static_cast<size_t>(g) * (group / 4 + 4);
    PutF16(b, at, d[g]);
    PutF16(b, at + 2, m[g]);
    for (int i = 0; i < group / 4; ++i) b[at + 4 + i] = Pattern(i + 4 * g);
  }
  const std::vector<float> y = DecodeGrouped(GroupedKind::kInt2, group, b, 2 * group);
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < group / 4; ++i) {
      const uint8_t byte = Pattern(i + 4 * g);
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(y[group * g + 4 * i + k], d[g] * static_cast<float>((byte >> (2 * k)) & 3) + m[g])
            << g << " " << i << " " << k;
      }
    }
  }
  // By hand: Pattern(0) = 0x29 = 0b00'10'10'01: codes 1, 2, 2, 0.
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 3.0f);
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(y[3], -1.0f);
}

// Bounds on the relative L2 round-trip error on N(0, 1) data, worst case over
// the sizes and seeds below, per group size (measured value in the comment,
// with some margin). Both formats spend 4 bytes per group on d and m, so
// smaller groups buy accuracy with size.
struct GroupedRoundTripCase {
  GroupedKind kind;
  int64_t group;
  double bound;
};

class GroupedRoundTripTest : public ::testing::TestWithParam<GroupedRoundTripCase> {};

TEST_P(GroupedRoundTripTest, GaussianWithinBound) {
  const GroupedRoundTripCase& c = GetParam();
  double worst = 0;
  for (int64_t groups : {1, 3, 16, 64}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const size_t n = static_cast<size_t>(c.group * groups);
      const std::vector<float> x = Gaussian(n, seed * 104729 + static_cast<uint32_t>(n));
      const double err =
          testing::RelativeL2(DecodeGrouped(c.kind, c.group, EncodeGrouped(c.kind, c.group, x), n), x);
      worst = std::max(worst, err);
      EXPECT_LE(err, c.bound) << "n=" << n << " seed=" << seed;
      // Shifting the data is absorbed by m; scaling it, by d.
      std::vector<float> shifted = x;
      for (float& v : shifted) v = v * 1e-3f + 4e-3f;
      std::vector<float> centred = shifted;
      for (float& v : centred) v -= 4e-3f;
      const std::vector<float> ys =
          DecodeGrouped(c.kind, c.group, EncodeGrouped(c.kind, c.group, shifted), n);
      std::vector<float> yc = ys;
      for (float& v : yc) v -= 4e-3f;
      EXPECT_LE(testing::RelativeL2(yc, centred), c.bound * 1.1) << "n=" << n << " shifted and scaled";
    }
  }
  std::printf("[ measure  ] %s g%-4d worst relative L2 %.5f (bound %.5f)\n",
              std::string(GroupedKindName(c.kind)).c_str(), static_cast<int>(c.group), worst,
              c.bound);
}

INSTANTIATE_TEST_SUITE_P(
    AllGroups, GroupedRoundTripTest,
    ::testing::Values(GroupedRoundTripCase{GroupedKind::kInt4, 8, 0.070},    // measured 0.060
                      GroupedRoundTripCase{GroupedKind::kInt4, 32, 0.090},   // measured 0.077
                      GroupedRoundTripCase{GroupedKind::kInt4, 64, 0.110},   // measured 0.095
                      GroupedRoundTripCase{GroupedKind::kInt4, 128, 0.135},  // measured 0.118
                      GroupedRoundTripCase{GroupedKind::kInt2, 8, 0.34},     // measured 0.296
                      GroupedRoundTripCase{GroupedKind::kInt2, 32, 0.38},    // measured 0.329
                      GroupedRoundTripCase{GroupedKind::kInt2, 64, 0.44},    // measured 0.381
                      GroupedRoundTripCase{GroupedKind::kInt2, 128, 0.46}),  // measured 0.401
    [](const ::testing::TestParamInfo<GroupedRoundTripCase>& info) {
      return std::string(GroupedKindName(info.param.kind)) + "_g" +
             std::to_string(info.param.group);
    });

TEST(GroupedRoundTripTest, SpecialGroups) {
  for (GroupedKind kind : {GroupedKind::kInt4, GroupedKind::kInt2}) {
    SCOPED_TRACE(std::string(GroupedKindName(kind)));
    const size_t n = 64;
    const std::vector<float> zeros(n, 0.0f);
    EXPECT_EQ(DecodeGrouped(kind, 32, EncodeGrouped(kind, 32, zeros), n), zeros);
    // A constant group is exact whenever the constant is an f16.
    const std::vector<float> constant(n, -2.75f);
    EXPECT_EQ(DecodeGrouped(kind, 32, EncodeGrouped(kind, 32, constant), n), constant);
    // Two levels are always exact up to f16 rounding of d and m.
    std::vector<float> two(n);
    for (size_t i = 0; i < n; ++i) two[i] = i % 3 ? 5.0f : 2.0f;
    const std::vector<float> y2 = DecodeGrouped(kind, 32, EncodeGrouped(kind, 32, two), n);
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(y2[i], two[i], 5e-3) << i;
    // All positive (m well above 0, which the k-quants' min cannot express).
    std::vector<float> positive = Gaussian(n, 5);
    for (float& v : positive) v = 10.0f + 0.1f * v;
    EXPECT_LT(testing::RelativeL2(DecodeGrouped(kind, 32, EncodeGrouped(kind, 32, positive), n), positive), 0.01);
  }
}

TEST(GroupedErrorTest, RejectsBadGroupsAndSizes) {
  std::vector<float> f(64);
  std::vector<uint8_t> b(static_cast<size_t>(*GroupedRowBytes(GroupedKind::kInt4, 32, 64)));
  for (int64_t group : {0, -32, 12, 4}) {
    const absl::Status st = DequantizeGrouped(GroupedKind::kInt4, group, b, f);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << group;
    EXPECT_NE(st.message().find("multiple of 8"), std::string_view::npos) << st;
    EXPECT_EQ(QuantizeGrouped(GroupedKind::kInt2, group, f, b).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Partial group.
  absl::Status st = DequantizeGrouped(GroupedKind::kInt4, 32, std::span<const uint8_t>(b).first(20),
                                      std::span<float>(f).first(48));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("int4"), std::string_view::npos) << st;
  // Byte count off by one either way; nothing written.
  std::vector<float> untouched(64, 7.0f);
  EXPECT_EQ(
      DequantizeGrouped(GroupedKind::kInt4, 32, std::span<const uint8_t>(b).first(39), untouched)
          .code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> big(b.size() + 1);
  EXPECT_EQ(DequantizeGrouped(GroupedKind::kInt4, 32, big, untouched).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(untouched, std::vector<float>(64, 7.0f));
  st = QuantizeGrouped(GroupedKind::kInt2, 32, f, b);  // int2 rows are smaller than int4's
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("int2"), std::string_view::npos) << st;
  // Non-finite input.
  f[9] = std::numeric_limits<float>::infinity();
  st = QuantizeGrouped(GroupedKind::kInt4, 32, f, b);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("element 9"), std::string_view::npos) << st;
  // Empty is zero whole groups.
  EXPECT_TRUE(DequantizeGrouped(GroupedKind::kInt2, 64, {}, {}).ok());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(StorageName, GgmlTypesAndGroupedFormats) {
  const std::optional<StorageName> q4k = ParseStorageName("Q4_K");
  ASSERT_TRUE(q4k.has_value());
  EXPECT_FALSE(q4k->grouped.has_value());
  EXPECT_EQ(q4k->ggml, GgmlType::kQ4_K);
  const std::optional<StorageName> int4 = ParseStorageName("INT4:g128");
  ASSERT_TRUE(int4.has_value());
  EXPECT_EQ(int4->grouped, GroupedKind::kInt4);
  EXPECT_EQ(int4->group, 128);
  const std::optional<StorageName> int2 = ParseStorageName("int2:g8");
  ASSERT_TRUE(int2.has_value());
  EXPECT_EQ(int2->grouped, GroupedKind::kInt2);
  EXPECT_EQ(int2->group, 8);
  for (const char* bad : {"", "q9_9", "int4", "int4:g", "int4:g12", "int4:g0", "int4:g-8", "int4:g 8", "int4:g+8",
                          "int4:g1234567890", "int3:g32", "int4:128"}) {
    EXPECT_FALSE(ParseStorageName(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace kiln

// Tests of the CPU backend's row and elementwise kernels against
// double-precision references: rms_norm, rope (both pair styles, partial
// rotation, linear scaling), silu / mul / add / silu_mul / bias_add,
// embedding lookup for every storage, gather_rows, argmax.

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/elementwise.h"
#include "runtime/cpu/norm.h"
#include "runtime/cpu/rope.h"
#include "runtime/cpu/rows.h"
#include "runtime/executor/launch_rope.h"
#include "runtime/formats/quant.h"
#include "tests/cpu/cpu_test_util.h"

namespace kiln::cpu {
namespace {

using ::kiln::cpu::testing::Gaussian;
using ::kiln::cpu::testing::RelL2;
using ::kiln::cpu::testing::SameBits;

// f32 kernels against double references: a few units in the last place of
// f32 (2^-24 = 6e-8) per element.
constexpr double kF32Bound = 1e-6;

// ---------------------------------------------------------------------------
// rms_norm

TEST(RmsNormTest, MatchesReference) {
  for (int64_t width : {1, 7, 64, 576, 2048}) {
    for (int64_t tokens : {1, 5}) {
      SCOPED_TRACE(::testing::Message() << "width " << width << " tokens " << tokens);
      std::vector<float> x = Gaussian(static_cast<size_t>(tokens * width), 11, 3.0f);
      x[0] = 40.0f;  // an outlier row element
      const std::vector<float> gamma = Gaussian(static_cast<size_t>(width), 12);
      const double eps = 1e-5;
      std::vector<double> want(x.size());
      for (int64_t t = 0; t < tokens; ++t) {
        double ss = 0;
        for (int64_t i = 0; i < width; ++i)
          ss += static_cast<double>(x[t * width + i]) * x[t * width + i];
        const double r = 1.0 / std::sqrt(ss / width + eps);
        for (int64_t i = 0; i < width; ++i) want[t * width + i] = x[t * width + i] * r * gamma[i];
      }
      std::vector<float> y(x.size());
      RmsNorm(x.data(), tokens, width, gamma.data(), eps, y.data());
      EXPECT_LE(RelL2(want, y), kF32Bound);
      // In place gives the same bits.
      std::vector<float> z = x;
      RmsNorm(z.data(), tokens, width, gamma.data(), eps, z.data());
      EXPECT_TRUE(SameBits(y, z));
    }
  }
}

TEST(RmsNormTest, EpsKeepsZeroRowsFinite) {
  const std::vector<float> x(16, 0.0f), gamma(16, 1.0f);
  std::vector<float> y(16, 1.0f);
  RmsNorm(x.data(), 1, 16, gamma.data(), 1e-6, y.data());
  EXPECT_EQ(y, x);
}

// ---------------------------------------------------------------------------
// rope. The reference multiplies each pair, as a complex number, by
// exp(i * angle) with theta_i = pos / factor * base^(-2i / dims), and picks
// the pairs by the style's definition: llama.cpp's normal mode pairs
// (2i, 2i + 1), NeoX pairs (i, i + dims / 2).

std::vector<double> ReferenceRope(const std::vector<float>& x, int64_t tokens, int64_t heads,
                                  int64_t head_dim, const std::vector<int32_t>& pos,
                                  const RopeParams& p) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      double* v = y.data() + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < p.dims / 2; ++i) {
        const int64_t a = p.style == RopeStyle::kInterleaved ? 2 * i : i;
        const int64_t b = p.style == RopeStyle::kInterleaved ? 2 * i + 1 : i + p.dims / 2;
        const double angle = pos[t] / p.linear_factor * std::pow(p.theta, -2.0 * i / p.dims);
        const std::complex<double> z = std::complex<double>(v[a], v[b]) * std::polar(1.0, angle);
        v[a] = z.real();
        v[b] = z.imag();
      }
    }
  }
  return y;
}

TEST(RopeTest, MatchesReferenceForBothStylesAndPartialDims) {
  struct Case {
    RopeStyle style;
    int64_t heads, head_dim, dims;
    double theta, factor;
  };
  const Case cases[] = {
      {RopeStyle::kInterleaved, 4, 64, 64, 10000.0, 1.0},  // llama
      {RopeStyle::kHalf, 3, 64, 64, 1000000.0, 1.0},       // qwen2
      {RopeStyle::kInterleaved, 2, 96, 32, 10000.0, 1.0},  // partial rotation
      {RopeStyle::kHalf, 5, 80, 48, 500000.0, 1.0},        // partial, NeoX
      {RopeStyle::kInterleaved, 2, 64, 64, 10000.0, 4.0},  // linear scaling
      {RopeStyle::kHalf, 2, 128, 128, 10000.0, 2.5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << (c.style == RopeStyle::kHalf ? "half" : "interleaved") << " dims " << c.dims
                 << "/" << c.head_dim << " factor " << c.factor);
    const RopeParams p{c.theta, c.dims, c.style, c.factor};
    const std::vector<int32_t> pos = {0, 1, 17, 255, 4095, 32767};
    const auto tokens = static_cast<int64_t>(pos.size());
    const std::vector<float> x = Gaussian(static_cast<size_t>(tokens * c.heads * c.head_dim), 21);
    std::vector<float> y = x;
    ASSERT_TRUE(Rope(y.data(), tokens, c.heads, c.head_dim, pos.data(), p).ok());
    EXPECT_LE(RelL2(ReferenceRope(x, tokens, c.heads, c.head_dim, pos, p), y), kF32Bound);
    // Elements past dims are untouched; position 0 is the identity.
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t base = (t * c.heads + h) * c.head_dim;
        for (int64_t i = 0; i < c.head_dim; ++i) {
          if (i >= c.dims || pos[t] == 0)
            EXPECT_EQ(y[base + i], x[base + i]) << t << " " << h << " " << i;
        }
      }
    }
  }
}

// The table the GPU backends read is exactly what Rope rotates by: rotating
// (1, 0) of each pair gives (cos, sin) bit for bit.
TEST(RopeTest, TableHoldsTheCosinesAndSinesRopeUses) {
  const RopeParams p{500000.0, 8, RopeStyle::kInterleaved, 2.0};
  const int64_t positions = 300;
  const std::vector<float> table = RopeTable(p, positions);
  ASSERT_EQ(table.size(), static_cast<size_t>(positions * 4 * 2));
  for (int32_t pos : {0, 1, 7, 299}) {
    std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0};
    ASSERT_TRUE(Rope(x.data(), 1, 1, 8, &pos, p).ok());
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(x[2 * i], table[(pos * 4 + i) * 2]) << pos << " " << i;
      EXPECT_EQ(x[2 * i + 1], table[(pos * 4 + i) * 2 + 1]) << pos << " " << i;
    }
  }
}

// Every backend reads a launch's rope constants through LaunchRope.
TEST(RopeTest, LaunchConstantsAreReadAndBadOnesNameTheLaunch) {
  auto launch = [](const std::string& constants) {
    PlanLaunch l;
    l.kernel = "paged_attention.rope.3";
    l.op = "paged_attention";
    l.constants = *ParseJson(constants);
    return l;
  };
  absl::StatusOr<RopeParams> ok = LaunchRope(launch(
      R"({"rope_theta": 500000, "rope_dims": 64, "rope_style": "half", "rope_scaling": "linear", "rope_factor": 4})"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->theta, 500000.0);
  EXPECT_EQ(ok->dims, 64);
  EXPECT_EQ(ok->style, RopeStyle::kHalf);
  EXPECT_EQ(ok->linear_factor, 4.0);
  for (const std::string bad : {
           R"({"rope_dims": 64, "rope_style": "half"})",
           R"({"rope_theta": 10000, "rope_dims": 64, "rope_style": "neox"})",
           R"({"rope_theta": 10000, "rope_dims": 63, "rope_style": "half"})",
           R"({"rope_theta": 0, "rope_dims": 64, "rope_style": "half"})",
           R"({"rope_theta": 10000, "rope_dims": 64, "rope_style": "half", "rope_scaling": "yarn"})",
           R"({"rope_theta": 10000, "rope_dims": 64, "rope_style": "half", "rope_scaling": "linear", "rope_factor": -1})",
       }) {
    absl::StatusOr<RopeParams> r = LaunchRope(launch(bad));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("paged_attention.rope.3"), std::string::npos) << r.status();
  }
}

TEST(RopeTest, InterleavedRotatesAdjacentPairsByThePositionAngle) {
  // One head of 4 dims, position 1, theta 100: pair 0 turns by 1 radian,
  // pair 1 by 100^(-1/2) = 0.1 radian.
  std::vector<float> x = {1, 0, 0, 1};
  const int32_t pos = 1;
  ASSERT_TRUE(Rope(x.data(), 1, 1, 4, &pos, {100.0, 4, RopeStyle::kInterleaved, 1.0}).ok());
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-7);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-7);
  EXPECT_NEAR(x[2], -std::sin(0.1), 1e-7);
  EXPECT_NEAR(x[3], std::cos(0.1), 1e-7);
  // Half style: pairs (0, 2) and (1, 3).
  std::vector<float> z = {1, 0, 0, 1};
  ASSERT_TRUE(Rope(z.data(), 1, 1, 4, &pos, {100.0, 4, RopeStyle::kHalf, 1.0}).ok());
  EXPECT_NEAR(z[0], std::cos(1.0), 1e-7);
  EXPECT_NEAR(z[2], std::sin(1.0), 1e-7);
  EXPECT_NEAR(z[1], -std::sin(0.1), 1e-7);
  EXPECT_NEAR(z[3], std::cos(0.1), 1e-7);
}

TEST(RopeTest, LinearScalingDividesThePosition) {
  const std::vector<float> x = Gaussian(2 * 64, 5);
  std::vector<float> scaled = x, plain = x;
  const int32_t pos6 = 6, pos3 = 3;
  ASSERT_TRUE(Rope(scaled.data(), 1, 2, 64, &pos6, {10000.0, 64, RopeStyle::kHalf, 2.0}).ok());
  ASSERT_TRUE(Rope(plain.data(), 1, 2, 64, &pos3, {10000.0, 64, RopeStyle::kHalf, 1.0}).ok());
  EXPECT_TRUE(SameBits(scaled, plain));
}

TEST(RopeTest, RejectsBadParams) {
  std::vector<float> x(64);
  const int32_t pos = 0;
  for (int64_t dims : {0, -2, 7, 66}) {
    const absl::Status st = Rope(x.data(), 1, 1, 64, &pos, {10000.0, dims, RopeStyle::kHalf, 1.0});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << dims;
  }
  EXPECT_FALSE(Rope(x.data(), 1, 1, 64, &pos, {0.0, 64, RopeStyle::kHalf, 1.0}).ok());
  EXPECT_FALSE(Rope(x.data(), 1, 1, 64, &pos, {10000.0, 64, RopeStyle::kHalf, 0.0}).ok());
}

// ---------------------------------------------------------------------------
// Elementwise.

double SiluRef(double x) { return x / (1.0 + std::exp(-x)); }

TEST(ElementwiseTest, MatchReferences) {
  const int64_t n = 1001;
  const std::vector<float> a = Gaussian(n, 31, 4.0f), b = Gaussian(n, 32, 2.0f);
  std::vector<double> silu(n), mul(n), add(n), silu_mul(n);
  for (int64_t i = 0; i < n; ++i) {
    silu[i] = SiluRef(a[i]);
    mul[i] = static_cast<double>(a[i]) * b[i];
    add[i] = static_cast<double>(a[i]) + b[i];
    silu_mul[i] = SiluRef(a[i]) * b[i];
  }
  std::vector<float> y(n);
  Silu(a.data(), n, y.data());
  EXPECT_LE(RelL2(silu, y), kF32Bound);
  Mul(a.data(), b.data(), n, y.data());
  EXPECT_LE(RelL2(mul, y), kF32Bound);
  Add(a.data(), b.data(), n, y.data());
  EXPECT_LE(RelL2(add, y), kF32Bound);
  SiluMul(a.data(), b.data(), n, y.data());
  EXPECT_LE(RelL2(silu_mul, y), kF32Bound);
  // In place (output aliasing the first input).
  std::vector<float> z = a;
  SiluMul(z.data(), b.data(), n, z.data());
  EXPECT_TRUE(SameBits(y, z));
}

TEST(ElementwiseTest, SiluAtTheExtremes) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-200.0f, -88.0f, 0.0f, 88.0f, 200.0f, inf, -inf};
  std::vector<float> y(x.size());
  Silu(x.data(), static_cast<int64_t>(x.size()), y.data());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], SiluRef(-88.0), 1e-30);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 88.0f);
  EXPECT_EQ(y[4], 200.0f);
  EXPECT_EQ(y[5], inf);
  // -inf / (1 + inf): NaN, as ggml's and torch's silu give (the limit would
  // be 0, but a -inf activation means the model already diverged).
  EXPECT_TRUE(std::isnan(y[6]));
  for (size_t i = 0; i + 1 < y.size(); ++i) EXPECT_FALSE(std::isnan(y[i])) << i;
}

TEST(ElementwiseTest, BiasAddEveryRow) {
  const int64_t tokens = 5, width = 17;
  const std::vector<float> x = Gaussian(tokens * width, 41), bias = Gaussian(width, 42);
  std::vector<float> y(x.size());
  BiasAdd(x.data(), tokens, width, bias.data(), y.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < width; ++i) EXPECT_EQ(y[t * width + i], x[t * width + i] + bias[i]);
  }
}

// ---------------------------------------------------------------------------
// Rows.

TEST(EmbeddingTest, EveryStorageGivesTheReferenceRow) {
  for (const char* name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K",
                           "q3_K", "q4_K", "q5_K", "q6_K", "int4:g32", "int2:g64"}) {
    SCOPED_TRACE(name);
    const WeightStorage s = *ParseWeightStorage(name);
    const int64_t rows = 11, cols = 512;
    const size_t row_bytes = static_cast<size_t>(*s.RowBytes(cols));
    std::vector<uint8_t> table(row_bytes * rows);
    const std::vector<float> x = Gaussian(rows * cols, 51);
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<const float> src(x.data() + r * cols, cols);
      const std::span<uint8_t> dst(table.data() + r * row_bytes, row_bytes);
      ASSERT_TRUE(
          (s.grouped ? QuantizeGrouped(*s.grouped, s.group, src, dst) : Quantize(s.ggml, src, dst))
              .ok());
    }
    std::vector<float> all(rows * cols);
    ASSERT_TRUE(DequantizeRow(s, table, all).ok());
    const std::vector<int32_t> tokens = {3, 0, 10, 3};
    std::vector<float> out(tokens.size() * cols);
    ASSERT_TRUE(EmbeddingLookup({s, table.data(), rows, cols}, tokens.data(), 4, out.data()).ok());
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_TRUE(SameBits(
          std::vector<float>(out.begin() + i * cols, out.begin() + (i + 1) * cols),
          std::vector<float>(all.begin() + tokens[i] * cols, all.begin() + (tokens[i] + 1) * cols)))
          << "entry " << i;
    }
  }
}

TEST(EmbeddingTest, RejectsTokensOutsideTheTable) {
  const std::vector<float> table(4 * 32, 1.0f);
  const WeightMatrix m{WeightStorage::Ggml(GgmlType::kF32),
                       reinterpret_cast<const uint8_t*>(table.data()), 4, 32};
  std::vector<float> out(2 * 32);
  for (int32_t bad : {4, -1}) {
    const int32_t tokens[2] = {1, bad};
    const absl::Status st = EmbeddingLookup(m, tokens, 2, out.data());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(std::to_string(bad)), std::string_view::npos) << st;
  }
  const WeightMatrix q{WeightStorage::Ggml(GgmlType::kQ4_K),
                       reinterpret_cast<const uint8_t*>(table.data()), 1, 32};
  const int32_t zero = 0;
  EXPECT_FALSE(EmbeddingLookup(q, &zero, 1, out.data()).ok());  // 32 is not whole q4_K blocks
}

TEST(GatherRowsTest, CopiesRowsAndRejectsBadIndices) {
  const std::vector<float> x = Gaussian(6 * 5, 61);
  const std::vector<int32_t> idx = {5, 0, 5, 2};
  std::vector<float> out(idx.size() * 5);
  ASSERT_TRUE(GatherRows(x.data(), 6, 5, idx.data(), 4, out.data()).ok());
  for (size_t i = 0; i < idx.size(); ++i) {
    for (int c = 0; c < 5; ++c) EXPECT_EQ(out[i * 5 + c], x[idx[i] * 5 + c]);
  }
  const int32_t bad[2] = {0, 6};
  EXPECT_EQ(GatherRows(x.data(), 6, 5, bad, 2, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(GatherRows(x.data(), 6, 5, nullptr, 0, out.data()).ok());
}

TEST(ArgmaxTest, LowestIndexWinsTiesAndNaNsNeverWin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {
      1,    3,    3,    2,     // tie: 1
      nan,  0,    nan,  -1,    // NaN first: 1
      -inf, -inf, -inf, -inf,  // all -inf: 0
      nan,  nan,  nan,  nan,   // all NaN: 0
      -5,   -4,   -4,   inf,   // inf: 3
  };
  std::vector<int32_t> out(5, -1);
  ArgmaxRows(x.data(), 5, 4, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 1, 0, 0, 3}));
  // Random rows against std::max_element (first of the largest).
  const int64_t rows = 7, width = 32000;
  std::vector<float> r = Gaussian(rows * width, 71);
  r[3 * width + 100] = r[3 * width + 200] = 50.0f;
  std::vector<int32_t> got(rows);
  ArgmaxRows(r.data(), rows, width, got.data());
  for (int64_t i = 0; i < rows; ++i) {
    EXPECT_EQ(got[i], std::max_element(r.begin() + i * width, r.begin() + (i + 1) * width) -
                          (r.begin() + i * width));
  }
  EXPECT_EQ(got[3], 100);
}

}  // namespace
}  // namespace kiln::cpu

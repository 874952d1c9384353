// Tests of runtime/cpu/matmul.h: every storage against the reference decoder
// (runtime/formats/quant.h) and a double-precision dot, at several shapes
// (odd K in blocks, N = 1, 3, 17, T = 1, 5); the AVX2 path against the scalar
// one; int8 activations against the product they quantise, through Matmul
// and through each integer kernel family this CPU has (AVX2, AVX-VNNI,
// AVX-512 VNNI); bitwise independence from the thread count and from T; the
// peak loops of `kiln bench --probe`.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/peak.h"
#include "runtime/cpu/probe.h"
#include "runtime/cpu/q8_dot.h"
#include "runtime/cpu/row_groups.h"
#include "runtime/cpu/weight_storage.h"
#include "runtime/formats/quant.h"
#include "tests/cpu/cpu_test_util.h"

namespace kiln::cpu {
namespace {

using ::kiln::cpu::testing::Gaussian;
using ::kiln::cpu::testing::RelL2;
using ::kiln::cpu::testing::SameBits;

// Bounds on ||y - y_ref|| / ||y_ref||, y_ref = the reference decoder's f32
// weights times x, in double. Both paths decode the same bits; what is left
// is rounding: the scalar path sums in double (its error is the reference's
// own f32 rounding of d * q + m; measured worst 5.0e-8 over all storages and
// shapes), the AVX2 path in f32 with 16 lanes per token (measured worst
// 2.2e-6, q2_K at N = 1, where one output of a few thousand terms cancels).
constexpr double kScalarBound = 2e-7;
constexpr double kAvx2Bound = 5e-6;
// Bound on the AVX2 path against the scalar one (measured worst 2.2e-6).
constexpr double kAvx2VsScalarBound = 1e-5;

struct Weights {
  WeightStorage storage;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // [n, k], the reference decoder's output

  WeightMatrix matrix() const { return {storage, bytes.data(), n, k}; }
};

Weights MakeWeights(const WeightStorage& storage, int64_t n, int64_t k, uint32_t seed) {
  Weights w{storage, n, k, {}, {}};
  const std::vector<float> x = Gaussian(static_cast<size_t>(n * k), seed, 0.5f);
  const size_t row_bytes = static_cast<size_t>(*storage.RowBytes(k));
  w.bytes.resize(row_bytes * static_cast<size_t>(n));
  w.dequantized.resize(x.size());
  for (int64_t r = 0; r < n; ++r) {
    const std::span<const float> src(x.data() + r * k, static_cast<size_t>(k));
    const std::span<uint8_t> dst(w.bytes.data() + r * row_bytes, row_bytes);
    const absl::Status q = storage.grouped
                               ? QuantizeGrouped(*storage.grouped, storage.group, src, dst)
                               : Quantize(storage.ggml, src, dst);
    EXPECT_TRUE(q.ok()) << q;
  }
  const absl::Status d = DequantizeRow(storage, w.bytes, w.dequantized);
  EXPECT_TRUE(d.ok()) << d;
  return w;
}

std::vector<double> ReferenceMatmul(const std::vector<float>& x, int64_t t, const Weights& w) {
  std::vector<double> y(static_cast<size_t>(t * w.n));
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t r = 0; r < w.n; ++r) {
      double s = 0;
      for (int64_t c = 0; c < w.k; ++c) {
        s += static_cast<double>(x[i * w.k + c]) * w.dequantized[r * w.k + c];
      }
      y[i * w.n + r] = s;
    }
  }
  return y;
}

std::vector<float> RunMatmul(const std::vector<float>& x, int64_t t, const Weights& w,
                             ThreadPool& pool, CpuIsa isa, Activations activations = Activations::kF32) {
  std::vector<float> y(static_cast<size_t>(t * w.n), -777.0f);
  const absl::Status st = Matmul(x.data(), t, w.matrix(), y.data(), pool, isa, activations);
  EXPECT_TRUE(st.ok()) << st;
  return y;
}

// Row lengths per block size: odd multiples of the block, one of them long.
std::vector<int64_t> RowLengths(const WeightStorage& s) {
  const int64_t block = s.block_elems();
  if (block == 1) return {7, 96, 1000, 2336};
  if (block == 256) return {256, 768, 2304};
  return {block, 5 * block, 73 * block};
}

struct StorageCase {
  std::string name;  // as ParseWeightStorage reads it
};

class MatmulTest : public ::testing::TestWithParam<StorageCase> {
 protected:
  WeightStorage storage() const {
    absl::StatusOr<WeightStorage> s = ParseWeightStorage(GetParam().name);
    EXPECT_TRUE(s.ok()) << s.status();
    return *s;
  }
};

TEST_P(MatmulTest, MatchesDequantizedReference) {
  const WeightStorage s = storage();
  ThreadPool pool(3);
  double worst_scalar = 0, worst_avx2 = 0, worst_vs = 0;
  uint32_t seed = 1;
  for (int64_t k : RowLengths(s)) {
    for (int64_t n : {1, 3, 17}) {
      for (int64_t t : {1, 5}) {
        SCOPED_TRACE(::testing::Message() << s.Name() << " K=" << k << " N=" << n << " T=" << t);
        const Weights w = MakeWeights(s, n, k, seed++);
        const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), seed++);
        const std::vector<double> want = ReferenceMatmul(x, t, w);
        const std::vector<float> scalar = RunMatmul(x, t, w, pool, CpuIsa::kScalar);
        const double e_scalar = RelL2(want, scalar);
        EXPECT_LE(e_scalar, kScalarBound);
        worst_scalar = std::max(worst_scalar, e_scalar);
        if (MatmulIsa(s, CpuIsa::kAvx2) == CpuIsa::kAvx2) {
          const std::vector<float> avx2 = RunMatmul(x, t, w, pool, CpuIsa::kAvx2);
          const double e_avx2 = RelL2(want, avx2);
          const double e_vs = RelL2(scalar, avx2);
          EXPECT_LE(e_avx2, kAvx2Bound);
          EXPECT_LE(e_vs, kAvx2VsScalarBound);
          worst_avx2 = std::max(worst_avx2, e_avx2);
          worst_vs = std::max(worst_vs, e_vs);
        }
      }
    }
  }
  std::printf("[ measure  ] %-9s scalar %.2e  avx2 %.2e  avx2 vs scalar %.2e (%s)\n",
              s.Name().c_str(), worst_scalar, worst_avx2, worst_vs,
              std::string(CpuIsaName(MatmulIsa(s, CpuIsa::kAvx2))).c_str());
}

// The storages with integer kernels (q8_dot.h), on a CPU with AVX2.
bool HasInt8Kernel(const WeightStorage& s) {
  if (s.grouped || MatmulIsa(s, CpuIsa::kAvx2) != CpuIsa::kAvx2) return false;
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    if (s.ggml == t) return true;
  }
  return false;
}

// x as the integer kernels see it: per group of `group` elements (32, or
// 256 for the k-quants) d = max|x| / 127 and q = x 127 / max|x| rounded to
// nearest even, both in f32, then d q.
std::vector<float> QuantizedActivations(const std::vector<float>& x, int group) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += group) {
    float amax = 0;
    for (size_t i = b; i < b + group; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, inv = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (size_t i = b; i < b + group; ++i) {
      out[i] = static_cast<float>(static_cast<double>(d) * std::nearbyint(x[i] * inv));
    }
  }
  return out;
}

// Token rows quantised by the kernels' own quantiser, for weights of `type`.
class QuantizedRows {
 public:
  QuantizedRows(const std::vector<float>& x, int64_t t, int64_t k, GgmlType type)
      : q_(static_cast<size_t>(t * k)),
        d_(static_cast<size_t>(t * k / 32)),
        dsum_(d_.size()),
        unit_(static_cast<size_t>(t * k / 256)),
        rescale_(unit_.size()),
        k_(k) {
    QuantizeQ8(x.data(), t, k, Q8GroupOf(type), q_.data(), d_.data(), dsum_.data(), unit_.data(), rescale_.data());
  }
  Q8Rows rows() const { return Q8Rows{q_.data(), d_.data(), dsum_.data(), k_, unit_.data(), rescale_.data()}; }

 private:
  std::vector<int8_t> q_;
  std::vector<float> d_, dsum_, unit_, rescale_;
  int64_t k_;
};

// Bounds for int8 activations: against the product of the quantised
// activations and the weights (what the integer sums compute exactly, up to
// f32 scaling; measured worst 6.3e-6, q5_K), and against the unquantised
// product (the activations' rounding, up to 1/254 of a group's largest
// value an element), over rows of N >= 3: a single output (N = 1) may
// cancel down to near nothing, and with it any rounding looks large (q6_K,
// K = 768, one output: 3.2e-2 per 32, 2.3e-1 per 256).
constexpr double kInt8VsQuantizedBound = 2e-5;
constexpr double kInt8VsExactBound = 2e-2;  // measured worst 9.5e-3 (q5_K, per 256)

// Int8 activations where the storage has an integer kernel (the f32 path's
// bits elsewhere, and always with Activations::kF32).
TEST_P(MatmulTest, Int8ActivationsMatchTheQuantisedProduct) {
  const WeightStorage s = storage();
  ThreadPool pool(2);
  double worst_q = 0, worst_exact = 0;
  uint32_t seed = 500;
  for (int64_t k : RowLengths(s)) {
    if (k % 32 != 0) continue;
    for (int64_t n : {1, 3, 17}) {
      for (int64_t t : {1, 5}) {
        SCOPED_TRACE(::testing::Message() << s.Name() << " K=" << k << " N=" << n << " T=" << t);
        const Weights w = MakeWeights(s, n, k, seed++);
        const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), seed++);
        const std::vector<float> int8 = RunMatmul(x, t, w, pool, CpuIsa::kAvx2, Activations::kInt8);
        if (!HasInt8Kernel(s)) {
          EXPECT_TRUE(SameBits(int8, RunMatmul(x, t, w, pool, CpuIsa::kAvx2))) << "no integer kernel: the f32 path";
          continue;
        }
        const double e_q = RelL2(ReferenceMatmul(QuantizedActivations(x, Q8GroupOf(s.ggml)), t, w), int8);
        const double e_exact = RelL2(ReferenceMatmul(x, t, w), int8);
        EXPECT_LE(e_q, kInt8VsQuantizedBound);
        worst_q = std::max(worst_q, e_q);
        if (n >= 3) {
          EXPECT_LE(e_exact, kInt8VsExactBound);
          worst_exact = std::max(worst_exact, e_exact);
        }
      }
    }
  }
  if (HasInt8Kernel(s)) {
    std::printf("[ measure  ] %-9s int8 activations: vs quantised x %.2e, vs exact %.2e (N >= 3)\n", s.Name().c_str(),
                worst_q, worst_exact);
  }
}

// Where the CPU has AVX-VNNI, its kernels (one vpdpbusd for a byte multiply-
// add and a word multiply-add) give AVX2's bits: neither saturates.
TEST_P(MatmulTest, Int8VnniAndAvx2KernelsAgreeBitwise) {
  const WeightStorage s = storage();
  if (!HasInt8Kernel(s)) GTEST_SKIP() << s.Name() << " has no integer kernel here";
  const RowDotQ8Fn vnni = Q8RowDot(s.ggml, Q8Kernel::kAvxVnni), avx2 = Q8RowDot(s.ggml, Q8Kernel::kAvx2);
  ASSERT_NE(avx2, nullptr);
  if (vnni == nullptr) GTEST_SKIP() << "no AVX-VNNI here";
  const int64_t k = RowLengths(s).back(), n = 7, t = 6;
  const Weights w = MakeWeights(s, n, k, 31);
  const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), 32);
  const QuantizedRows xq(x, t, k, s.ggml);
  const int64_t row_bytes = static_cast<int64_t>(*s.RowBytes(k));
  std::vector<float> a(static_cast<size_t>(t * n)), b(a.size());
  vnni(w.bytes.data(), row_bytes, n, k, xq.rows(), t, a.data(), n);
  avx2(w.bytes.data(), row_bytes, n, k, xq.rows(), t, b.data(), n);
  EXPECT_TRUE(SameBits(a, b));
}

// Each integer kernel this CPU has, called directly (Matmul takes only the
// best one): within the bound of the quantised product at every row count
// left over after tiles of 4 (N = 5, 6, 11; N = 1, whose single result may
// cancel down to nothing, is Int8ActivationsMatchTheQuantisedProduct's) and
// every token count (1 in place, 2-9 in tiles), each token's results the
// bits it gets alone.
TEST_P(MatmulTest, EveryInt8KernelMatchesTheQuantisedProductAndIsBatchInvariant) {
  const WeightStorage s = storage();
  if (!HasInt8Kernel(s)) GTEST_SKIP() << s.Name() << " has no integer kernel here";
  uint32_t seed = 900;
  for (Q8Kernel kernel : {Q8Kernel::kAvx2, Q8Kernel::kAvxVnni, Q8Kernel::kAvx512Vnni}) {
    const RowDotQ8Fn fn = Q8RowDot(s.ggml, kernel);
    if (fn == nullptr) {
      std::printf("[ measure  ] %s: no %s here\n", s.Name().c_str(), std::string(Q8KernelName(kernel)).c_str());
      continue;
    }
    double worst = 0;
    for (int64_t k : RowLengths(s)) {
      const int64_t row_bytes = static_cast<int64_t>(*s.RowBytes(k));
      for (int64_t n : {5, 6, 11}) {
        for (int64_t t : {1, 2, 5, 9}) {
          SCOPED_TRACE(::testing::Message() << Q8KernelName(kernel) << " K=" << k << " N=" << n << " T=" << t);
          const Weights w = MakeWeights(s, n, k, seed++);
          const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), seed++);
          const QuantizedRows xq(x, t, k, s.ggml);
          std::vector<float> y(static_cast<size_t>(t * n));
          fn(w.bytes.data(), row_bytes, n, k, xq.rows(), t, y.data(), n);
          const double e = RelL2(ReferenceMatmul(QuantizedActivations(x, Q8GroupOf(s.ggml)), t, w), y);
          EXPECT_LE(e, kInt8VsQuantizedBound);
          worst = std::max(worst, e);
          for (int64_t i = 0; i < t; ++i) {
            const QuantizedRows xi(std::vector<float>(x.begin() + i * k, x.begin() + (i + 1) * k), 1, k, s.ggml);
            std::vector<float> yi(static_cast<size_t>(n));
            fn(w.bytes.data(), row_bytes, n, k, xi.rows(), 1, yi.data(), n);
            EXPECT_TRUE(SameBits(yi, std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n)))
                << "token " << i;
          }
        }
      }
    }
    std::printf("[ measure  ] %-9s %-11s vs quantised x %.2e\n", s.Name().c_str(),
                std::string(Q8KernelName(kernel)).c_str(), worst);
  }
}

// 1 thread and several: the same bits (each output is computed by the same
// instructions; only which thread runs it changes).
TEST_P(MatmulTest, ThreadCountIndependentBitwise) {
  const WeightStorage s = storage();
  const int64_t k = RowLengths(s)[1], n = 37, t = 6;
  const Weights w = MakeWeights(s, n, k, 99);
  const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), 100);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2}) {
    for (Activations a : {Activations::kF32, Activations::kInt8}) {
      ThreadPool one(1);
      const std::vector<float> y1 = RunMatmul(x, t, w, one, isa, a);
      for (int threads : {2, 3, 8}) {
        ThreadPool many(threads);
        EXPECT_TRUE(SameBits(y1, RunMatmul(x, t, w, many, isa, a)))
            << CpuIsaName(isa) << (a == Activations::kInt8 ? " int8 " : " ") << threads << " threads";
      }
    }
  }
}

// A token's row of y does not depend on the other tokens of the batch: a
// decode step gives the bits the same token gets inside a prefill (T spans
// several token tiles and a ragged last one).
TEST_P(MatmulTest, BatchInvariantBitwise) {
  const WeightStorage s = storage();
  const int64_t k = RowLengths(s)[1], n = 5, t = 21;
  const Weights w = MakeWeights(s, n, k, 7);
  const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), 8);
  ThreadPool pool(2);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2}) {
    for (Activations a : {Activations::kF32, Activations::kInt8}) {
      const std::vector<float> all = RunMatmul(x, t, w, pool, isa, a);
      for (int64_t i = 0; i < t; ++i) {
        const std::vector<float> xi(x.begin() + i * k, x.begin() + (i + 1) * k);
        const std::vector<float> yi = RunMatmul(xi, 1, w, pool, isa, a);
        EXPECT_TRUE(SameBits(yi, std::vector<float>(all.begin() + i * n, all.begin() + (i + 1) * n)))
            << CpuIsaName(isa) << (a == Activations::kInt8 ? " int8" : "") << " token " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllStorages, MatmulTest,
    ::testing::Values(StorageCase{"f32"}, StorageCase{"f16"}, StorageCase{"bf16"},
                      StorageCase{"q8_0"}, StorageCase{"q4_0"}, StorageCase{"q4_1"},
                      StorageCase{"q5_0"}, StorageCase{"q5_1"}, StorageCase{"q2_K"},
                      StorageCase{"q3_K"}, StorageCase{"q4_K"}, StorageCase{"q5_K"},
                      StorageCase{"q6_K"}, StorageCase{"int4:g8"}, StorageCase{"int4:g32"},
                      StorageCase{"int4:g128"}, StorageCase{"int2:g16"}, StorageCase{"int2:g64"}),
    [](const ::testing::TestParamInfo<StorageCase>& info) {
      std::string name = info.param.name;
      std::replace(name.begin(), name.end(), ':', '_');
      return name;
    });

// q4_K and q6_K rows in groups of eight (row_groups.h), in every kernel
// family this CPU has: the product the quantised activations give, the
// family's one-row kernel's results to f32 rounding (what a packing slip
// would break: a chunk or a scale of the wrong row or sub-block), and the
// same bits for a token alone or in a batch; through Matmul (the chosen
// family, as the CPU executor reads them): a tail of rows past the last
// group on the one-row kernel, and the same bits on any number of threads.
TEST(RowGroupsTest, EveryFamilyMatchesItsRowKernelAndIsBatchInvariant) {
  uint32_t seed = 4000;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const WeightStorage s = WeightStorage::Ggml(type);
    for (Q8Kernel kernel : {Q8Kernel::kAvx2, Q8Kernel::kAvxVnni, Q8Kernel::kAvx512Vnni}) {
      const std::string family(Q8KernelName(kernel));
      if (!HasRowGroupKernel(type, kernel)) {
        std::printf("[ measure  ] %s: this CPU has no %s kernels\n", s.Name().c_str(), family.c_str());
        continue;
      }
      double worst_product = 0, worst_rows = 0;
      for (int64_t k : {256, 768, 2304}) {
        const int64_t n = 16, groups = n / kRowGroupRows, row_bytes = static_cast<int64_t>(*s.RowBytes(k));
        const Weights w = MakeWeights(s, n, k, seed++);
        std::vector<uint8_t> packed(static_cast<size_t>(groups * RowGroupBytes(type, k)));
        PackRowGroups(type, w.bytes.data(), k, 0, groups, packed.data());
        for (int64_t t : {1, 2, 3, 4, 5, 9}) {
          SCOPED_TRACE(::testing::Message() << s.Name() << " " << family << " K=" << k << " T=" << t);
          const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), seed++);
          const QuantizedRows xq(x, t, k, type);
          std::vector<float> y(static_cast<size_t>(t * n)), rows(y.size());
          RowGroupsDot(kernel, type, packed.data(), groups, k, xq.rows(), t, y.data(), n);
          Q8RowDot(type, kernel)(w.bytes.data(), row_bytes, n, k, xq.rows(), t, rows.data(), n);
          const double product = RelL2(ReferenceMatmul(QuantizedActivations(x, 256), t, w), y);
          const double against_rows = RelL2(rows, y);
          EXPECT_LE(product, kInt8VsQuantizedBound);
          EXPECT_LE(against_rows, 1e-6);
          worst_product = std::max(worst_product, product);
          worst_rows = std::max(worst_rows, against_rows);
          for (int64_t i = 0; i < t; ++i) {
            const QuantizedRows xi(std::vector<float>(x.begin() + i * k, x.begin() + (i + 1) * k), 1, k, type);
            std::vector<float> yi(static_cast<size_t>(n));
            RowGroupsDot(kernel, type, packed.data(), groups, k, xi.rows(), 1, yi.data(), n);
            EXPECT_TRUE(SameBits(yi, std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n))) << "token " << i;
          }
        }
      }
      std::printf("[ measure  ] %s %-11s row groups vs quantised x %.2e, vs the row kernel %.2e\n", s.Name().c_str(),
                  family.c_str(), worst_product, worst_rows);
    }
  }
}

TEST(RowGroupsTest, MatmulReadsThemWithTailRowsAndAnyThreadCount) {
  ThreadPool one(1), three(3);
  uint32_t seed = 5000;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const WeightStorage s = WeightStorage::Ggml(type);
    if (!HasRowGroupKernel(type)) GTEST_SKIP() << "no integer kernel here";
    for (int64_t n : {8, 21, 40}) {
      const int64_t k = 768, t = 5, groups = n / kRowGroupRows;
      SCOPED_TRACE(::testing::Message() << s.Name() << " N=" << n);
      const Weights w = MakeWeights(s, n, k, seed++);
      std::vector<uint8_t> packed(static_cast<size_t>(groups * RowGroupBytes(type, k)));
      PackRowGroups(type, w.bytes.data(), k, 0, groups, packed.data());
      WeightMatrix grouped = w.matrix();
      grouped.row_groups = packed.data();
      const std::vector<float> x = Gaussian(static_cast<size_t>(t * k), seed++);
      std::vector<float> y(static_cast<size_t>(t * n)), rows(y.size()), y3(y.size());
      ASSERT_TRUE(Matmul(x.data(), t, grouped, y.data(), one, CpuIsa::kAvx2, Activations::kInt8).ok());
      ASSERT_TRUE(Matmul(x.data(), t, w.matrix(), rows.data(), one, CpuIsa::kAvx2, Activations::kInt8).ok());
      ASSERT_TRUE(Matmul(x.data(), t, grouped, y3.data(), three, CpuIsa::kAvx2, Activations::kInt8).ok());
      EXPECT_LE(RelL2(rows, y), 1e-6);
      EXPECT_FALSE(SameBits(rows, y)) << "the groups were not read";
      EXPECT_TRUE(SameBits(y, y3)) << "3 threads";
      // The tail rows (past the last group) are the one-row kernel's.
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t r = groups * kRowGroupRows; r < n; ++r) EXPECT_EQ(y[i * n + r], rows[i * n + r]);
      }
    }
  }
}

// The types the real models carry have an AVX2 kernel wherever the CPU does.
TEST(MatmulIsaTest, Avx2KernelsWhereTheCpuHasAvx2) {
  const bool cpu_avx2 = DetectCpuIsa() == CpuIsa::kAvx2;
  std::printf("[ measure  ] this CPU: %s\n", std::string(CpuIsaName(DetectCpuIsa())).c_str());
  for (const char* name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K",
                           "q3_K", "q4_K", "q5_K", "q6_K", "int4:g32", "int2:g32"}) {
    const WeightStorage s = *ParseWeightStorage(name);
    EXPECT_EQ(MatmulIsa(s, CpuIsa::kAvx2), cpu_avx2 ? CpuIsa::kAvx2 : CpuIsa::kScalar) << name;
    EXPECT_EQ(MatmulIsa(s, CpuIsa::kScalar), CpuIsa::kScalar) << name;
  }
}

// The peak loops (kiln bench --probe's compute ceiling) count the
// operations they issue: 2 a multiply-add, 12 chains of 8 f32 lanes or of
// 32 / 64 byte products; 0 where the CPU lacks the instructions.
TEST(PeakTest, LoopsCountTheirOperations) {
  const bool avx2 = DetectCpuIsa() == CpuIsa::kAvx2;
  EXPECT_EQ(RunF32Peak(1000), avx2 ? 2.0 * 12 * 8 * 1000 : 0.0);
  for (auto [kernel, lanes] : {std::pair{Q8Kernel::kAvx2, 32}, {Q8Kernel::kAvxVnni, 32}, {Q8Kernel::kAvx512Vnni, 64}}) {
    const bool present = Q8RowDot(GgmlType::kQ8_0, kernel) != nullptr;
    EXPECT_EQ(RunInt8Peak(kernel, 1000), present ? 2.0 * 12 * lanes * 1000 : 0.0) << Q8KernelName(kernel);
  }
}

// The probe's rates are those of the best integer kernel and of the FMAs,
// both running (positive) where the CPU has AVX2.
TEST(PeakTest, ProbeMeasuresBothPeaks) {
  if (DetectCpuIsa() != CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2: no peak loops";
  ThreadPool pool(2);
  absl::StatusOr<CpuCeilings> c = ProbeCpuCeilings(pool);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->int8_kernel, BestQ8Kernel());
  EXPECT_GT(c->f32_flops_per_second, 1e9);
  EXPECT_GT(c->int8_ops_per_second, 1e9);
  EXPECT_GT(c->bytes_per_second, 1e8);
  std::printf("[ measure  ] 2 threads: %.1f GB/s, f32 FMAs %.0f GFLOP/s, int8 (%s) %.0f GOP/s\n",
              c->bytes_per_second / 1e9, c->f32_flops_per_second / 1e9,
              std::string(Q8KernelName(c->int8_kernel)).c_str(), c->int8_ops_per_second / 1e9);
}

TEST(MatmulErrorTest, RejectsBadShapesAndStorages) {
  ThreadPool pool(2);
  std::vector<float> x(512, 1.0f), y(64, 0.0f);
  std::vector<uint8_t> bytes(4096);
  // K not whole blocks.
  absl::Status st = Matmul(
      x.data(), 1, {WeightStorage::Ggml(GgmlType::kQ4_K), bytes.data(), 2, 128}, y.data(), pool);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q4_K"), std::string_view::npos) << st;
  st = Matmul(x.data(), 1, {WeightStorage::Grouped(GroupedKind::kInt4, 32), bytes.data(), 2, 48},
              y.data(), pool);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("int4:g32"), std::string_view::npos) << st;
  // Storages the kernels do not read.
  st = Matmul(x.data(), 1, {WeightStorage::Ggml(GgmlType::kQ8_K), bytes.data(), 2, 256}, y.data(),
              pool);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q8_K"), std::string_view::npos) << st;
  st = Matmul(x.data(), 1, {WeightStorage::Grouped(GroupedKind::kInt2, 12), bytes.data(), 2, 24},
              y.data(), pool);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  // Negative sizes and null buffers.
  EXPECT_FALSE(Matmul(x.data(), -1, {WeightStorage::Ggml(GgmlType::kF32), bytes.data(), 2, 8},
                      y.data(), pool)
                   .ok());
  EXPECT_FALSE(
      Matmul(x.data(), 1, {WeightStorage::Ggml(GgmlType::kF32), nullptr, 2, 8}, y.data(), pool)
          .ok());
  // Empty shapes are fine; K = 0 gives zeros.
  EXPECT_TRUE(
      Matmul(nullptr, 0, {WeightStorage::Ggml(GgmlType::kF32), nullptr, 2, 8}, nullptr, pool).ok());
  std::fill(y.begin(), y.end(), 5.0f);
  EXPECT_TRUE(
      Matmul(x.data(), 2, {WeightStorage::Ggml(GgmlType::kF32), bytes.data(), 3, 0}, y.data(), pool)
          .ok());
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 6), std::vector<float>(6, 0.0f));
  EXPECT_EQ(y[6], 5.0f);
}

TEST(WeightStorageTest, ParsesPlanNames) {
  EXPECT_EQ(ParseWeightStorage("q4_k")->ggml, GgmlType::kQ4_K);
  EXPECT_EQ(ParseWeightStorage("F16")->ggml, GgmlType::kF16);
  EXPECT_FALSE(ParseWeightStorage("bf16")->grouped.has_value());
  const absl::StatusOr<WeightStorage> g = ParseWeightStorage("int4:g128");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->grouped, GroupedKind::kInt4);
  EXPECT_EQ(g->group, 128);
  EXPECT_EQ(g->Name(), "int4:g128");
  EXPECT_EQ(g->RowBytes(256), 2u * 68);
  EXPECT_EQ(ParseWeightStorage("int2:g8")->RowBytes(16), 2u * 6);
  EXPECT_EQ(ParseWeightStorage("q6_K")->RowBytes(512), 2u * 210);
  EXPECT_FALSE(ParseWeightStorage("q6_K")->RowBytes(100));
  for (const char* bad : {"int4:g12", "int4:g", "int4:g-8", "int2:g0", "int4:g8x", "q8_K",
                          "iq2_xxs", "i32", "nonsense", ""}) {
    const absl::StatusOr<WeightStorage> s = ParseWeightStorage(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find(std::string("'") + bad + "'"), std::string_view::npos)
        << s.status();
  }
}

}  // namespace
}  // namespace kiln::cpu

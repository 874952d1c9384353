// Tests of runtime/cpu/attention.h: paged attention against a naive attention
// over contiguous per-sequence K/V histories, in double. Pages are assigned at
// random (never contiguous), sequences have different lengths, and the
// scenarios cover prefill, decode, a chunk continuing a cached prefix mixed
// with decodes, grouped-query, multi-query and multi-head layouts. Unwritten
// pool memory holds NaN, so reading anything outside the causal window shows.
// Each runs with an f32 pool and an f16 one (whose reference reads K and V
// rounded to f16, as the pool holds them).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/attention.h"
#include "runtime/util/half.h"
#include "tests/cpu/cpu_test_util.h"

namespace kiln::cpu {
namespace {

using ::kiln::cpu::testing::Gaussian;
using ::kiln::cpu::testing::RelL2;
using ::kiln::cpu::testing::SameBits;

// Bound on ||out - ref|| / ||ref|| against the double-precision reference
// (f32 scores, exp and sums; measured worst 1.1e-7).
constexpr double kAttentionBound = 1e-6;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Shape {
  int64_t heads, kv_heads, head_dim, page_size;
};

// One sequence of a step: `cached` positions already in the pool, `fresh`
// tokens in this step at positions cached .. cached + fresh - 1.
struct Seq {
  int cached, fresh;
};

class PagedAttentionFixture {
 public:
  PagedAttentionFixture(const Shape& shape, const std::vector<Seq>& seqs, uint32_t seed, bool f16 = false)
      : shape_(shape), seqs_(seqs), f16_(f16) {
    const int64_t width = shape.kv_heads * shape.head_dim;
    int64_t pages_needed = 0;
    for (const Seq& s : seqs) {
      const int64_t len = s.cached + s.fresh;
      max_pages_ = std::max(max_pages_, (len + shape.page_size - 1) / shape.page_size + 1);
      pages_needed += (len + shape.page_size - 1) / shape.page_size;
      keys_.push_back(Gaussian(static_cast<size_t>(len * width), seed++));
      values_.push_back(Gaussian(static_cast<size_t>(len * width), seed++));
    }
    pool_.layers = 3;
    pool_.num_pages = pages_needed + 5;  // some pages belong to nobody
    pool_.page_size = shape.page_size;
    pool_.kv_heads = shape.kv_heads;
    pool_.head_dim = shape.head_dim;
    if (f16) {
      storage_f16_.assign(static_cast<size_t>(pool_.elements()), F32ToF16(kNaN));
      pool_.data_f16 = storage_f16_.data();
    } else {
      storage_.assign(static_cast<size_t>(pool_.elements()), kNaN);
      pool_.data = storage_.data();
    }

    // Random, non-contiguous pages; unused block-table entries are -1.
    std::vector<int32_t> pages(static_cast<size_t>(pool_.num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(pages.begin(), pages.end(), rng);
    block_tables_.assign(seqs.size() * max_pages_, -1);
    size_t next = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t len = seqs[s].cached + seqs[s].fresh;
      for (int64_t j = 0; j < (len + shape.page_size - 1) / shape.page_size; ++j) {
        block_tables_[s * max_pages_ + j] = pages[next++];
      }
    }
  }

  // Writes the cached prefixes of every sequence into layer `layer`.
  void WriteCachedPrefixes(int64_t layer) {
    const int64_t width = pool_.row_width();
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (int64_t p = 0; p < seqs_[s].cached; ++p) {
        const int64_t page = block_tables_[s * max_pages_ + p / pool_.page_size];
        const int64_t slot = p % pool_.page_size;
        for (int64_t c = 0; c < width; ++c) {
          Store(pool_.KOffset(layer, page, slot) + c, keys_[s][p * width + c]);
          Store(pool_.VOffset(layer, page, slot) + c, values_[s][p * width + c]);
        }
      }
    }
  }

  // The step's inputs: every sequence's fresh tokens, in order.
  struct Step {
    std::vector<float> q, k, v;
    std::vector<int32_t> positions, query_starts, context_lens;
    int64_t tokens = 0;
  };
  Step MakeStep(uint32_t seed) const {
    Step st;
    const int64_t width = pool_.row_width();
    st.query_starts.push_back(0);
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (int p = seqs_[s].cached; p < seqs_[s].cached + seqs_[s].fresh; ++p) {
        st.positions.push_back(p);
        st.k.insert(st.k.end(), keys_[s].begin() + p * width, keys_[s].begin() + (p + 1) * width);
        st.v.insert(st.v.end(), values_[s].begin() + p * width,
                    values_[s].begin() + (p + 1) * width);
      }
      st.query_starts.push_back(static_cast<int32_t>(st.positions.size()));
      st.context_lens.push_back(seqs_[s].cached + seqs_[s].fresh);
    }
    st.tokens = static_cast<int64_t>(st.positions.size());
    st.q = Gaussian(static_cast<size_t>(st.tokens * shape_.heads * shape_.head_dim), seed);
    return st;
  }

  AttentionBatch Batch(const Step& st) const {
    AttentionBatch b;
    b.q = st.q.data();
    b.k = st.k.data();
    b.v = st.v.data();
    b.tokens = st.tokens;
    b.positions = st.positions.data();
    b.num_seqs = static_cast<int64_t>(seqs_.size());
    b.query_starts = st.query_starts.data();
    b.context_lens = st.context_lens.data();
    b.block_tables = block_tables_.data();
    b.max_pages = max_pages_;
    return b;
  }

  AttentionParams Params(int64_t layer) const {
    return {layer, shape_.heads,
            static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape_.head_dim)))};
  }

  // Naive causal attention over each sequence's contiguous history.
  std::vector<double> Reference(const Step& st, float scale) const {
    const int64_t d = shape_.head_dim, group = shape_.heads / shape_.kv_heads;
    const int64_t width = pool_.row_width();
    std::vector<double> out(st.q.size());
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (int32_t i = st.query_starts[s]; i < st.query_starts[s + 1]; ++i) {
        const int p = st.positions[i];
        for (int64_t h = 0; h < shape_.heads; ++h) {
          const float* q = st.q.data() + (i * shape_.heads + h) * d;
          const int64_t kvh = h / group;
          std::vector<double> w(static_cast<size_t>(p + 1));
          double max = -1e300;
          for (int j = 0; j <= p; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < d; ++c)
              dot += static_cast<double>(q[c]) * Stored(keys_[s][j * width + kvh * d + c]);
            w[j] = dot * scale;
            max = std::max(max, w[j]);
          }
          double sum = 0;
          for (double& x : w) sum += (x = std::exp(x - max));
          for (int64_t c = 0; c < d; ++c) {
            double acc = 0;
            for (int j = 0; j <= p; ++j) acc += w[j] * Stored(values_[s][j * width + kvh * d + c]);
            out[(i * shape_.heads + h) * d + c] = acc / sum;
          }
        }
      }
    }
    return out;
  }

  std::vector<float> Run(const Step& st, int64_t layer, int threads) {
    ThreadPool pool(threads);
    std::vector<float> out(st.q.size(), -777.0f);
    const absl::Status status = PagedAttention(Batch(st), Params(layer), pool_, out.data(), pool);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }

  // Every position of every sequence holds its history in `layer`; nothing
  // else of the pool has been written.
  void ExpectPoolHoldsHistories(int64_t layer) const {
    const int64_t width = pool_.row_width();
    std::vector<bool> written(static_cast<size_t>(pool_.elements()), false);
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (int64_t p = 0; p < seqs_[s].cached + seqs_[s].fresh; ++p) {
        const int64_t page = block_tables_[s * max_pages_ + p / pool_.page_size];
        const int64_t slot = p % pool_.page_size;
        for (int64_t c = 0; c < width; ++c) {
          const int64_t ko = pool_.KOffset(layer, page, slot) + c,
                        vo = pool_.VOffset(layer, page, slot) + c;
          EXPECT_EQ(Load(ko), Stored(keys_[s][p * width + c])) << "seq " << s << " pos " << p;
          EXPECT_EQ(Load(vo), Stored(values_[s][p * width + c])) << "seq " << s << " pos " << p;
          written[ko] = written[vo] = true;
        }
      }
    }
    int64_t stray = 0;
    for (int64_t i = 0; i < pool_.elements(); ++i) stray += !written[i] && !std::isnan(Load(i));
    EXPECT_EQ(stray, 0) << "pool elements written outside the sequences' positions";
  }

  std::vector<float>& storage() { return storage_; }
  const PagePool& pool() const { return pool_; }

 private:
  // x as the pool holds it, and pool element i.
  float Stored(float x) const { return f16_ ? F16ToF32(F32ToF16(x)) : x; }
  float Load(int64_t i) const { return f16_ ? F16ToF32(storage_f16_[i]) : storage_[i]; }
  void Store(int64_t i, float x) {
    if (f16_) {
      storage_f16_[i] = F32ToF16(x);
    } else {
      storage_[i] = x;
    }
  }

  Shape shape_;
  std::vector<Seq> seqs_;
  bool f16_;
  std::vector<std::vector<float>> keys_, values_;  // per sequence: [len, kv_heads * head_dim]
  std::vector<float> storage_;
  std::vector<uint16_t> storage_f16_;
  PagePool pool_;
  int64_t max_pages_ = 0;
  std::vector<int32_t> block_tables_;
};

struct ScenarioCase {
  const char* name;
  std::vector<Seq> seqs;
};

const Shape kShapes[] = {
    {8, 2, 16, 4},    // grouped-query, small pages
    {4, 4, 64, 16},   // multi-head
    {6, 1, 32, 8},    // multi-query
    {14, 2, 64, 16},  // Qwen2.5-0.5B's heads
    {12, 2, 128, 16}, // Qwen2.5-1.5B's heads: more than one pass of heads over V, two 64-element chunks
    {4, 2, 24, 8},    // head_dim 8 x 3: eight lanes only (AVX2) where sixteen take the others
    {10, 2, 40, 16},  // eight lanes, 5 heads a kv head: two passes over V of up to 4 heads
};

const ScenarioCase kScenarios[] = {
    {"prefill", {{0, 1}, {0, 7}, {0, 16}, {0, 33}}},
    {"decode", {{12, 1}, {0, 1}, {40, 1}, {15, 1}, {3, 1}}},
    {"chunk_after_prefix_with_decodes", {{20, 9}, {5, 1}, {0, 4}, {31, 1}}},
    {"empty_sequence_in_batch", {{4, 0}, {0, 3}}},
};

class PagedAttentionTest : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(KvType, PagedAttentionTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "f16" : "f32"; });

TEST_P(PagedAttentionTest, MatchesContiguousReference) {
  double worst = 0;
  uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    for (const ScenarioCase& sc : kScenarios) {
      SCOPED_TRACE(::testing::Message()
                   << sc.name << " H=" << shape.heads << " Hkv=" << shape.kv_heads
                   << " D=" << shape.head_dim << " page=" << shape.page_size);
      PagedAttentionFixture f(shape, sc.seqs, seed, GetParam());
      const int64_t layer = 1;
      f.WriteCachedPrefixes(layer);
      const auto step = f.MakeStep(seed + 1000);
      seed += 17;
      const std::vector<float> out = f.Run(step, layer, 3);
      const double err = RelL2(f.Reference(step, f.Params(layer).scale), out);
      EXPECT_LE(err, kAttentionBound);
      worst = std::max(worst, err);
      f.ExpectPoolHoldsHistories(layer);
    }
  }
  std::printf("[ measure  ] paged attention (%s pool) worst relative L2 %.2e (bound %.0e)\n",
              GetParam() ? "f16" : "f32", worst, kAttentionBound);
}

// 1 thread and several give the same bits: each (token, head) is computed by
// one thread with a fixed order of operations.
TEST_P(PagedAttentionTest, ThreadCountIndependentBitwise) {
  for (const ScenarioCase& sc : kScenarios) {
    SCOPED_TRACE(sc.name);
    std::vector<float> first;
    for (int threads : {1, 2, 5}) {
      PagedAttentionFixture f(kShapes[0], sc.seqs, 77, GetParam());
      f.WriteCachedPrefixes(0);
      const std::vector<float> out = f.Run(f.MakeStep(78), 0, threads);
      if (first.empty()) {
        first = out;
      } else {
        EXPECT_TRUE(SameBits(first, out)) << threads << " threads";
      }
    }
  }
}

// A prompt prefilled in two chunks (the second reading the first from the
// pool) gives the second chunk the same bits as a prefill in one step.
TEST_P(PagedAttentionTest, ChunkedPrefillEqualsOneStepBitwise) {
  const int len = 37, split = 20;
  const int64_t q_width = kShapes[0].heads * kShapes[0].head_dim;
  const int64_t kv_width = kShapes[0].kv_heads * kShapes[0].head_dim;
  PagedAttentionFixture whole(kShapes[0], {{0, len}}, 5, GetParam());
  const auto all = whole.MakeStep(6);
  const std::vector<float> one_step = whole.Run(all, 2, 2);

  // The same histories and pages (same arguments), fed in two steps.
  PagedAttentionFixture chunked(kShapes[0], {{0, len}}, 5, GetParam());
  auto slice = [&](int from, int to) {
    auto st = all;
    st.q.assign(all.q.begin() + from * q_width, all.q.begin() + to * q_width);
    st.k.assign(all.k.begin() + from * kv_width, all.k.begin() + to * kv_width);
    st.v.assign(all.v.begin() + from * kv_width, all.v.begin() + to * kv_width);
    st.positions.assign(all.positions.begin() + from, all.positions.begin() + to);
    st.query_starts = {0, to - from};
    st.context_lens = {to};
    st.tokens = to - from;
    return st;
  };
  const std::vector<float> first = chunked.Run(slice(0, split), 2, 2);
  const std::vector<float> second = chunked.Run(slice(split, len), 2, 3);
  EXPECT_TRUE(
      SameBits(first, std::vector<float>(one_step.begin(), one_step.begin() + split * q_width)));
  EXPECT_TRUE(
      SameBits(second, std::vector<float>(one_step.begin() + split * q_width, one_step.end())));
  chunked.ExpectPoolHoldsHistories(2);
}

TEST(PagedAttentionTest, RejectsBadBatchesWithoutWriting) {
  PagedAttentionFixture f(kShapes[0], {{3, 2}, {0, 1}}, 9);
  const auto good = f.MakeStep(10);
  ThreadPool threads(2);
  std::vector<float> out(good.q.size());
  const std::vector<float> before = f.storage();
  std::vector<int32_t> bad_table = {0, 99, -1, 1, -1, -1};
  // Each case breaks one thing of a good batch.
  auto expect_error = [&](const char* what, auto mutate) {
    auto st = good;
    AttentionBatch b = f.Batch(st);
    AttentionParams p = f.Params(0);
    mutate(st, b, p);
    const absl::Status status = PagedAttention(b, p, f.pool(), out.data(), threads);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_TRUE(SameBits(before, f.storage())) << what << ": the pool was written";
  };
  expect_error("position beyond context", [](auto& st, auto&, auto&) { st.positions[0] = 5; });
  expect_error("negative position", [](auto& st, auto&, auto&) { st.positions[2] = -1; });
  expect_error("decreasing starts", [](auto& st, auto&, auto&) {
    st.query_starts[1] = 3;
    st.query_starts[2] = 2;
  });
  expect_error("starts not ending at T", [](auto& st, auto&, auto&) { st.query_starts[2] = 2; });
  expect_error("context beyond the table",
               [](auto& st, auto&, auto&) { st.context_lens[0] = 1000; });
  expect_error("layer", [](auto&, auto&, auto& p) { p.layer = 3; });
  expect_error("heads not a multiple", [](auto&, auto&, auto& p) { p.num_heads = 7; });
  expect_error("page id", [&](auto&, auto& b, auto&) {
    b.block_tables = bad_table.data();
    b.max_pages = 3;
  });
  PagePool both = f.pool();
  std::vector<uint16_t> halves(static_cast<size_t>(both.elements()));
  both.data_f16 = halves.data();
  EXPECT_EQ(PagedAttention(f.Batch(good), f.Params(0), both, out.data(), threads).code(),
            absl::StatusCode::kInvalidArgument)
      << "a pool with f32 and f16 data";
}

}  // namespace
}  // namespace kiln::cpu

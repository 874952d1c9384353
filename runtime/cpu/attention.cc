#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/cpu/cpu_isa.h"

#if defined(__x86_64__)
#include "runtime/cpu/lane_sums_avx512.h"
#include "runtime/cpu/row_dot_avx2.h"
#endif

namespace kiln::cpu {
namespace {

absl::Status Validate(const AttentionBatch& b, const AttentionParams& p, const PagePool& pool) {
  if (pool.layers <= 0 || pool.num_pages <= 0 || pool.page_size <= 0 || pool.kv_heads <= 0 ||
      pool.head_dim <= 0) {
    return absl::InvalidArgumentError("PagedAttention: page pool has an empty dimension");
  }
  if (p.layer < 0 || p.layer >= pool.layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "PagedAttention: layer %d outside the pool's %d layers", p.layer, pool.layers));
  }
  if (p.num_heads <= 0 || p.num_heads % pool.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PagedAttention: %d query heads is not a positive multiple of %d kv heads",
                        p.num_heads, pool.kv_heads));
  }
  if (b.num_seqs < 0 || b.tokens < 0 || b.max_pages < 0) {
    return absl::InvalidArgumentError("PagedAttention: negative batch size");
  }
  if (b.query_starts[0] != 0 || b.query_starts[b.num_seqs] != b.tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PagedAttention: query_starts must run from 0 to %d tokens, got %d to %d",
                        b.tokens, b.query_starts[0], b.query_starts[b.num_seqs]));
  }
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    if (b.query_starts[s + 1] < b.query_starts[s]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("PagedAttention: query_starts decreases at sequence %d", s));
    }
    const int64_t context = b.context_lens[s];
    if (context < 0 || context > b.max_pages * pool.page_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("PagedAttention: sequence %d has context %d, beyond %d pages of %d", s,
                          context, b.max_pages, pool.page_size));
    }
    for (int64_t i = b.query_starts[s]; i < b.query_starts[s + 1]; ++i) {
      if (b.positions[i] < 0 || b.positions[i] >= context) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "PagedAttention: token %d of sequence %d is at position %d, outside its context of %d",
            i, s, b.positions[i], context));
      }
    }
    const int64_t pages = (context + pool.page_size - 1) / pool.page_size;
    for (int64_t j = 0; j < pages; ++j) {
      const int32_t page = b.block_tables[s * b.max_pages + j];
      if (page < 0 || page >= pool.num_pages) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "PagedAttention: sequence %d block %d is page %d, outside the pool's %d", s, j, page,
            pool.num_pages));
      }
    }
  }
  return absl::OkStatus();
}

// Four running sums: independent chains, and a fixed order of operations.
float Dot(const float* a, const float* b, int64_t n) {
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

#if defined(__x86_64__)

// e^x for x <= 0 (softmax's shifted scores), eight at a time: x = n ln2 + r
// with |r| <= ln2 / 2 (ln2 in two parts), e^r by its Taylor polynomial of
// degree 6 (error under 2e-7 relative), 2^n through the exponent bits; 0
// below -87.3, where e^x leaves f32's normal range (and for -inf).
KILN_AVX2 inline __m256 ExpNonPositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 xc = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  for (float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) {
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  }
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(two_n)), _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
}

// One (token, head) of PagedAttention with eight lanes (head_dim a multiple
// of 8): scores by FMAs over the head's elements, their exponentials eight
// positions at a time, then the weighted sum of V rows 64 elements at a time.
template <class RowOf>
KILN_AVX2 void AttendOneAvx2(const float* q, const float* keys, const float* values, const RowOf& row_of,
                             int64_t n, int64_t d, float scale, float* scores, float* o) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys + row_of(j);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= d; c += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(k + c), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8), _mm256_loadu_ps(k + c + 8), a1);
    }
    if (c < d) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(k + c), a0);
    scores[j] = avx2::HorizontalSum(_mm256_add_ps(a0, a1)) * scale;
    max = std::max(max, scores[j]);
  }
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmax));
    _mm256_storeu_ps(scores + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  if (j < n) {
    alignas(32) float tail[8];
    for (int i = 0; i < 8; ++i) tail[i] = j + i < n ? scores[j + i] : -std::numeric_limits<float>::infinity();
    const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_load_ps(tail), vmax));
    _mm256_store_ps(tail, e);
    for (int64_t i = 0; j + i < n; ++i) scores[j + i] = tail[i];
    vsum = _mm256_add_ps(vsum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / avx2::HorizontalSum(vsum));
  for (int64_t c0 = 0; c0 < d; c0 += 64) {
    const int vecs = static_cast<int>(std::min<int64_t>(64, d - c0) / 8);
    __m256 acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t p = 0; p < n; ++p) {
      const float* v = values + row_of(p) + c0;
      const __m256 e = _mm256_set1_ps(scores[p]);
      for (int i = 0; i < vecs; ++i) acc[i] = _mm256_fmadd_ps(e, _mm256_loadu_ps(v + 8 * i), acc[i]);
    }
    for (int i = 0; i < vecs; ++i) _mm256_storeu_ps(o + c0 + 8 * i, _mm256_mul_ps(acc[i], inv));
  }
}

#define KILN_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl")))

// ExpNonPositive on sixteen lanes.
KILN_AVX512 inline __m512 ExpNonPositive16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __m512 xc = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  for (float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) {
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  }
  const __m512i two_n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), _mm512_mul_ps(p, _mm512_castsi512_ps(two_n)));
}

// Up to kPassHeads heads' weighted sums of V a pass, kVecs x 16 elements
// from element c0: their accumulators stay in registers while each V row is
// read once for all of them.
constexpr int kPassHeads = 6;
// The most heads one call of AttendHeadsAvx512 takes.
constexpr int64_t kMaxItemHeads = 64;

template <int kVecs, class RowOf>
KILN_AVX512 void WeightedValues(const float* values, const RowOf& row_of, int64_t n, int64_t c0, const float* p,
                                int64_t p_stride, int heads, const float* inv, float* o, int64_t o_stride) {
  __m512 acc[kPassHeads][kVecs];
  for (int g = 0; g < kPassHeads; ++g) {
    for (int c = 0; c < kVecs; ++c) acc[g][c] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* v = values + row_of(j) + c0;
    __m512 vv[kVecs];
    for (int c = 0; c < kVecs; ++c) vv[c] = _mm512_loadu_ps(v + 16 * c);
    for (int g = 0; g < kPassHeads; ++g) {
      if (g >= heads) break;
      const __m512 e = _mm512_set1_ps(p[g * p_stride + j]);
      for (int c = 0; c < kVecs; ++c) acc[g][c] = _mm512_fmadd_ps(e, vv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < heads; ++g) {
    for (int c = 0; c < kVecs; ++c) {
      _mm512_storeu_ps(o + g * o_stride + c0 + 16 * c, _mm512_mul_ps(acc[g][c], _mm512_set1_ps(inv[g])));
    }
  }
}

// `heads` query heads of one token that share a kv head (q and o: head h at
// h * d), each over the same n positions, with sixteen lanes (head_dim a
// multiple of 16). Scores sixteen positions at a time (a dot product's
// lanes summed by LaneSums16; positions past n read row n - 1 and are
// dropped), each block of K rows read from cache once for every head; then
// each head's exponentials; then V rows read once a pass for up to
// kPassHeads heads. A head's operations do not depend on which heads share
// its item, so results do not depend on the thread count.
template <class RowOf>
KILN_AVX512 void AttendHeadsAvx512(const float* q, int64_t heads, const float* keys, const float* values,
                                   const RowOf& row_of, int64_t n, int64_t d, float scale, float* scores, float* o) {
  const int64_t n16 = (n + 15) / 16 * 16;
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < n16; j0 += 16) {
    const float* k[16];
    for (int i = 0; i < 16; ++i) k[i] = keys + row_of(std::min<int64_t>(j0 + i, n - 1));
    for (int64_t h = 0; h < heads; ++h) {
      __m512 acc[16];
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
      for (int64_t c = 0; c < d; c += 16) {
        const __m512 qv = _mm512_loadu_ps(q + h * d + c);
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[i] + c), acc[i]);
      }
      _mm512_storeu_ps(scores + h * n16 + j0, _mm512_mul_ps(LaneSums16(acc), vscale));
    }
  }
  float inv[kMaxItemHeads];
  const __mmask16 tail = static_cast<__mmask16>(n16 == n ? 0xFFFF : (1u << (n % 16)) - 1);
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores + h * n16;
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    _mm512_storeu_ps(s + n16 - 16, _mm512_mask_mov_ps(neg_inf, tail, _mm512_loadu_ps(s + n16 - 16)));
    __m512 vmax = neg_inf;
    for (int64_t j = 0; j < n16; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n16; j += 16) {
      const __m512 e = ExpNonPositive16(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
      _mm512_storeu_ps(s + j, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    inv[h] = 1.0f / _mm512_reduce_add_ps(vsum);
  }
  for (int64_t h0 = 0; h0 < heads; h0 += kPassHeads) {
    const int pass = static_cast<int>(std::min<int64_t>(kPassHeads, heads - h0));
    const float* p = scores + h0 * n16;
    for (int64_t c0 = 0; c0 < d; c0 += 64) {
      float* oh = o + h0 * d;
      switch (std::min<int64_t>(64, d - c0) / 16) {
        case 4:
          WeightedValues<4>(values, row_of, n, c0, p, n16, pass, inv + h0, oh, d);
          break;
        case 3:
          WeightedValues<3>(values, row_of, n, c0, p, n16, pass, inv + h0, oh, d);
          break;
        case 2:
          WeightedValues<2>(values, row_of, n, c0, p, n16, pass, inv + h0, oh, d);
          break;
        default:
          WeightedValues<1>(values, row_of, n, c0, p, n16, pass, inv + h0, oh, d);
          break;
      }
    }
  }
}

#endif  // __x86_64__

}  // namespace

absl::Status PagedAttention(const AttentionBatch& b, const AttentionParams& p, const PagePool& pool,
                            float* out, ThreadPool& threads) {
  if (absl::Status st = Validate(b, p, pool); !st.ok()) return st;
  const int64_t d = pool.head_dim;
  const int64_t kv_width = pool.kv_heads * d;
  const int64_t q_width = p.num_heads * d;
  const int64_t group = p.num_heads / pool.kv_heads;

  // The sequence of each token, and the longest context a query reads.
  std::vector<int32_t> seq_of(static_cast<size_t>(b.tokens));
  int64_t longest = 0;
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    for (int64_t i = b.query_starts[s]; i < b.query_starts[s + 1]; ++i) {
      seq_of[i] = static_cast<int32_t>(s);
      longest = std::max<int64_t>(longest, b.positions[i] + 1);
    }
  }

  // K row offset of position pos of sequence s in this layer; V is half_elements() on.
  auto row_of = [&](int64_t s, int64_t pos) {
    const int32_t page = b.block_tables[s * b.max_pages + pos / pool.page_size];
    return pool.KOffset(p.layer, page, pos % pool.page_size);
  };
  const float* keys = pool.data;
  const float* values = pool.data + pool.half_elements();

  for (int64_t i = 0; i < b.tokens; ++i) {
    const int64_t row = row_of(seq_of[i], b.positions[i]);
    std::copy_n(b.k + i * kv_width, kv_width, pool.data + row);
    std::copy_n(b.v + i * kv_width, kv_width, pool.data + row + pool.half_elements());
  }

#if defined(__x86_64__)
  // Eight lanes where the CPU has AVX2 and a head is whole vectors.
  const bool avx2 = DetectCpuIsa() == CpuIsa::kAvx2 && d % 8 == 0;
  // Sixteen, the heads of a kv head together, where it has AVX-512 and a head
  // is whole 16-lane vectors.
  static const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  if (avx2 && has_avx512 && d % 16 == 0) {
    // An item is (token, kv head, a run of its query heads): all `group`
    // heads where there are enough items for the threads, else fewer.
    const int64_t units = b.tokens * pool.kv_heads;
    const int64_t splits = std::max<int64_t>(1, (2 * threads.num_threads() + units - 1) / std::max<int64_t>(units, 1));
    const int64_t per_item = std::min(kMaxItemHeads, std::max<int64_t>(1, (group + splits - 1) / splits));
    const int64_t runs = (group + per_item - 1) / per_item;
    threads.ParallelFor(units * runs, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores;
      scores.resize(static_cast<size_t>(per_item * ((longest + 15) / 16 * 16)));
      for (int64_t item = begin; item < end; ++item) {
        const int64_t i = item / (pool.kv_heads * runs), kvh = item / runs % pool.kv_heads, run = item % runs;
        const int64_t h0 = kvh * group + run * per_item, heads = std::min(per_item, group - run * per_item);
        const int64_t s = seq_of[i], kv_offset = kvh * d;
        AttendHeadsAvx512(b.q + i * q_width + h0 * d, heads, keys, values,
                          [&](int64_t j) { return row_of(s, j) + kv_offset; }, b.positions[i] + 1, d, p.scale,
                          scores.data(), out + i * q_width + h0 * d);
      }
    });
    return absl::OkStatus();
  }
#endif
  threads.ParallelFor(b.tokens * p.num_heads, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(longest));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / p.num_heads, h = item % p.num_heads;
      const int64_t s = seq_of[i];
      const int64_t kv_offset = (h / group) * d;
      const float* q = b.q + i * q_width + h * d;
      const int64_t n = b.positions[i] + 1;
#if defined(__x86_64__)
      if (avx2) {
        AttendOneAvx2(q, keys, values, [&](int64_t j) { return row_of(s, j) + kv_offset; }, n, d, p.scale,
                      scores.data(), out + i * q_width + h * d);
        continue;
      }
#endif
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        scores[j] = Dot(q, keys + row_of(s, j) + kv_offset, d) * p.scale;
        max = std::max(max, scores[j]);
      }
      float* o = out + i * q_width + h * d;
      std::fill(o, o + d, 0.0f);
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float e = std::exp(scores[j] - max);
        sum += e;
        const float* v = values + row_of(s, j) + kv_offset;
        for (int64_t c = 0; c < d; ++c) o[c] += e * v[c];
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < d; ++c) o[c] *= inv;
    }
  });
  return absl::OkStatus();
}

}  // namespace kiln::cpu

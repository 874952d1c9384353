#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/cpu/cpu_isa.h"

#if defined(__x86_64__)
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

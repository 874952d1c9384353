#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/cpu/cpu_isa.h"
#include "runtime/util/half.h"

#if defined(__x86_64__)
#include "runtime/cpu/lane_sums_avx512.h"
#include "runtime/cpu/row_dot_avx2.h"
#endif

namespace kiln::cpu {
namespace {

absl::Status Validate(const AttentionBatch& b, const AttentionParams& p, const PagePool& pool) {
  if ((pool.data == nullptr) == (pool.data_f16 == nullptr)) {
    return absl::InvalidArgumentError("PagedAttention: the page pool needs exactly one of f32 and f16 data");
  }
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

inline float ToF32(float x) { return x; }
inline float ToF32(uint16_t x) { return F16ToF32(x); }

// Four running sums: independent chains, and a fixed order of operations.
template <class T>
float Dot(const float* a, const T* b, int64_t n) {
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * ToF32(b[i + j]);
  }
  for (; i < n; ++i) s[0] += a[i] * ToF32(b[i]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

#if defined(__x86_64__)

// Eight elements of a K or V row as floats.
KILN_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
KILN_AVX2 inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

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

// Lane m of the result is the sum of v[m]'s eight lanes, for m < 8: the
// eight sums with 22 operations instead of 8 x 6.
KILN_AVX2 inline __m256 LaneSums8(const __m256* v) {
  __m256 a[4], b[2];
  for (int i = 0; i < 4; ++i) {  // 128-bit lane 0: v[2i]'s l + l+4; lane 1: v[2i+1]'s
    a[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
  }
  for (int i = 0; i < 2; ++i) {  // lane h: v[4i + h]'s two partials, then v[4i + 2 + h]'s
    b[i] = _mm256_add_ps(_mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Lane 4h + m holds v[2m + h]'s sum.
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The eight-lane heads' weighted sums of V: up to 4 heads a pass, kVecs x 8
// elements from c0 (16 registers: 4 x 2 accumulators, the V row, the weight).
constexpr int kPassHeads8 = 4;

template <int kVecs, class T, class RowOf>
KILN_AVX2 void WeightedValuesAvx2(const T* values, const RowOf& row_of, int64_t n, int64_t c0, const float* p,
                                  int64_t p_stride, int heads, const float* inv, float* o, int64_t o_stride) {
  __m256 acc[kPassHeads8][kVecs];
  for (int g = 0; g < kPassHeads8; ++g) {
    for (int c = 0; c < kVecs; ++c) acc[g][c] = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* v = values + row_of(j) + c0;
    __m256 vv[kVecs];
    for (int c = 0; c < kVecs; ++c) vv[c] = Load8(v + 8 * c);
    for (int g = 0; g < kPassHeads8; ++g) {
      if (g >= heads) break;
      const __m256 e = _mm256_set1_ps(p[g * p_stride + j]);
      for (int c = 0; c < kVecs; ++c) acc[g][c] = _mm256_fmadd_ps(e, vv[c], acc[g][c]);
    }
  }
  for (int g = 0; g < heads; ++g) {
    for (int c = 0; c < kVecs; ++c) {
      _mm256_storeu_ps(o + g * o_stride + c0 + 8 * c, _mm256_mul_ps(acc[g][c], _mm256_set1_ps(inv[g])));
    }
  }
}

// As AttendHeadsAvx512 (below) on eight lanes (head_dim a multiple of 8):
// scores eight positions at a time, each block of K rows read once for
// every head; V rows once a pass for up to kPassHeads8 heads.
template <class T, class RowOf>
KILN_AVX2 void AttendHeadsAvx2(const float* q, int64_t heads, const T* keys, const T* values, const RowOf& row_of,
                               int64_t n, int64_t d, float scale, float* scores, float* inv, float* o) {
  const int64_t n8 = (n + 7) / 8 * 8;
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t j0 = 0; j0 < n8; j0 += 8) {
    const T* k[8];
    for (int i = 0; i < 8; ++i) k[i] = keys + row_of(std::min<int64_t>(j0 + i, n - 1));
    for (int64_t h = 0; h < heads; ++h) {
      __m256 acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
      for (int64_t c = 0; c < d; c += 8) {
        const __m256 qv = _mm256_loadu_ps(q + h * d + c);
        for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(qv, Load8(k[i] + c), acc[i]);
      }
      _mm256_storeu_ps(scores + h * n8 + j0, _mm256_mul_ps(LaneSums8(acc), vscale));
    }
  }
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores + h * n8;
    for (int64_t j = n; j < n8; ++j) s[j] = -std::numeric_limits<float>::infinity();
    __m256 vmax = neg_inf;
    for (int64_t j = 0; j < n8; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const __m256 m = _mm256_set1_ps(_mm_cvtss_f32(m4));
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t j = 0; j < n8; j += 8) {
      const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
      _mm256_storeu_ps(s + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    inv[h] = 1.0f / avx2::HorizontalSum(vsum);
  }
  for (int64_t h0 = 0; h0 < heads; h0 += kPassHeads8) {
    const int pass = static_cast<int>(std::min<int64_t>(kPassHeads8, heads - h0));
    for (int64_t c0 = 0; c0 < d; c0 += 16) {
      if (d - c0 >= 16) {
        WeightedValuesAvx2<2>(values, row_of, n, c0, scores + h0 * n8, n8, pass, inv + h0, o + h0 * d, d);
      } else {
        WeightedValuesAvx2<1>(values, row_of, n, c0, scores + h0 * n8, n8, pass, inv + h0, o + h0 * d, d);
      }
    }
  }
}

#define KILN_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl")))

// Sixteen elements of a K or V row as floats.
KILN_AVX512 inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
KILN_AVX512 inline __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

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

template <int kVecs, class T, class RowOf>
KILN_AVX512 void WeightedValues(const T* values, const RowOf& row_of, int64_t n, int64_t c0, const float* p,
                                int64_t p_stride, int heads, const float* inv, float* o, int64_t o_stride) {
  __m512 acc[kPassHeads][kVecs];
  for (int g = 0; g < kPassHeads; ++g) {
    for (int c = 0; c < kVecs; ++c) acc[g][c] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < n; ++j) {
    const T* v = values + row_of(j) + c0;
    __m512 vv[kVecs];
    for (int c = 0; c < kVecs; ++c) vv[c] = Load16(v + 16 * c);
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
template <class T, class RowOf>
KILN_AVX512 void AttendHeadsAvx512(const float* q, int64_t heads, const T* keys, const T* values, const RowOf& row_of,
                                   int64_t n, int64_t d, float scale, float* scores, float* inv, float* o) {
  const int64_t n16 = (n + 15) / 16 * 16;
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < n16; j0 += 16) {
    const T* k[16];
    for (int i = 0; i < 16; ++i) k[i] = keys + row_of(std::min<int64_t>(j0 + i, n - 1));
    for (int64_t h = 0; h < heads; ++h) {
      __m512 acc[16];
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
      for (int64_t c = 0; c < d; c += 16) {
        const __m512 qv = _mm512_loadu_ps(q + h * d + c);
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(qv, Load16(k[i] + c), acc[i]);
      }
      _mm512_storeu_ps(scores + h * n16 + j0, _mm512_mul_ps(LaneSums16(acc), vscale));
    }
  }
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

// PagedAttention over the pool's elements, `data` (float or uint16_t halves).
template <class T>
void AttendAll(const AttentionBatch& b, const AttentionParams& p, const PagePool& pool, T* data, float* out,
               ThreadPool& threads) {
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
  const T* keys = data;
  const T* values = data + pool.half_elements();

  for (int64_t i = 0; i < b.tokens; ++i) {
    const int64_t row = row_of(seq_of[i], b.positions[i]);
    if constexpr (std::is_same_v<T, float>) {
      std::copy_n(b.k + i * kv_width, kv_width, data + row);
      std::copy_n(b.v + i * kv_width, kv_width, data + row + pool.half_elements());
    } else {
      std::transform(b.k + i * kv_width, b.k + (i + 1) * kv_width, data + row, F32ToF16);
      std::transform(b.v + i * kv_width, b.v + (i + 1) * kv_width, data + row + pool.half_elements(), F32ToF16);
    }
  }

#if defined(__x86_64__)
  // Sixteen lanes where the CPU has AVX-512 and a head is whole 16-lane
  // vectors, else eight where it has AVX2 and a head is whole 8-lane ones.
  static const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const int64_t lanes = DetectCpuIsa() != CpuIsa::kAvx2 ? 0 : has_avx512 && d % 16 == 0 ? 16 : d % 8 == 0 ? 8 : 0;
  if (lanes != 0) {
    // An item is (token, kv head, a run of its query heads): all `group`
    // heads where there are enough items for the threads, else fewer. A
    // head's operations do not depend on which heads share its item.
    const int64_t units = b.tokens * pool.kv_heads;
    const int64_t splits = std::max<int64_t>(1, (2 * threads.num_threads() + units - 1) / std::max<int64_t>(units, 1));
    const int64_t per_item = std::max<int64_t>(1, (group + splits - 1) / splits);
    const int64_t runs = (group + per_item - 1) / per_item;
    const int64_t padded = (longest + lanes - 1) / lanes * lanes;
    threads.ParallelFor(units * runs, 1, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scores, inv;
      scores.resize(static_cast<size_t>(per_item * padded));
      inv.resize(static_cast<size_t>(per_item));
      for (int64_t item = begin; item < end; ++item) {
        const int64_t i = item / (pool.kv_heads * runs), kvh = item / runs % pool.kv_heads, run = item % runs;
        const int64_t h0 = kvh * group + run * per_item, heads = std::min(per_item, group - run * per_item);
        const int64_t s = seq_of[i], kv_offset = kvh * d;
        const auto row = [&](int64_t j) { return row_of(s, j) + kv_offset; };
        const float* q = b.q + i * q_width + h0 * d;
        float* o = out + i * q_width + h0 * d;
        if (lanes == 16) {
          AttendHeadsAvx512(q, heads, keys, values, row, b.positions[i] + 1, d, p.scale, scores.data(), inv.data(), o);
        } else {
          AttendHeadsAvx2(q, heads, keys, values, row, b.positions[i] + 1, d, p.scale, scores.data(), inv.data(), o);
        }
      }
    });
    return;
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
        const T* v = values + row_of(s, j) + kv_offset;
        for (int64_t c = 0; c < d; ++c) o[c] += e * ToF32(v[c]);
      }
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < d; ++c) o[c] *= inv;
    }
  });
}

}  // namespace

absl::Status PagedAttention(const AttentionBatch& b, const AttentionParams& p, const PagePool& pool, float* out,
                            ThreadPool& threads) {
  if (absl::Status st = Validate(b, p, pool); !st.ok()) return st;
  if (pool.data_f16 != nullptr) {
    AttendAll(b, p, pool, pool.data_f16, out, threads);
  } else {
    AttendAll(b, p, pool, pool.data, out, threads);
  }
  return absl::OkStatus();
}

}  // namespace kiln::cpu

#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"

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

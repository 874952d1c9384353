// Causal grouped-query attention over a paged f32 or f16 KV cache, for a ragged
// batch (kiln.paged_attention): S sequences, T tokens in all, the tokens of
// sequence s being query_starts[s] .. query_starts[s + 1] - 1.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/cpu/thread_pool.h"

namespace kiln::cpu {

// The KV cache of every layer: one f32 (or f16) array holding, per layer,
// the keys of every page and then the values of every page:
//   data[layer][0 = K, 1 = V][page][slot][kv_head][head_dim]  (row-major).
// Position p of a sequence with block table bt lives at page bt[p / page_size],
// slot p % page_size; one token's K (or V) for all kv heads is one contiguous
// row of kv_heads * head_dim elements, so appending a token is two row copies
// (rounded to nearest even in f16).
struct PagePool {
  float* data = nullptr;         // elements() floats, or
  uint16_t* data_f16 = nullptr;  // elements() halves: exactly one of the two is set
  int64_t layers = 0;
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  int64_t row_width() const { return kv_heads * head_dim; }
  // Elements of the K (or V) half of one layer.
  int64_t half_elements() const { return num_pages * page_size * row_width(); }
  int64_t elements() const { return layers * 2 * half_elements(); }
  // Offsets (in elements) of the K and V rows of (layer, page, slot).
  int64_t KOffset(int64_t layer, int64_t page, int64_t slot) const {
    return 2 * layer * half_elements() + (page * page_size + slot) * row_width();
  }
  int64_t VOffset(int64_t layer, int64_t page, int64_t slot) const {
    return KOffset(layer, page, slot) + half_elements();
  }
};

struct AttentionBatch {
  const float* q = nullptr;  // [tokens, num_heads * head_dim]
  const float* k = nullptr;  // [tokens, kv_heads * head_dim]: this step's keys
  const float* v = nullptr;  // [tokens, kv_heads * head_dim]: this step's values
  int64_t tokens = 0;
  const int32_t* positions = nullptr;  // [tokens]: position of each token in its sequence
  int64_t num_seqs = 0;
  const int32_t* query_starts = nullptr;  // [num_seqs + 1]: 0 = first <= ... <= last = tokens
  const int32_t* context_lens = nullptr;  // [num_seqs]: positions cached after this step
  const int32_t* block_tables = nullptr;  // [num_seqs, max_pages]: page ids
  int64_t max_pages = 0;
};

struct AttentionParams {
  int64_t layer = 0;
  int64_t num_heads = 0;  // query heads; a multiple of the pool's kv_heads
  float scale = 1.0f;     // applied to q·k (usually 1 / sqrt(head_dim))
};

// First writes each token's k and v rows into the pool at its position (so a
// prefill chunk sees its own earlier tokens), then for every token t at
// position p of sequence s and every query head h computes
//   out[t, h] = sum_{j <= p} softmax_j(scale * q[t, h] · K_s[j, h / group]) V_s[j, h / group]
// with group = num_heads / kv_heads: causal attention over positions 0..p of
// the sequence, cached or just written (so in f16 a token's own K and V are
// read back rounded, as later steps read them). Two passes in f32 (scores, then
// exp-weighted sum of V) per (token, head), the heads of one kv head taken
// together (each K and V row read once for all of them; 16 lanes with
// AVX-512, 8 with AVX2), spread over the thread pool; a (token, head)'s
// result depends neither on the thread count nor on the other tokens. out: [tokens, num_heads *
// head_dim], not aliasing q.
//
// Errors (nothing is written): layer or head counts out of range,
// query_starts not running from 0 to tokens without decreasing, a position
// outside [0, context_lens[s]), a context longer than max_pages pages, or a
// page id that the context needs outside [0, num_pages).
absl::Status PagedAttention(const AttentionBatch& batch, const AttentionParams& params,
                            const PagePool& pool, float* out, ThreadPool& threads);

}  // namespace kiln::cpu

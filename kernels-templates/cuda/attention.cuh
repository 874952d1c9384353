// Paged attention over the KV page pool, f32 or f16 (the Kv parameter:
// KvF32, KvF16). kv_append writes this step's k (rotated when the launch
// carries rope constants) and v rows into their pages; attention_kernel<kD,
// Kv> then runs causal grouped-query attention for every (token, query
// head, context slice) of buckets under AttentionGroupMinBucket tokens
// (attention_group.cuh takes the larger ones). A block of kAttnWarps warps
// serves one slice; the warps take kAttnPositions positions of it at a time,
// loading their K and V rows together (each lane a 32-strided share of the
// dims, runs of four in f16, so every row is read coalesced), scoring them with warp sums and
// folding them into per-warp online-softmax states that the block merges.
// With one slice the block writes the output; with several (decode: few
// tokens, long contexts) each writes a partial state, and the last slice of
// a (token, head) to finish (an atomic count) merges them: no combine launch.
// Steps with no prefill tiles (p.append) need no kv_append launch either:
// attention_kernel reads the rows of this step's positions from k and v and
// writes each token's row to the pool for the steps after; it reads those
// rows rounded as the pool holds them, so a step's result does not depend
// on which of the two kernels appended.
#pragma once

#include "common.cuh"
#include "matmul.cuh"
#include "storage.cuh"

namespace kiln {

// The pool's element types: an element as a float, a float as an element,
// and a float rounded as the pool would hold it.
struct KvF32 {
  using Elem = float;
  __device__ static float Load(const float* p) { return *p; }
  __device__ static float From(float x) { return x; }
  __device__ static float Round(float x) { return x; }
};
struct KvF16 {
  using Elem = unsigned short;  // the half's bits
  __device__ static float Load(const unsigned short* p) { return HalfToFloat(*p); }
  __device__ static void Load4(const unsigned short* p, float* out) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    out[0] = HalfToFloat(static_cast<unsigned short>(v.x & 0xFFFFu));
    out[1] = HalfToFloat(static_cast<unsigned short>(v.x >> 16));
    out[2] = HalfToFloat(static_cast<unsigned short>(v.y & 0xFFFFu));
    out[3] = HalfToFloat(static_cast<unsigned short>(v.y >> 16));
  }
  __device__ static unsigned short From(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
  }
  __device__ static float Round(float x) { return HalfToFloat(From(x)); }
};

constexpr int kAttnWarps = 4;
// Positions a warp takes at a time: their K and V rows are loaded together
// (all in flight), then scored and folded into the warp's softmax state.
constexpr int kAttnPositions = 4;
// The smallest context slice a block takes (two steps per warp).
constexpr int kMinSlice = 2 * kAttnPositions * kAttnWarps;

template <class Kv>
__device__ __forceinline__ typename Kv::Elem* PoolRow(const PagePoolView& pool, int layer, int v_half, int page,
                                                      int slot) {
  const long long row = static_cast<long long>(pool.kv_heads) * pool.head_dim;
  const long long half = pool.num_pages * pool.page_size * row;
  return static_cast<typename Kv::Elem*>(pool.data) + (2LL * layer + v_half) * half +
         (static_cast<long long>(page) * pool.page_size + slot) * row;
}

// Positions per slice for a context of n: at least kMinSlice, 32-aligned.
__device__ __forceinline__ int SliceOf(int n, int splits) {
  const int even = (n + splits - 1) / splits;
  return max(kMinSlice, (even + 31) / 32 * 32);
}

// Whether attention_prefill_kernel did tile `tile` (tokens
// kPrefillTileTokens * tile ..): it ran, and the tile lies in one sequence.
__device__ __forceinline__ bool PrefillTileDone(const AttentionParams& p, const StepCounts& counts, int tile) {
  const int first = kPrefillTileTokens * tile;
  if (!p.prefill_tiles || first >= counts.tokens) return false;
  const int last = min(first + kPrefillTileTokens, counts.tokens) - 1;
  return SequenceOf(p.query_starts, counts.seqs, first) == SequenceOf(p.query_starts, counts.seqs, last);
}

// A decode attention block's token t and context slice `split`, from the
// step's inputs alone (no launch writes them), so read before its wait.
struct TokenSlice {
  bool token;                     // t is a token this launch attends for (not past the step, not a prefill tile's)
  int pos, n, slice, begin, end;  // its position, its context n = pos + 1, the slices' length, this one's [begin, end)
  const int* table;               // its sequence's block table
  int q0, first_pos;              // the sequence's first token in the step, and its position (appending: else n)
};

__device__ __forceinline__ TokenSlice TokenSliceOf(const AttentionParams& p, int t, int split) {
  const StepCounts counts = *p.counts;
  TokenSlice r;
  r.token = t < counts.tokens && !PrefillTileDone(p, counts, t / kPrefillTileTokens);
  r.pos = r.token ? p.positions[t] : 0;
  r.n = r.pos + 1;
  r.slice = SliceOf(r.n, p.splits);
  r.begin = split * r.slice;
  r.end = min(r.n, r.begin + r.slice);
  const int s = r.token ? SequenceOf(p.query_starts, counts.seqs, t) : 0;
  r.table = p.block_tables + static_cast<long long>(s) * p.pages_stride;
  r.q0 = r.token ? p.query_starts[s] : 0;
  r.first_pos = p.append && r.token ? p.positions[r.q0] : r.n;
  return r;
}

// grid (bucket tokens, kv_heads): one block per token and KV head.
template <class Kv>
__global__ void __launch_bounds__(128) kv_append_kernel(AttentionParams p) {
  WaitForPrevious();
  const int t = blockIdx.x, kvh = blockIdx.y;
  const StepCounts counts = *p.counts;
  if (t >= counts.tokens) return;
  const int s = SequenceOf(p.query_starts, counts.seqs, t);
  const int pos = p.positions[t];
  const int page = p.block_tables[static_cast<long long>(s) * p.pages_stride + pos / p.pool.page_size];
  const int slot = pos % p.pool.page_size;
  const int hd = p.pool.head_dim, width = p.pool.kv_heads * hd;
  typename Kv::Elem* krow = PoolRow<Kv>(p.pool, p.layer, 0, page, slot);
  typename Kv::Elem* vrow = PoolRow<Kv>(p.pool, p.layer, 1, page, slot);
  const float* k = p.k + static_cast<long long>(t) * width + kvh * hd;
  const float* v = p.v + static_cast<long long>(t) * width + kvh * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    const float kd = p.use_rope ? RopeElement(p.rope, k, d, pos) : k[d];
    const float vd = v[d];
    krow[kvh * hd + d] = Kv::From(kd);
    vrow[kvh * hd + d] = Kv::From(vd);
  }
}

// Steps without prefill tiles: asks L2 for the K and V rows from earlier
// steps (before `first_pos`) that this warp reads first, before
// attention_kernel waits for the launch before it (which writes only this
// step's rows). A lane a 128-byte line: 4 positions x (K, V) x up to 4
// lines of a row (4 of a 128-float row, 2 of a 128-half one).
template <int kD, class Kv>
__device__ __forceinline__ void PrefetchFirstRows(const AttentionParams& p, const int* table, int kv_head, int begin,
                                                  int end, int first_pos) {
  constexpr int kLine = 128 / sizeof(typename Kv::Elem);  // elements a line
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int u = lane / 8, piece = lane % 8;
  const int j = begin + kAttnPositions * warp + u;
  if (!p.append || (piece % 4) * kLine >= kD || j >= min(first_pos, end)) return;
  const int page = table[j / p.pool.page_size];
  PrefetchL2(PoolRow<Kv>(p.pool, p.layer, piece / 4, page, j % p.pool.page_size) + kv_head * kD +
             (piece % 4) * kLine);
}

// A one-token step's merged head (outputs `first` .. of o's input, dim
// threadIdx.x in `mine`) staged into p.stage_image as o's blocks would stage
// it (StageInt8: eight lanes a 32-element group, four consecutive dims
// each), so that each of them copies it rather than every block quantising
// the whole input again.
__device__ __forceinline__ void StageMergedHead(const AttentionParams& p, int first, float mine) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = __shfl_sync(0xffffffffu, mine, (4 * lane + j) % 32);
  const int k = p.num_heads * kAttentionStagedHeadDim, xstride = MatmulPaddedLen(k);
  // Lanes 8.. hold copies and store nothing (a length of 0).
  StageInt8(v, first + 32 * warp + 4 * lane, lane < 8 ? k : 0, p.stage_image, xstride, p.stage_image + xstride);
}

// The last of a (token, head)'s `used` context slices to finish merges
// their partial states (partials, natural-log maxima) into y, and stages
// o's input where the launch asks (one thread a dim).
template <int kD>
__device__ __forceinline__ void MergeSlices(const AttentionParams& p, long long th, int h, int used) {
  // Every slice's (max, sum) and this thread's first output dim loaded at
  // once: one round trip to L2, not one per pass.
  const float* parts = p.partials + th * p.splits * (kD + 2);
  float ms[kDecodeSplits], ls[kDecodeSplits], os[kDecodeSplits];
  const int d0 = threadIdx.x;
#pragma unroll
  for (int sp = 0; sp < kDecodeSplits; ++sp) {
    const bool in = sp < used;
    ms[sp] = in ? __ldcg(parts + sp * (kD + 2)) : -__int_as_float(0x7f800000);
    ls[sp] = in ? __ldcg(parts + sp * (kD + 2) + 1) : 0.0f;
    os[sp] = in && d0 < kD ? __ldcg(parts + sp * (kD + 2) + 2 + d0) : 0.0f;
  }
  float m_merged = ms[0];
#pragma unroll
  for (int sp = 1; sp < kDecodeSplits; ++sp) m_merged = fmaxf(m_merged, ms[sp]);
  float weight[kDecodeSplits], l_merged = 0.0f;
#pragma unroll
  for (int sp = 0; sp < kDecodeSplits; ++sp) {
    weight[sp] = sp < used ? expf(ms[sp] - m_merged) : 0.0f;
    l_merged += ls[sp] * weight[sp];
  }
  float* y = p.y + th * kD;
  float mine = 0.0f;  // output dim d0
  for (int d = d0; d < kD; d += blockDim.x) {
    float acc = 0.0f;
#pragma unroll
    for (int sp = 0; sp < kDecodeSplits; ++sp) {
      const float o = d == d0 ? os[sp] : sp < used ? __ldcg(parts + sp * (kD + 2) + 2 + d) : 0.0f;
      acc = fmaf(o, weight[sp], acc);
    }
    const float out = acc / l_merged;
    y[d] = out;
    if (d == d0) mine = out;
  }
  if constexpr (kD == kAttentionStagedHeadDim && kD == 32 * kAttnWarps) {
    if (p.stage_image != nullptr) StageMergedHead(p, h * kD, mine);
  }
}

// grid (bucket tokens, num_heads, splits), kAttnWarps warps.
template <int kD, class Kv>
__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(AttentionParams p) {
  // The step's inputs (counts, positions, query starts, block tables) are
  // read before the wait: the graph's first launch waited for them, and
  // after the wait they were a chain of dependent loads on the step's path.
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = h / (p.num_heads / p.pool.kv_heads);
  const int page_size = p.pool.page_size;
  const auto [token, pos, n, slice, begin, end, table, q0, first_pos] = TokenSliceOf(p, t, split);
  if (token && begin < n) PrefetchFirstRows<kD, Kv>(p, table, kv_head, begin, end, first_pos);
  WaitForPrevious();
  if (!token || begin >= n) return;  // empty slices are not counted by the merge either

  __shared__ float q[kD];
  __shared__ float warp_m[kAttnWarps], warp_l[kAttnWarps];
  __shared__ float warp_o[kAttnWarps][kD];
  const float* qsrc = p.q + (static_cast<long long>(t) * p.num_heads + h) * kD;
  for (int d = threadIdx.x; d < kD; d += blockDim.x) {
    q[d] = (p.use_rope ? RopeElement(p.rope, qsrc, d, pos) : qsrc[d]) * p.scale;
  }
  // Steps without prefill tiles append their K/V rows here rather than in
  // kv_append: a sequence's positions of this step (first_pos .. pos, its
  // tokens q0 ..) are read from k/v (no block reads them from the pool this
  // step), and one block per token and KV head (the first query head's, the
  // slice holding pos) writes the token's row for the steps after.
  const float* ksrc = p.k + static_cast<long long>(t) * p.pool.kv_heads * kD + kv_head * kD;
  const float* vsrc = p.v + static_cast<long long>(t) * p.pool.kv_heads * kD + kv_head * kD;
  if (p.append && pos < end && h % (p.num_heads / p.pool.kv_heads) == 0) {
    const int page = table[pos / page_size], slot = pos % page_size;
    typename Kv::Elem* krow = PoolRow<Kv>(p.pool, p.layer, 0, page, slot) + kv_head * kD;
    typename Kv::Elem* vrow = PoolRow<Kv>(p.pool, p.layer, 1, page, slot) + kv_head * kD;
    for (int d = threadIdx.x; d < kD; d += blockDim.x) {
      krow[d] = Kv::From(p.use_rope ? RopeElement(p.rope, ksrc, d, pos) : ksrc[d]);
      vrow[d] = Kv::From(vsrc[d]);
    }
  }
  __syncthreads();

  // The layer's K and V rows of this KV head: row r at k_base + r x
  // row_stride (r = page x page_size + slot), V half a pool further. A
  // block's time is its warps' instruction count (ncu, session 16), so the
  // addresses are an offset from these per position, and a power-of-two
  // page size a shift, not a division.
  const long long row_stride = static_cast<long long>(p.pool.kv_heads) * kD;
  const long long half = static_cast<long long>(p.pool.num_pages) * page_size * row_stride;
  const typename Kv::Elem* k_base = static_cast<const typename Kv::Elem*>(p.pool.data) + 2LL * p.layer * half + kv_head * kD;
  const typename Kv::Elem* v_base = k_base + half;
  const bool page_pow2 = (page_size & (page_size - 1)) == 0;
  const int page_shift = __ffs(page_size) - 1;

  // Lane owns runs of kVec dims, lane kVec + 32 kVec c (c a chunk): element
  // g of a lane is dim Dim(g). In f16 a run is four dims, one 8-byte load a
  // lane (H100, 16 sequences at 512 positions: 6.31 ms a step against 6.44
  // with a load a dim); in f32 one dim (coalesced 128 bytes a warp), as
  // float4 runs were 1% slower there.
  constexpr int kVec = sizeof(typename Kv::Elem) == 2 && kD % 4 == 0 ? 4 : 1;
  constexpr int kChunks = (kD + 32 * kVec - 1) / (32 * kVec), kGroups = kChunks * kVec;
  auto Dim = [&](int g) { return (g / kVec) * 32 * kVec + lane * kVec + g % kVec; };
  float qr[kGroups], o[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int d = Dim(g);
    qr[g] = d < kD ? q[d] : 0.0f;
    o[g] = 0.0f;
  }
  float m = -__int_as_float(0x7f800000), l = 0.0f;
  for (int j0 = begin + kAttnPositions * warp; j0 < end; j0 += kAttnPositions * kAttnWarps) {
    float kr[kAttnPositions][kGroups], vr[kAttnPositions][kGroups];
#pragma unroll
    for (int u = 0; u < kAttnPositions; ++u) {
      const int j = min(j0 + u, end - 1);  // past the end: a copy of the last row, weighted 0 below
      const int page_index = page_pow2 ? j >> page_shift : j / page_size;
      const int page = table[page_index], slot = j - page_index * page_size;
      const long long row = static_cast<long long>(page * page_size + slot) * row_stride;
      const typename Kv::Elem* krow = k_base + row;
      const typename Kv::Elem* vrow = v_base + row;
      if (j >= first_pos) {  // a row of this step, from k/v, as the pool holds it (uniform per warp)
        const long long tj = q0 + (j - first_pos);
        const float* kj = p.k + tj * p.pool.kv_heads * kD + kv_head * kD;
        const float* vj = p.v + tj * p.pool.kv_heads * kD + kv_head * kD;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          const int d = Dim(g);
          kr[u][g] = d < kD ? Kv::Round(p.use_rope ? RopeElement(p.rope, kj, d, j) : kj[d]) : 0.0f;
          vr[u][g] = d < kD ? Kv::Round(vj[d]) : 0.0f;
        }
        continue;
      }
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = Dim(c * kVec);
        if (d >= kD) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) kr[u][c * kVec + e] = vr[u][c * kVec + e] = 0.0f;
        } else if constexpr (kVec == 4) {
          Kv::Load4(krow + d, &kr[u][c * kVec]);
          Kv::Load4(vrow + d, &vr[u][c * kVec]);
        } else {
          kr[u][c] = Kv::Load(krow + d);
          vr[u][c] = Kv::Load(vrow + d);
        }
      }
    }
    float score[kAttnPositions];
#pragma unroll
    for (int u = 0; u < kAttnPositions; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) dot = fmaf(qr[g], kr[u][g], dot);
      score[u] = WarpSum(dot);
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kAttnPositions; ++u) {
      if (j0 + u < end) m_new = fmaxf(m_new, score[u]);
    }
    const float correction = expf(m - m_new);
    float e[kAttnPositions];
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kAttnPositions; ++u) {
      e[u] = j0 + u < end ? expf(score[u] - m_new) : 0.0f;
      sum += e[u];
    }
    l = l * correction + sum;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float acc = o[g] * correction;
#pragma unroll
      for (int u = 0; u < kAttnPositions; ++u) acc = fmaf(e[u], vr[u][g], acc);
      o[g] = acc;
    }
    m = m_new;
  }
  LetNextLaunch();  // the block's K/V loads are done
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int d = Dim(g);
    if (d < kD) warp_o[warp][d] = o[g];
  }
  __syncthreads();
  float m_all = -__int_as_float(0x7f800000);
  for (int w = 0; w < kAttnWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  float scale_w[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    // A warp that saw no position has m = -inf and l = 0: weight 0.
    scale_w[w] = warp_l[w] > 0.0f ? expf(warp_m[w] - m_all) : 0.0f;
    l_all += warp_l[w] * scale_w[w];
  }
  if (p.splits == 1) {
    float* y = p.y + (static_cast<long long>(t) * p.num_heads + h) * kD;
    for (int d = threadIdx.x; d < kD; d += blockDim.x) {
      float acc = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) acc += warp_o[w][d] * scale_w[w];
      y[d] = acc / l_all;
    }
    return;
  }
  const long long th = static_cast<long long>(t) * p.num_heads + h;
  float* part = p.partials + (th * p.splits + split) * (kD + 2);
  if (threadIdx.x == 0) {
    part[0] = m_all;
    part[1] = l_all;
  }
  for (int d = threadIdx.x; d < kD; d += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) acc += warp_o[w][d] * scale_w[w];
    part[2 + d] = acc;
  }
  // The last slice to get here merges.
  const int used = (n + slice - 1) / slice;
  if (!LastBlockToCount(p.split_done + th, used)) return;
  MergeSlices<kD>(p, th, h, used);
}

}  // namespace kiln

// Weight-times-activation: y[t, n] = epilogue(sum_k norm(x)[t, k] W[n, k])
// for every storage, on CUDA cores. kTile 1 is the decode GEMV, kTile 2 the
// same for two sequences (q4_K, q8_0); larger tiles serve small buckets
// (verification, batched decode), the weights read once per tile of tokens.
// Each block stages its tokens' activations in shared memory once,
// RMS-normalised when the launch has the norm prologue (1/rms over the whole
// row first), a chunk of K at a time: as f32, or as int8 codes with per-32
// scales for the lanes that multiply with dp4a (q4_K, and q8_0's decode
// where K is a multiple of 256). Its warps then walk kRows weight
// rows each, a storage lane step (matmul_lanes.cuh) per iteration, with the
// loads of all rows issued before their arithmetic and two steps in flight
// where registers allow; decode launches of few row blocks split K between
// two warps per set of rows.
#pragma once

#include "common.cuh"
#include "matmul_lanes.cuh"

namespace kiln {

constexpr int kStageBatch = 4;  // runs of four activations a thread loads at once when staging

// a[i] without indexing the parameter arrays dynamically (which would copy
// the parameters to local memory).
template <class T>
__device__ __forceinline__ T Pick(const T (&a)[kMaxFusedWeights], int i) {
  return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
}

// Row `row` of the launch's weight `weight`, and of that weight's q4_K
// decode copy.
__device__ __forceinline__ const unsigned char* WeightRow(const MatmulParams& p, int weight, long long row) {
  return Pick(p.w, weight) + row * p.row_bytes;
}
__device__ __forceinline__ const unsigned char* TableRow(const MatmulParams& p, int weight, long long row) {
  return Pick(p.tables, weight) + row * Q4KTableRowBytes(p.k);
}

// Output row n of a launch (epilogue none: the rows of all its weights, in
// order): the weight it belongs to and its row there.
template <int kEpilogue>
__device__ __forceinline__ void WeightRowOf(const MatmulParams& p, int n, int* weight, int* row) {
  int wi = 0;
  if constexpr (kEpilogue == kEpilogueNone) {
    if (p.num_weights > 1 && n >= p.n[0]) {
      n -= p.n[0];
      wi = 1;
      if (p.num_weights > 2 && n >= p.n[1]) {
        n -= p.n[1];
        wi = 2;
      }
    }
  }
  *weight = wi;
  *row = n;
}

// Output `out` (a row of all the launch's weights) of `token` from its sum
// (and, for silu_mul, up's sum): the epilogue applied and stored. The
// tensor-core kernels' epilogues, which hold sums per (token, output).
template <int kEpilogue>
__device__ __forceinline__ void StoreOutput(const MatmulParams& p, int token, int out, float sum, float up_sum) {
  int wi, n;
  WeightRowOf<kEpilogue>(p, out, &wi, &n);
  const long long at = static_cast<long long>(token) * Pick(p.n, wi) + n;
  float v = sum;
  if constexpr (kEpilogue == kEpilogueSiluMul) v = Silu(sum) * up_sum;
  if constexpr (kEpilogue == kEpilogueResidualAdd) v = v + p.residual[at];
  Pick(p.y, wi)[at] = v;
}

// The weight row of tile row r of a tensor-core block whose outputs start
// at n0: output n0 + r, or for silu_mul (half the tile per weight) the gate
// row (r < kGemmN / 2) or the up row of output n0 + r % (kGemmN / 2).
// *ok: the row exists (if not, the pointer still names a row to copy zeros from).
template <int kEpilogue>
__device__ __forceinline__ const unsigned char* TileWeightBytes(const MatmulParams& p, int n0, int r, bool* ok) {
  constexpr bool kPair = kEpilogue == kEpilogueSiluMul;
  const int out = n0 + (kPair ? r % (kGemmN / 2) : r);
  *ok = out < p.total_n;
  int wi = 0, n = 0;
  if (*ok) WeightRowOf<kEpilogue>(p, out, &wi, &n);
  if constexpr (kPair) wi = r / (kGemmN / 2);
  return WeightRow(p, wi, n);
}
// TileWeightBytes of f16 rows.
template <int kEpilogue>
__device__ __forceinline__ const unsigned short* TileWeightRow(const MatmulParams& p, int n0, int r, bool* ok) {
  return reinterpret_cast<const unsigned short*>(TileWeightBytes<kEpilogue>(p, n0, r, ok));
}

// The end of the small-bucket tensor-core kernels: kWarps warps each hold
// sums over their slice of K for the same 16-row MMA tiles x 8 tokens (C
// fragments: rows g, g + 8 of tile t, tokens 2q, 2q + 1); warp 0 adds them
// and stores outputs n0 + 16 t + ... of tokens t0 + ... below `rows`. With
// kTokenTiles the tiles are 8-token tiles of the same 16 rows instead:
// outputs n0 + ... of tokens t0 + 8 t + .... With `groups` > 1, warp w
// holds rows of group w % groups (outputs from n0 + group_rows (w %
// groups)), and warps 0 .. groups - 1 each add and store their group's.
template <int kWarps, int kEpilogue, int kTiles, int kParts, bool kTokenTiles = false>
__device__ __forceinline__ void AddWarpSlicesAndStore(const MatmulParams& p, float (&acc)[kTiles][kParts][4], int n0,
                                                      int t0, int rows, int groups = 1, int group_rows = 0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  constexpr int kSums = kTiles * kParts * 4;
  __shared__ float partial[kWarps][kSums][32];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int w = 0; w < kParts; ++w)
#pragma unroll
      for (int r = 0; r < 4; ++r) partial[warp][(t * kParts + w) * 4 + r][lane] = acc[t][w][r];
  __syncthreads();
  if (warp >= groups) return;
  n0 += group_rows * warp;
#pragma unroll
  for (int i = 0; i < kSums; ++i) {
    float v = 0.0f;
    // Unrolled (a loop of runtime bound here cost the int8 tile kernels ~10%).
#pragma unroll
    for (int j = 0; j < kWarps; ++j) {
      if (warp + groups * j < kWarps) v += partial[warp + groups * j][i][lane];
    }
    acc[i / (4 * kParts)][(i / 4) % kParts][i % 4] = v;
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int tok = t0 + (kTokenTiles ? 8 * t : 0) + 2 * q + (r % 2);
      const int out = n0 + (kTokenTiles ? 0 : 16 * t) + 8 * (r / 2) + g;
      if (out < p.total_n && tok < rows) StoreOutput<kEpilogue>(p, tok, out, acc[t][0][r], acc[t][kParts - 1][r]);
    }
}

// Four activation floats at x[i..i+3] of a row of `len` (zeros past it),
// normalised when gamma is given.
__device__ __forceinline__ void LoadActivations4(const float* x, const float* gamma, float inv_rms, int i, int len,
                                                 float (&v)[4]) {
  if (i + 4 <= len && (reinterpret_cast<unsigned long long>(x + i) & 15) == 0) {
    const float4 a = *reinterpret_cast<const float4*>(x + i);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = i + j < len ? x[i + j] : 0.0f;
  }
  if (gamma != nullptr) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (i + j < len) v[j] = __fmul_rn(__fmul_rn(v[j], inv_rms), gamma[i + j]);
    }
  }
}

// Four activations v at chunk element i (a multiple of 4) staged as f32,
// and the sum of each 16 by four threads.
__device__ __forceinline__ void StageF32(const float (&v)[4], int i, int len, float* dst, float* sums) {
  if (i + 4 <= len) {
    *reinterpret_cast<float4*>(dst + StagedIndex(i)) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (i + j < len) dst[StagedIndex(i + j)] = v[j];
    }
  }
  float s = (v[0] + v[1]) + (v[2] + v[3]);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  if ((threadIdx.x & 3) == 0 && i < len) sums[i / 16] = s;
}

// kN activations v of a group held by kLanes consecutive lanes (kN each) as
// int8 codes c = rint(v 127 / max|v|), packed four a word in element order;
// the group's scale dx = max|v| / 127, and this lane's sum of v and of
// v - dx c. The decode staging's groups are 32 elements (4 x 8 lanes), the
// int8 tile path's 256 (8 x 32).
template <int kN, int kLanes>
__device__ __forceinline__ void QuantiseInt8(const float (&v)[kN], unsigned (&packed)[kN / 4], float* dx, float* sum,
                                             float* miss) {
  float m[kN / 2];  // max |v| as a tree of pairs
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) m[i] = fmaxf(fabsf(v[2 * i]), fabsf(v[2 * i + 1]));
#pragma unroll
  for (int w = kN / 2; w > 1; w /= 2)
#pragma unroll
    for (int i = 0; i < w / 2; ++i) m[i] = fmaxf(m[2 * i], m[2 * i + 1]);
  float amax = m[0];
#pragma unroll
  for (int o = 1; o < kLanes; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  *dx = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  *sum = *miss = 0.0f;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int c = __float2int_rn(v[j] * inv);
    if (j % 4 == 0) packed[j / 4] = 0;
    packed[j / 4] |= (static_cast<unsigned>(c) & 0xFFu) << (8 * (j % 4));
    *sum += v[j];
    *miss += v[j] - *dx * static_cast<float>(c);
  }
}

// StageF32's four as int8 codes (Int8CodeIndex's order): eight threads hold
// a 32-element group, whose scale dx = max|x| / 127 goes to the token's
// Int8Scales, and four the exact sum of each 16 (as for f32) and what the
// codes miss of it, sum_i (x_i - dx c_i), to its Int8Residuals. Chunks are
// whole 256-element blocks here.
__device__ __forceinline__ void StageInt8(const float (&v)[4], int i, int len, float* staged, int xstride, float* sums) {
  float dx, s, miss;
  unsigned packed[1];
  QuantiseInt8<4, 8>(v, packed, &dx, &s, &miss);
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    miss += __shfl_xor_sync(0xffffffffu, miss, o);
  }
  if (i >= len) return;
  *reinterpret_cast<unsigned*>(reinterpret_cast<unsigned char*>(staged) + Int8CodeIndex(i)) = packed[0];
  if ((threadIdx.x & 7) == 0) Int8Scales(staged, xstride)[i / 32] = dx;
  if ((threadIdx.x & 3) == 0) {
    sums[i / 16] = s;
    Int8Residuals(staged, xstride)[i / 16] = miss;
  }
}

// 1/rms of tokens t0 .. t0 + tiles - 1 of x into inv_rms (shared), by a
// block of kMatmulWarps warps; the caller synchronises before reading it.
template <int kTile>
__device__ __forceinline__ void InverseRms(const MatmulParams& p, int t0, int tiles, float* inv_rms) {
  constexpr int kThreads = 32 * kMatmulWarps;
  __shared__ double partial[kMatmulWarps][kTile];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  double sq[kTile];
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    sq[t] = 0.0;
    if (t < tiles) {
      const float* xr = p.x + static_cast<long long>(t0 + t) * p.k;
#pragma unroll 8
      for (int i = tid; i < p.k; i += kThreads) sq[t] += static_cast<double>(xr[i]) * xr[i];
    }
    sq[t] = WarpSumDouble(sq[t]);
    if (lane == 0) partial[warp][t] = sq[t];
  }
  __syncthreads();
  if (tid < kTile) {
    double sum = 0.0;
#pragma unroll
    for (int w = 0; w < kMatmulWarps; ++w) sum += partial[w][tid];
    inv_rms[tid] = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(p.k) + p.eps));
  }
}

// Stages elements [c0, c0 + len) of tokens t0 .. t0 + tiles - 1 (normalised
// with kNorm) in shared memory, as f32 or int8 codes, by a block of
// kMatmulWarps warps: each thread four consecutive elements per token;
// groups of four threads add up one 16-element sum, groups of eight find a
// 32-element group's int8 scale.
template <int kTile, bool kNorm>
__device__ __forceinline__ void StageTokens(const MatmulParams& p, int t0, int tiles, int c0, int len,
                                            const float* inv_rms, bool int8, float* xs, int xstride, float* sums,
                                            int sstride) {
  constexpr int kThreads = 32 * kMatmulWarps;
  const int tid = threadIdx.x;
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    if (t >= tiles) break;
    const float* xr = p.x + static_cast<long long>(t0 + t) * p.k + c0;
    const float* g = kNorm ? p.gamma + c0 : nullptr;
    // kStageBatch runs of four per thread are loaded before any is
    // staged: one L2 round trip per batch, not per run (the loop was a
    // chain of round trips, 14 for K = 14336).
    const float inv = kNorm ? inv_rms[t] : 1.0f;
    for (int base = 0; base < len; base += kStageBatch * 4 * kThreads) {
      float v[kStageBatch][4];
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) LoadActivations4(xr, g, inv, base + (b * kThreads + tid) * 4, len, v[b]);
#pragma unroll
      for (int b = 0; b < kStageBatch; ++b) {
        if (base + b * 4 * kThreads >= len) break;
        const int i = base + (b * kThreads + tid) * 4;
        if (int8) {
          StageInt8(v[b], i, len, xs + t * xstride, xstride, sums + t * sstride);
        } else {
          StageF32(v[b], i, len, xs + t * xstride, sums + t * sstride);
        }
      }
    }
  }
}

// StageTokens<1, true> for a row that one staging batch covers (K up to
// kStageBatch x 4 x kThreads = 4096), with 1/rms from the same registers: x
// and gamma come from L2 once, not once for InverseRms and again for the
// staging, and one block barrier goes (the one-token norm launches' prologue
// was a third of their warp time).
__device__ __forceinline__ void StageNormedRow(const MatmulParams& p, int t0, bool int8, float* xs, int xstride,
                                               float* sums) {
  constexpr int kThreads = 32 * kMatmulWarps;
  __shared__ double partial[kMatmulWarps];
  const int tid = threadIdx.x, len = p.k;
  const float* xr = p.x + static_cast<long long>(t0) * p.k;
  float v[kStageBatch][4], g[kStageBatch][4];
#pragma unroll
  for (int b = 0; b < kStageBatch; ++b) {
    LoadActivations4(xr, nullptr, 1.0f, (b * kThreads + tid) * 4, len, v[b]);
    LoadActivations4(p.gamma, nullptr, 1.0f, (b * kThreads + tid) * 4, len, g[b]);
  }
  // x gamma before 1/rms (StageTokens multiplies by 1/rms first; the two differ
  // within an ulp): one array of four stays live across the barrier, not x
  // and gamma (which spilled the qkv launch).
  double sq = 0.0;
#pragma unroll
  for (int b = 0; b < kStageBatch; ++b)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      sq += static_cast<double>(v[b][j]) * v[b][j];
      v[b][j] = __fmul_rn(v[b][j], g[b][j]);
    }
  sq = WarpSumDouble(sq);
  if (tid % 32 == 0) partial[tid / 32] = sq;
  __syncthreads();
  double sum = 0.0;
#pragma unroll
  for (int w = 0; w < kMatmulWarps; ++w) sum += partial[w];
  const float inv = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(p.k) + p.eps));
#pragma unroll
  for (int b = 0; b < kStageBatch; ++b) {
    if (b * 4 * kThreads >= len) break;
    const int i = (b * kThreads + tid) * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) v[b][j] = __fmul_rn(v[b][j], inv);
    if (int8) {
      StageInt8(v[b], i, len, xs, xstride, sums);
    } else {
      StageF32(v[b], i, len, xs, sums);
    }
  }
}

// The whole lane steps of one staged chunk [c0, c0 + len) for this warp's
// rows; returns where they end (the rest is the caller's element tail).
template <class Lane, int kRows, int kParts, int kTile>
__device__ __forceinline__ int WalkChunk(const unsigned char* const (&weight_rows)[kRows][kParts], int c0, int len,
                                         int lane, int slice, int ksplit, const float* xs, int xstride,
                                         const float* sums, int sstride, float (&acc)[kRows][kParts][kTile]) {
  const int full = len / Lane::kLane * Lane::kLane;
  // Two steps in flight for decode; a tile's sums need the registers.
#pragma unroll(kTile == 1 ? 2 : 1)
  for (int e = (slice * 32 + lane) * Lane::kLane; e < full; e += ksplit * 32 * Lane::kLane) {
    typename Lane::Raw raw[kRows][kParts];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int w = 0; w < kParts; ++w) raw[r][w] = Lane::Load(weight_rows[r][w], c0 + e);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int w = 0; w < kParts; ++w) Lane::template Dot<kTile>(raw[r][w], e, xs, xstride, sums, sstride, acc[r][w]);
  }
  return full;
}

// WalkChunk for int8 lanes: each step's activations are loaded once per
// token and shared by the warp's rows. Decode launches of one weight per row
// issue the loads of two steps before either's arithmetic (gate/up already
// has two weights per row in flight; more would spill). table_rows: the
// rows' decode copies, for the lanes that read one (LaneQ4_KTable).
template <class Lane, int kRows, int kParts, int kTile>
__device__ __forceinline__ void WalkChunkInt8(const unsigned char* const (&weight_rows)[kRows][kParts],
                                              const unsigned char* const (&table_rows)[kRows][kParts], int c0, int len,
                                              int lane, int slice, int ksplit, const float* xs, int xstride,
                                              const float* sums, int sstride, float (&acc)[kRows][kParts][kTile]) {
  constexpr int kSteps = kTile == 1 && kParts == 1 ? 2 : 1;
  const unsigned kStride = ksplit * 32 * Lane::kLane;
  for (unsigned e0 = (slice * 32 + lane) * Lane::kLane; e0 < static_cast<unsigned>(len); e0 += kSteps * kStride) {
    typename Lane::Raw raw[kSteps][kRows][kParts];
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      if (k > 0 && e0 + k * kStride >= static_cast<unsigned>(len)) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int w = 0; w < kParts; ++w) raw[k][r][w] = Lane::Load(weight_rows[r][w], table_rows[r][w], c0 + e0 + k * kStride);
    }
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const unsigned e = e0 + k * kStride;
      if (k > 0 && e >= static_cast<unsigned>(len)) break;
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        const typename Lane::X x = Lane::LoadX(e, xs + t * xstride, xstride, sums + t * sstride);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int w = 0; w < kParts; ++w) Lane::DotX(raw[k][r][w], e, x, acc[r][w][t]);
      }
    }
  }
}

// A silu_mul decode launch's block, after storing the round's outputs
// [base, base + per) (per divides 256): the last block of a run of 256
// outputs stages the run into p.stage_image as StageTokens would for a
// launch that reads them (no norm), and resets the run's count.
__device__ __forceinline__ void StageRunOnce(const MatmulParams& p, int base, int per) {
  // base is the block's: its threads all count or all leave.
  if (base >= p.total_n || !LastBlockToCount(&p.stage_counts[base / 256], 256 / per)) return;
  const int run = base / 256 * 256, xstride = MatmulPaddedLen(p.total_n);
  if (threadIdx.x < 64) {  // two whole warps: StageInt8's groups of eight lanes
    const int i = run + 4 * threadIdx.x;
    const float4 a = __ldcg(reinterpret_cast<const float4*>(p.y[0] + i));  // other blocks' stores: from L2
    const float v[4] = {a.x, a.y, a.z, a.w};
    StageInt8(v, i, p.total_n, p.stage_image, xstride, p.stage_image + xstride);
  }
}

// What StageTokens writes for one token over an int8 lane (codes, scales,
// residuals, sums of a chunk of len elements), copied from a StageRunOnce
// image by the block's threads.
__device__ __forceinline__ void CopyPrestaged(const float* image, int len, float* xs, int xstride) {
  const int threads = 32 * kMatmulWarps;
  const float* from[4] = {image, Int8Scales(image, xstride), Int8Residuals(image, xstride), image + xstride};
  float* to[4] = {xs, Int8Scales(xs, xstride), Int8Residuals(xs, xstride), xs + xstride};
  const int n[4] = {len / 16, len / 128, len / 64, len / 64};  // 16-byte runs: codes, scales, residuals, sums
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint4* src = reinterpret_cast<const uint4*>(from[r]);
    uint4* dst = reinterpret_cast<uint4*>(to[r]);
    for (int j = threadIdx.x; j < n[r]; j += threads) dst[j] = __ldcg(src + j);
  }
}

// Decode: asks L2 for the first p.prefetch_steps lane steps of this warp's
// round-0 rows (and their scale-table entries), before the kernel waits for
// the launch before it. Only weights are read.
template <class Lane, int kRows, int kParts, int kEpilogue, bool kTable>
__device__ __forceinline__ void PrefetchFirstSteps(const MatmulParams& p, int warp, int lane) {
  const int ksplit = max(1, p.ksplit), slice = warp % ksplit;
  const int first = (blockIdx.x * (kMatmulWarps / ksplit) + warp / ksplit) * kRows;
  if (first >= p.total_n) return;
  for (int s = 0; s < p.prefetch_steps; ++s) {
    const long long e = (static_cast<long long>(s) * ksplit + slice) * 32 * Lane::kLane + lane * Lane::kLane;
    if (e >= p.k) break;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      int wi, n;
      WeightRowOf<kEpilogue>(p, min(first + r, p.total_n - 1), &wi, &n);
#pragma unroll
      for (int w = 0; w < kParts; ++w) {
        if constexpr (kTable) {
          PrefetchL2(TableRow(p, wi + w, n) + e * Q4KTableRowBytes(p.k) / p.k);
        } else {
          PrefetchL2(WeightRow(p, wi + w, n) + e * p.row_bytes / p.k);
        }
      }
    }
  }
}

// matmul_kernel's work; kTable: q4_K's weights read through their scale
// tables (LaneQ4_KTable).
template <class S, int kEpilogue, bool kNorm, int kTile, bool kTable>
__device__ __forceinline__ void MatmulRows(const MatmulParams& p) {
  using Lane = typename WalkLaneOf<S, kTable>::type;
  constexpr bool kDecode = kTile <= kMatmulPairTile;  // one or two sequences decoding
  constexpr int kRows = kDecode ? Lane::kRows : kMatmulTiledRowsPerWarp;
  // Decode of a storage with an int8 lane besides its own (q8_0) takes it
  // where K is a multiple of 256; activations staged as int8 then.
  constexpr bool kInt8Decode = kDecode && Int8LaneOf<S>::kHas;
  const bool int8 = Lane::kInt8 || (kInt8Decode && p.k % 256 == 0);
  constexpr int kParts = EpilogueParts(kEpilogue);
  extern __shared__ float4 staged4[];
  float* xs = reinterpret_cast<float*>(staged4);
  __shared__ float inv_rms[kTile];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int t0 = blockIdx.y * kTile;
  // Decode waits for the launch before it (WaitForPrevious) only where it
  // first reads activations, so its setup runs while that launch ends. It
  // stages both tokens of a two-token bucket (the arena has their rows) and
  // stores those that exist: the row count, a step input (complete before
  // the graph's first launch started), is read now and used at the end.
  if constexpr (kDecode) PrefetchFirstSteps<Lane, kRows, kParts, kEpilogue, kTable>(p, warp, lane);
  const int step_rows = kDecode ? *p.rows : 0;
  if constexpr (!kDecode) WaitForPrevious();
  int tiles = kTile;
  if constexpr (!kDecode) {
    const int rows = *p.rows;
    if (t0 >= rows) return;
    tiles = min(kTile, rows - t0);
  }

  // Decode launches of few row blocks split K over ksplit warps per rows
  // (slices interleaved by lane step), combined in order at the end.
  const int ksplit = kDecode ? max(1, p.ksplit) : 1, slice = warp % ksplit;
  // Decode launches of more row blocks than fit the GPU at once come as one
  // wave of blocks that stage the activations once and then take row groups
  // round by round (the host sizes the grid; a single staged chunk only): no
  // second partial wave, and one staging per block instead of per 32 rows.
  const int groups_per_block = kMatmulWarps / ksplit;
  const int total_groups = (p.total_n + kRows - 1) / kRows;
  const int rounds = kDecode && p.chunk >= p.k
                         ? (total_groups + gridDim.x * groups_per_block - 1) / (gridDim.x * groups_per_block)
                         : 1;

  // One-token decode over an int8 lane whose activations the launch before staged.
  const bool prestaged = kDecode && kTile == 1 && !kNorm && Lane::kInt8 && p.prestaged != nullptr;
  // One-token norm launches whose row one staging batch covers stage it in
  // one pass (StageNormedRow); not q4_K's header lane, the tables' fallback,
  // whose registers it pushed into a spill.
  constexpr bool kNormedRow = kNorm && kTile == 1 && (kTable || !TableLaneOf<S>::kHas);
  const bool normed_row = kNormedRow && p.chunk >= p.k && p.k <= kStageBatch * 4 * 32 * kMatmulWarps;
  if constexpr (kNorm) {
    if (!normed_row) {
      WaitForPrevious();
      InverseRms<kTile>(p, t0, tiles, inv_rms);
    }
  }

  const int xstride = MatmulPaddedLen(p.chunk), sstride = MatmulSumsLen(p.chunk);
  float* sums = xs + kTile * xstride;
  for (int round = 0; round < rounds; ++round) {
    // This warp's rows: per row its weight (q, k or v of a fused launch), its
    // row there, and its weight rows (gate and up for silu_mul) and table rows.
    const int first = ((round * gridDim.x + blockIdx.x) * groups_per_block + warp / ksplit) * kRows;
    const bool active = first < p.total_n;
    int out_weight[kRows], out_row[kRows];
    const unsigned char* weight_rows[kRows][kParts];
    const unsigned char* table_rows[kRows][kParts];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      WeightRowOf<kEpilogue>(p, min(first + r, p.total_n - 1), &out_weight[r], &out_row[r]);
#pragma unroll
      for (int w = 0; w < kParts; ++w) {
        weight_rows[r][w] = WeightRow(p, out_weight[r] + w, out_row[r]);
        table_rows[r][w] = kTable ? TableRow(p, out_weight[r] + w, out_row[r]) : nullptr;
      }
    }
    float acc[kRows][kParts][kTile];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int w = 0; w < kParts; ++w)
#pragma unroll
        for (int t = 0; t < kTile; ++t) acc[r][w][t] = 0.0f;
    // Decode's residuals, loaded once the activations are staged rather than
    // after the walk, where the stores waited on them.
    float residual[kRows][kTile];
    const bool loads_residual = kDecode && kEpilogue == kEpilogueResidualAdd && active && lane == 0 && slice == 0;

    for (int c0 = 0; c0 < p.k; c0 += p.chunk) {
      const int len = min(p.chunk, p.k - c0);
      if (round == 0) {  // later rounds reuse the one staged chunk
        if (c0 == 0) WaitForPrevious();  // (every thread of the block passes here)
        __syncthreads();  // the previous chunk's readers are done; 1/rms is ready
        if (prestaged) {
          CopyPrestaged(p.prestaged, len, xs, xstride);
        } else if (normed_row) {
          StageNormedRow(p, t0, int8, xs, xstride, sums);
        } else {
          StageTokens<kTile, kNorm>(p, t0, tiles, c0, len, inv_rms, int8, xs, xstride, sums, sstride);
        }
        __syncthreads();
      }
      if (c0 == 0 && loads_residual) {
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int t = 0; t < kTile; ++t) {
            residual[r][t] = p.residual[static_cast<long long>(t0 + t) * p.n[0] + min(out_row[r], p.n[0] - 1)];
          }
      }
      if (!active) continue;
      if constexpr (Lane::kInt8) {
        // Whole 256-element blocks only: K and every chunk are multiples of 256.
        WalkChunkInt8<Lane, kRows, kParts, kTile>(weight_rows, table_rows, c0, len, lane, slice, ksplit, xs, xstride, sums,
                                                  sstride, acc);
      } else if (int8) {
        if constexpr (kInt8Decode) {
          static_assert(Int8LaneOf<S>::type::kRows == Lane::kRows, "the host sizes rows by storage");
          WalkChunkInt8<typename Int8LaneOf<S>::type, kRows, kParts, kTile>(weight_rows, table_rows, c0, len, lane, slice,
                                                                            ksplit, xs, xstride, sums, sstride, acc);
        }
      } else {
        const int full = Lane::Fits(p.k) ? WalkChunk<Lane, kRows, kParts, kTile>(weight_rows, c0, len, lane, slice, ksplit,
                                                                                 xs, xstride, sums, sstride, acc)
                                         : WalkChunk<LaneDecode8<S>, kRows, kParts, kTile>(
                                               weight_rows, c0, len, lane, slice, ksplit, xs, xstride, sums, sstride, acc);
        // Elements past the last whole lane step (rows of plain types of odd
        // length, a single trailing q8_0 block).
        for (int e = full + slice * 32 + lane; e < len; e += ksplit * 32) {
          const int at = StagedIndex(e);
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int w = 0; w < kParts; ++w) {
              const float wv = DecodeElement<S>(weight_rows[r][w], c0 + e);
#pragma unroll
              for (int t = 0; t < kTile; ++t) acc[r][w][t] = fmaf(wv, xs[t * xstride + at], acc[r][w][t]);
            }
        }
      }
    }
    if (round == rounds - 1) LetNextLaunch();  // the block's weight loads are done
    if (active) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int w = 0; w < kParts; ++w)
#pragma unroll
          for (int t = 0; t < kTile; ++t) acc[r][w][t] = WarpSum(acc[r][w][t]);
    }
    bool stores = active && lane == 0;
    if constexpr (kDecode) {
      if (ksplit > 1) {
        __shared__ float slice_acc[kMatmulWarps][kRows * kParts * kTile];
        if (active && slice > 0 && lane == 0) {
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int w = 0; w < kParts; ++w)
#pragma unroll
              for (int t = 0; t < kTile; ++t) slice_acc[warp][(r * kParts + w) * kTile + t] = acc[r][w][t];
        }
        __syncthreads();
        if (slice == 0 && active && lane == 0) {
          for (int sl = 1; sl < ksplit; ++sl)
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
              for (int w = 0; w < kParts; ++w)
#pragma unroll
                for (int t = 0; t < kTile; ++t) acc[r][w][t] += slice_acc[warp + sl][(r * kParts + w) * kTile + t];
        }
        __syncthreads();  // slice_acc is read before a next round writes it
        stores = stores && slice == 0;
      }
      if constexpr (kTile == 1) {
        stores = stores && step_rows >= 1;
      } else {
        tiles = min(tiles, step_rows);
      }
    }
    if (stores) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (first + r >= p.total_n) continue;
        const int width = Pick(p.n, out_weight[r]);
        float* y = Pick(p.y, out_weight[r]);
#pragma unroll
        for (int t = 0; t < kTile; ++t) {
          if (t >= tiles) break;
          const long long at = static_cast<long long>(t0 + t) * width + out_row[r];
          float v = acc[r][0][t];
          if constexpr (kEpilogue == kEpilogueSiluMul) v = Silu(acc[r][0][t]) * acc[r][kParts - 1][t];
          if constexpr (kEpilogue == kEpilogueResidualAdd) v = v + (kDecode ? residual[r][t] : p.residual[at]);
          y[at] = v;
        }
      }
    }
    if constexpr (kDecode && kTile == 1 && kEpilogue == kEpilogueSiluMul) {
      if (p.stage_image != nullptr) {
        const int per = groups_per_block * kRows;
        StageRunOnce(p, (round * gridDim.x + blockIdx.x) * per, per);
      }
    }
  }
}

// The choice of lane is made once per launch, not per chunk, so that each
// path keeps its own registers (q4_K's table rows beside the header lane's
// spilled its qkv decode).
template <class S, int kEpilogue, bool kNorm, int kTile>
__global__ void __launch_bounds__(32 * kMatmulWarps, kTile <= kMatmulPairTile ? 2 : 1) matmul_kernel(MatmulParams p) {
  if constexpr (TableLaneOf<S>::kHas) {
    if (p.tables[0] != nullptr) {
      MatmulRows<S, kEpilogue, kNorm, kTile, true>(p);
      return;
    }
  }
  MatmulRows<S, kEpilogue, kNorm, kTile, false>(p);
}

}  // namespace kiln

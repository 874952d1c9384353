// The per-storage inner step of matmul_kernel. A lane step covers kLane
// elements of one weight row: Load fetches their raw bytes (so a warp can
// issue the loads of all its rows before it uses any), Dot folds them into
// kTile per-token sums against activations the block staged in shared
// memory. kRows is how many weight rows a warp walks together in decode
// (registers for the raw bytes bound it). Storages without a lane of their own decode eight
// elements at a time with their Decode8.
#pragma once

#include "storage.cuh"

namespace kiln {

// Where chunk-relative element e of the staged f32 activations lives: 4
// floats of padding after every 32 so lanes reading 32-float runs at a
// stride of one run fall in different banks.
__device__ __forceinline__ int StagedIndex(int e) { return e + 4 * (e >> 5); }

// Lanes with kInt8 read the activations staged as int8 codes instead,
// x_i ~ dx c_i with a scale dx per 32-element group, beside the same exact
// 16-element sums S as f32 and per 16 the residual R = sum_i (x_i - dx c_i).
// In the token's xstride staged floats the codes take the first quarter,
// the scales start at half, the residuals at three quarters (xstride is at
// least 9/8 of the chunk). The codes are in the q4_K order: the 16 a q4_K
// lane step takes from sub-block 2c (low nibbles) are bytes 16q.. of their
// 256-element block and the 16 of sub-block 2c + 1 are bytes 128 + 16q..
// (q = 2c + h the lane's 16-byte slice), so the eight lanes of a block read
// 128 contiguous bytes per load.
__device__ __forceinline__ int Int8CodeIndex(int e) {
  const int r = e & 255;  // 64c + 32 hi + 16h + j  ->  128 hi + 32c + 16h + j
  return e - r + 128 * ((r >> 5) & 1) + 32 * (r >> 6) + (r & 31);
}
template <class F>
__device__ __forceinline__ F* Int8Scales(F* staged, int xstride) {
  return staged + xstride / 2;
}
template <class F>
__device__ __forceinline__ F* Int8Residuals(F* staged, int xstride) {
  return staged + xstride / 4 * 3;
}

// Four staged floats (16-byte aligned: runs start at multiples of 4).
__device__ __forceinline__ float4 Staged4(const float* xs, int at) { return *reinterpret_cast<const float4*>(xs + at); }

// The four codes in the bytes of `q` (each below 128) as floats 2 + q/64:
// one byte permute puts a code in the mantissa of 2.0. Then sum[t] +=
// those four against the staged activations at `at` of every token t. The
// quantised lanes fold the 2 and the 1/64 back in per run through the
// staged sums of x.
template <int kTile>
__device__ __forceinline__ void DotCodes4(unsigned q, const float* xs, int xstride, int at, float (&sum)[kTile]) {
  float v[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) v[b] = __int_as_float(__byte_perm(q, 0x40000000u, 0x7054u | (b << 8)));
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    const float4 x = Staged4(xs + t * xstride, at);
    sum[t] = fmaf(v[0], x.x, sum[t]);
    sum[t] = fmaf(v[1], x.y, sum[t]);
    sum[t] = fmaf(v[2], x.z, sum[t]);
    sum[t] = fmaf(v[3], x.w, sum[t]);
  }
}

// Any storage and row layout, eight elements per lane step through Decode8
// (which copes with unaligned rows); also the fallback of the lanes below
// where K does not give them the alignment their loads assume.
template <class S>
struct LaneDecode8 {
  static constexpr int kLane = 8, kRows = 4;
  static constexpr bool kInt8 = false;
  __device__ static bool Fits(int) { return true; }
  struct Raw {
    float v[8];
  };
  __device__ static Raw Load(const unsigned char* row, int e) {
    Raw r;
    S::Decode8(row + (e / S::kBlockElems) * S::kBlockBytes, e % S::kBlockElems, r.v);
    return r;
  }
  template <int kTile>
  __device__ static void Dot(const Raw& r, int e, const float* xs, int xstride, const float*, int, float (&acc)[kTile]) {
    const int at = StagedIndex(e);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      const float4 a = Staged4(xs + t * xstride, at), b = Staged4(xs + t * xstride, at + 4);
      const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[t] = fmaf(r.v[i], x[i], acc[t]);
    }
  }
};

// Weights start 256-byte aligned (runtime/cuda), so a lane's loads are
// aligned whenever the row length in bytes allows; Fits(k) says so.
__device__ __forceinline__ uint4 Aligned16(const unsigned char* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// f16 / bf16: sixteen elements (two 16-byte loads) per lane step.
template <bool kBf16>
struct LaneHalf16 {
  static constexpr int kLane = 16, kRows = 4;
  static constexpr bool kInt8 = false;
  __device__ static bool Fits(int k) { return k % 8 == 0; }
  struct Raw {
    uint4 a, b;
  };
  __device__ static Raw Load(const unsigned char* row, int e) { return {Aligned16(row + 2 * e), Aligned16(row + 2 * e + 16)}; }
  template <int kTile>
  __device__ static void Dot(const Raw& r, int e, const float* xs, int xstride, const float*, int, float (&acc)[kTile]) {
    const unsigned w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
    float v[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[2 * i] = StorageHalfBits<kBf16>::One(static_cast<unsigned short>(w[i] & 0xFFFF));
      v[2 * i + 1] = StorageHalfBits<kBf16>::One(static_cast<unsigned short>(w[i] >> 16));
    }
    const int at = StagedIndex(e);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 x = Staged4(xs + t * xstride, at + 4 * q);
        acc[t] = fmaf(v[4 * q], x.x, acc[t]);
        acc[t] = fmaf(v[4 * q + 1], x.y, acc[t]);
        acc[t] = fmaf(v[4 * q + 2], x.z, acc[t]);
        acc[t] = fmaf(v[4 * q + 3], x.w, acc[t]);
      }
    }
  }
};

// q8_0: two blocks (68 bytes, 4-byte aligned when K is a multiple of 64) per
// lane step, as 17 words. A code byte becomes a float without an int-to-float
// conversion: with its sign bit flipped it is the low byte of 2^23 + q + 128.
struct LaneQ8_0Pair {
  static constexpr int kLane = 64, kRows = 2;
  static constexpr bool kInt8 = false;
  __device__ static bool Fits(int k) { return k % 64 == 0; }
  struct Raw {
    unsigned w[17];
  };
  __device__ static Raw Load(const unsigned char* row, int e) {
    const unsigned* p = reinterpret_cast<const unsigned*>(row + (e / 32) * 34);
    Raw r;
#pragma unroll
    for (int i = 0; i < 17; ++i) r.w[i] = __ldg(p + i);
    return r;
  }
  // Code byte n (0..67) of the pair as a float, from sign-flipped words.
  __device__ static float Code(const unsigned (&flipped)[17], int n) {
    return __int_as_float(__byte_perm(flipped[n / 4], 0x4B000000u, 0x7650u + (n % 4))) - 8388736.0f;
  }
  template <int kTile>
  __device__ static void Dot(const Raw& r, int e, const float* xs, int xstride, const float*, int, float (&acc)[kTile]) {
    unsigned flipped[17];
#pragma unroll
    for (int i = 0; i < 17; ++i) flipped[i] = r.w[i] ^ 0x80808080u;
    const float d[2] = {HalfToFloat(static_cast<unsigned short>(r.w[0] & 0xFFFF)),
                        HalfToFloat(static_cast<unsigned short>(r.w[8] >> 16))};
#pragma unroll
    for (int blk = 0; blk < 2; ++blk) {
      // Block 0's codes are bytes 2..33 of the pair, block 1's bytes 36..67.
      const int first = blk == 0 ? 2 : 36;
      const int at = StagedIndex(e + 32 * blk);
      float sum[kTile];
#pragma unroll
      for (int t = 0; t < kTile; ++t) sum[t] = 0.0f;
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = Code(flipped, first + 4 * q + i);
#pragma unroll
        for (int t = 0; t < kTile; ++t) {
          const float4 x = Staged4(xs + t * xstride, at + 4 * q);
          sum[t] = fmaf(v[0], x.x, sum[t]);
          sum[t] = fmaf(v[1], x.y, sum[t]);
          sum[t] = fmaf(v[2], x.z, sum[t]);
          sum[t] = fmaf(v[3], x.w, sum[t]);
        }
      }
#pragma unroll
      for (int t = 0; t < kTile; ++t) acc[t] = fmaf(d[blk], sum[t], acc[t]);
    }
  }
};

// q8_0 against int8 activations (decode where K is a multiple of 256, see
// Int8LaneOf): the same two blocks per lane step, each 32-code block a run
// of 8 dp4a against the staged codes of its 32-element group (contiguous in
// Int8CodeIndex's order), so a weight costs ~0.5 instructions instead of the
// f32 lane's ~3. The codes are signed and centred on 0, so the activations'
// rounding is left uncorrected, as in llama.cpp's q8_0 x q8_1 dot:
//   sum_i d q_i x_i ~ d dx sum_i q_i c_i.
struct LaneQ8_0Int8 {
  static constexpr int kLane = 64, kRows = LaneQ8_0Pair::kRows;
  static constexpr bool kInt8 = true;
  using Raw = LaneQ8_0Pair::Raw;
  struct X {
    int4 a0, a1, b0, b1;  // the codes of the two groups
    float dxa, dxb;       // and their scales
  };
  __device__ static Raw Load(const unsigned char* row, const unsigned char*, unsigned e) {
    return LaneQ8_0Pair::Load(row, e);
  }
  __device__ static X LoadX(unsigned e, const float* xs, int xstride, const float*) {
    const unsigned char* codes = reinterpret_cast<const unsigned char*>(xs);
    const int4* a = reinterpret_cast<const int4*>(codes + Int8CodeIndex(e));
    const int4* b = reinterpret_cast<const int4*>(codes + Int8CodeIndex(e + 32));
    const float* dx = Int8Scales(xs, xstride) + e / 32;
    return {a[0], a[1], b[0], b[1], dx[0], dx[1]};
  }
  __device__ static void DotX(const Raw& r, unsigned, const X& x, float& acc) {
    // Block 0: d in bytes 0-1, codes 2..33 (word-unaligned: each code word
    // spans two raw words); block 1: d in bytes 34-35, codes 36..67 = words 9..16.
    const int xa[8] = {x.a0.x, x.a0.y, x.a0.z, x.a0.w, x.a1.x, x.a1.y, x.a1.z, x.a1.w};
    const int xb[8] = {x.b0.x, x.b0.y, x.b0.z, x.b0.w, x.b1.x, x.b1.y, x.b1.z, x.b1.w};
    int sa = 0, sb = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      sa = __dp4a(static_cast<int>(__byte_perm(r.w[j], r.w[j + 1], 0x5432)), xa[j], sa);
      sb = __dp4a(static_cast<int>(r.w[9 + j]), xb[j], sb);
    }
    const float da = HalfToFloat(static_cast<unsigned short>(r.w[0] & 0xFFFF));
    const float db = HalfToFloat(static_cast<unsigned short>(r.w[8] >> 16));
    acc = fmaf(da * x.dxa, static_cast<float>(sa), acc);
    acc = fmaf(db * x.dxb, static_cast<float>(sb), acc);
  }
};

// q4_K: 16 code bytes per lane step (8 lanes per 256-element block), i.e.
// 16 elements of sub-block 2c (low nibbles) and the 16 matching ones of
// sub-block 2c + 1 (high nibbles), with the block's 16-byte header, against
// int8 activations (kInt8): a nibble stays an int8 lane of a dp4a, so a
// 32-weight step is 8 dp4a and 12 bit operations besides the scales (~2.2
// PTX instructions per weight against the f32 lane's ~6, and a quarter of
// its shared-memory bytes). With dx the activation group's scale, S the
// run's exact sum and R its residual (see Int8CodeIndex):
//   sum_i (d sc q_i - dmin mn) x_i ~ d sc (dx sum_i q_i c_i + 8 R) - dmin mn S,
// off by d sc sum_i (q_i - 8)(x_i - dx c_i): the codes' rounding meets the
// weights' codes centred on 8 rather than their 0..15, the larger term for
// weights with a min.
struct LaneQ4_K {
  static constexpr int kLane = 32, kRows = 4;
  static constexpr bool kInt8 = true;
  __device__ static bool Fits(int) { return true; }  // 144-byte blocks keep every row 16-byte aligned
  struct Raw {
    uint4 head, qs;
  };
  // The activations of one lane step for one token, shared by its rows.
  struct X {
    int4 lo, hi;    // codes of the low- and high-nibble runs
    float2 dx;       // scales of sub-blocks 2c and 2c + 1
    float slo, shi;  // exact sums of the two runs
    float rlo, rhi;  // the runs' residuals times 8 (the codes' centre)
  };
  // (Unsigned: e >= 0, and the divisions become shifts.)
  __device__ static Raw Load(const unsigned char* row, const unsigned char*, unsigned e) {
    const unsigned char* b = row + (e / 256) * 144;
    return {Aligned16(b), Aligned16(b + 16 + 16 * ((e / 32) % 8))};
  }
  // 6-bit scale and min of sub-block s from the header's 12 scale bytes
  // (words y, z, w), one at a time (the tensor-core tile kernel's decode).
  __device__ static void ScaleMin(const uint4& h, int s, float* scale, float* min) {
    const int u = 8 * (s & 3);
    const unsigned by = (h.y >> u) & 0xFF, bz = (h.z >> u) & 0xFF, bw = (h.w >> u) & 0xFF;
    const unsigned sc = s < 4 ? by & 63 : (bw & 0x0F) | ((by >> 6) << 4);
    const unsigned mn = s < 4 ? bz & 63 : (bw >> 4) | ((bz >> 6) << 4);
    *scale = static_cast<float>(sc);
    *min = static_cast<float>(mn);
  }
  __device__ static X LoadX(unsigned e, const float* xs, int xstride, const float* sums) {
    const unsigned q = (e / 32) % 8, block = e - 32 * q;
    const unsigned char* codes = reinterpret_cast<const unsigned char*>(xs) + block + 16 * q;
    const unsigned lo = block + 64 * (q / 2) + 16 * (q % 2);  // the low run's first element
    return {*reinterpret_cast<const int4*>(codes), *reinterpret_cast<const int4*>(codes + 128),
            *reinterpret_cast<const float2*>(Int8Scales(xs, xstride) + block / 32 + 2 * (q / 2)), sums[lo / 16],
            sums[lo / 16 + 2], 8.0f * Int8Residuals(xs, xstride)[lo / 16], 8.0f * Int8Residuals(xs, xstride)[lo / 16 + 2]};
  }
  // The integer dots of a lane step's 16 low and 16 high nibbles with their runs' codes.
  __device__ static void NibbleDots(const uint4& qs, const X& x, int* il, int* ih) {
    const int m = 0x0F0F0F0F;
    int lo = __dp4a(static_cast<int>(qs.x) & m, x.lo.x, 0), hi = __dp4a(static_cast<int>(qs.x >> 4) & m, x.hi.x, 0);
    lo = __dp4a(static_cast<int>(qs.y) & m, x.lo.y, lo);
    hi = __dp4a(static_cast<int>(qs.y >> 4) & m, x.hi.y, hi);
    lo = __dp4a(static_cast<int>(qs.z) & m, x.lo.z, lo);
    hi = __dp4a(static_cast<int>(qs.z >> 4) & m, x.hi.z, hi);
    lo = __dp4a(static_cast<int>(qs.w) & m, x.lo.w, lo);
    hi = __dp4a(static_cast<int>(qs.w >> 4) & m, x.hi.w, hi);
    *il = lo;
    *ih = hi;
  }
  __device__ static void DotX(const Raw& r, unsigned e, const X& x, float& acc) {
    const unsigned c = (e / 64) % 4;
    // The 6-bit scales and mins of sub-blocks 2c and 2c + 1, two per 16 bits:
    // header bytes 2c, 2c + 1 of words y (scales) and z (mins) for c < 2;
    // for c >= 2 their low 4 bits from word w, the top 2 from y or z.
    // (Selects, not branches: the lanes of a warp differ in c.)
    const bool early = c < 2;
    const unsigned sh = 16 * (c & 1);
    const unsigned low_mask = early ? 0x3F3Fu : 0x0F0Fu, top_mask = early ? 0u : 0x3030u;
    const unsigned scp = ((early ? r.head.y : r.head.w) >> sh & low_mask) | (r.head.y >> (sh + 2) & top_mask);
    const unsigned mnp =
        ((early ? r.head.z : r.head.w) >> (early ? sh : sh + 4) & low_mask) | (r.head.z >> (sh + 2) & top_mask);
    const float d = HalfToFloat(static_cast<unsigned short>(r.head.x & 0xFFFF));
    const float dmin = HalfToFloat(static_cast<unsigned short>(r.head.x >> 16));
    int il, ih;
    NibbleDots(r.qs, x, &il, &ih);
    const int sc_lo = scp & 0xFF, sc_hi = scp >> 8;
    const float sl = static_cast<float>(sc_lo * il), shi = static_cast<float>(sc_hi * ih);
    const float ml = static_cast<float>(mnp & 0xFF), mh = static_cast<float>(mnp >> 8);
    const float rl = static_cast<float>(sc_lo) * x.rlo + static_cast<float>(sc_hi) * x.rhi;
    acc += d * (x.dx.x * sl + x.dx.y * shi + rl) - dmin * (ml * x.slo + mh * x.shi);
  }
};

// q4_K read from its decode copy (made on the device at load by
// q4k_scale_table_kernel, see Q4KTableRowBytes): per 256-element block the
// codes, and per lane pair c the products A = d sc and M = dmin mn of
// sub-blocks 2c and 2c + 1 as four f16 (8 bytes). A lane step reads those
// instead of the block's 16-byte header and unpacks no 6-bit field: ~35
// instructions a row step against LaneQ4_K's ~72, and 160 bytes a block
// (the codes read in place with a table beside them moved 176: the header
// shares a 32-byte sector with the first codes). Same sums as LaneQ4_K but
// for the f16 rounding of A and M (2^-11).
struct LaneQ4_KTable {
  static constexpr int kLane = LaneQ4_K::kLane, kRows = LaneQ4_K::kRows;
  static constexpr bool kInt8 = true;
  struct Raw {
    uint4 qs;
    uint2 am;  // f16 A of 2c, 2c + 1 | f16 M of 2c, 2c + 1
  };
  using X = LaneQ4_K::X;
  __device__ static Raw Load(const unsigned char*, const unsigned char* table, unsigned e) {
    const unsigned char* b = table + (e / 256) * kQ4KTableBlockBytes;
    return {Aligned16(b + 16 * ((e / 32) % 8)),
            __ldg(reinterpret_cast<const uint2*>(b + kQ4KTableCodeBytes + 8 * ((e / 64) % 4)))};
  }
  __device__ static X LoadX(unsigned e, const float* xs, int xstride, const float* sums) {
    return LaneQ4_K::LoadX(e, xs, xstride, sums);
  }
  __device__ static void DotX(const Raw& r, unsigned, const X& x, float& acc) {
    int il, ih;
    LaneQ4_K::NibbleDots(r.qs, x, &il, &ih);
    const float a_lo = HalfToFloat(static_cast<unsigned short>(r.am.x & 0xFFFF));
    const float a_hi = HalfToFloat(static_cast<unsigned short>(r.am.x >> 16));
    const float m_lo = HalfToFloat(static_cast<unsigned short>(r.am.y & 0xFFFF));
    const float m_hi = HalfToFloat(static_cast<unsigned short>(r.am.y >> 16));
    acc = fmaf(a_lo, fmaf(x.dx.x, static_cast<float>(il), x.rlo), acc);
    acc = fmaf(a_hi, fmaf(x.dx.y, static_cast<float>(ih), x.rhi), acc);
    acc = fmaf(-m_lo, x.slo, acc);
    acc = fmaf(-m_hi, x.shi, acc);
  }
};

// q6_K: 64 elements per lane step, one (block, half c, m) each: the 16
// elements l = 16m..16m+15 of each of the half's four 32-element groups.
// Their low 4 bits are the low (groups 0, 1) or high (groups 2, 3) nibbles
// of two 16-byte ql runs, their top 2 bits one 2-bit field of a 16-byte qh
// run; four int8 scales (one per group) and the block's d. Blocks are 210
// bytes, so only 16-bit loads are aligned. A 6-bit q becomes 2 + q/64 in the
// mantissa of 2.0 (one byte permute), and with S the staged sum of a
// group's 16 activations:
//   sum_i d sc (q_i - 32) x_i = d sc (64 sum_i (2 + q_i/64) x_i - 160 S).
struct LaneQ6_K {
  static constexpr int kLane = 64, kRows = 1;  // 14 words of raw bytes per row: two rows spilled
  static constexpr bool kInt8 = false;
  __device__ static bool Fits(int k) { return k % 256 == 0; }
  struct Raw {
    unsigned la[4], lb[4], h[4];  // ql of groups 0/2, ql of groups 1/3, qh
    unsigned sc;                  // the four groups' scales, one byte each
    unsigned short d;
  };
  __device__ static unsigned short U16(const unsigned char* p) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));  // even: weights are 256-byte aligned, blocks 210 bytes
  }
  __device__ static unsigned Word(const unsigned char* p) { return __byte_perm(U16(p), U16(p + 2), 0x5410u); }
  __device__ static Raw Load(const unsigned char* row, int e) {
    const int s = e / 64, c = (s / 2) % 2, m = s % 2;
    const unsigned char* b = row + (e / 256) * 210;
    Raw r;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      r.la[j] = Word(b + 64 * c + 16 * m + 4 * j);
      r.lb[j] = Word(b + 64 * c + 32 + 16 * m + 4 * j);
      r.h[j] = Word(b + 128 + 32 * c + 16 * m + 4 * j);
    }
    // Scales 8c + m + 2k (k = 0..3): byte m of the 16-bit words at 192 + 8c + 2k.
    unsigned sc = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) sc |= ((static_cast<unsigned>(U16(b + 192 + 8 * c + 2 * k)) >> (8 * m)) & 0xFFu) << (8 * k);
    r.sc = sc;
    r.d = U16(b + 208);
    return r;
  }
  template <int kTile>
  __device__ static void Dot(const Raw& r, int e, const float* xs, int xstride, const float* sums, int sstride,
                             float (&acc)[kTile]) {
    const int s = e / 64, c = (s / 2) % 2, m = s % 2;
    const int base = e - 64 * (s % 4) + 128 * c + 16 * m;  // group 0's first element
    const float d = HalfToFloat(r.d);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int at = StagedIndex(base + 32 * k);
      float g[kTile];
#pragma unroll
      for (int t = 0; t < kTile; ++t) g[t] = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const unsigned l = k % 2 == 0 ? r.la[j] : r.lb[j];
        const unsigned lo4 = (k < 2 ? l : l >> 4) & 0x0F0F0F0Fu;
        const unsigned hi2 = k == 0 ? (r.h[j] & 0x03030303u) << 4
                             : k == 1 ? (r.h[j] & 0x0C0C0C0Cu) << 2
                             : k == 2 ? r.h[j] & 0x30303030u
                                      : (r.h[j] & 0xC0C0C0C0u) >> 2;
        DotCodes4<kTile>(lo4 | hi2, xs, xstride, at + 4 * j, g);
      }
      const float scale = d * static_cast<float>(static_cast<signed char>((r.sc >> (8 * k)) & 0xFFu));
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        acc[t] += scale * (64.0f * g[t] - 160.0f * sums[t * sstride + (base + 32 * k) / 16]);
      }
    }
  }
};

// q5_0 / q5_1: one 32-element block per lane step (22 / 24 bytes: only
// 16-bit loads are aligned). Byte i of the 16 code bytes holds element i's
// low 4 bits (low nibble) and element 16 + i's (high nibble); bit i of qh
// is element i's fifth bit, spread into bit 4 of a byte by one multiply.
// As in q6_K, a 5-bit q becomes 2 + q/64, and with S the staged sum of
// each 16 activations (q5_0's min is -16 d):
//   sum_i (d q_i + m) x_i = 64 d sum_i (2 + q_i/64) x_i + (m - 128 d) S.
template <bool kHasMin>
struct LaneQ5 {
  static constexpr int kLane = 32, kRows = 2;  // four rows spilled (silu_mul: 2 x 6 words per row and step)
  static constexpr bool kInt8 = false;
  static constexpr int kQh = kHasMin ? 4 : 2, kQs = kQh + 4;
  __device__ static bool Fits(int k) { return k % 32 == 0; }
  struct Raw {
    unsigned dm;  // f16 d | f16 m (q5_1)
    unsigned qh;
    unsigned qs[4];
  };
  __device__ static unsigned Word(const unsigned char* p) {
    // Even: weights are 256-byte aligned, blocks 22 or 24 bytes.
    return __byte_perm(__ldg(reinterpret_cast<const unsigned short*>(p)),
                       __ldg(reinterpret_cast<const unsigned short*>(p + 2)), 0x5410u);
  }
  __device__ static Raw Load(const unsigned char* row, int e) {
    const unsigned char* b = row + (e / 32) * (kHasMin ? 24 : 22);
    Raw r;
    r.dm = kHasMin ? Word(b) : __ldg(reinterpret_cast<const unsigned short*>(b));
    r.qh = Word(b + kQh);
#pragma unroll
    for (int j = 0; j < 4; ++j) r.qs[j] = Word(b + kQs + 4 * j);
    return r;
  }
  template <int kTile>
  __device__ static void Dot(const Raw& r, int e, const float* xs, int xstride, const float* sums, int sstride,
                             float (&acc)[kTile]) {
    const float d = HalfToFloat(static_cast<unsigned short>(r.dm & 0xFFFFu));
    const float m = kHasMin ? HalfToFloat(static_cast<unsigned short>(r.dm >> 16)) : -16.0f * d;
    const int at = StagedIndex(e);
    float sl[kTile], sh[kTile];
#pragma unroll
    for (int t = 0; t < kTile; ++t) sl[t] = sh[t] = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned bl = (((r.qh >> (4 * j)) & 0xFu) * 0x00204081u & 0x01010101u) << 4;
      const unsigned bh = (((r.qh >> (16 + 4 * j)) & 0xFu) * 0x00204081u & 0x01010101u) << 4;
      // Elements 4j.. and 16 + 4j..: the staged padding comes every 32, so both runs are contiguous.
      DotCodes4<kTile>((r.qs[j] & 0x0F0F0F0Fu) | bl, xs, xstride, at + 4 * j, sl);
      DotCodes4<kTile>(((r.qs[j] >> 4) & 0x0F0F0F0Fu) | bh, xs, xstride, at + 16 + 4 * j, sh);
    }
    const float a = 64.0f * d, b = m - 128.0f * d;
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      acc[t] += a * (sl[t] + sh[t]) + b * (sums[t * sstride + e / 16] + sums[t * sstride + e / 16 + 1]);
    }
  }
};

// The lane of each storage.
template <class S>
struct LaneOf {
  using type = LaneDecode8<S>;
};
template <>
struct LaneOf<StorageF16> {
  using type = LaneHalf16<false>;
};
template <>
struct LaneOf<StorageBF16> {
  using type = LaneHalf16<true>;
};
template <>
struct LaneOf<StorageQ8_0> {
  using type = LaneQ8_0Pair;
};
template <>
struct LaneOf<StorageQ4_K> {
  using type = LaneQ4_K;
};
template <>
struct LaneOf<StorageQ5_0> {
  using type = LaneQ5<false>;
};
template <>
struct LaneOf<StorageQ5_1> {
  using type = LaneQ5<true>;
};
template <>
struct LaneOf<StorageQ6_K> {
  using type = LaneQ6_K;
};

// Storages whose decode also has an int8 lane, taken where K is a multiple
// of 256 (the int8 staging's unit); their own lane covers other K.
template <class S>
struct Int8LaneOf {
  static constexpr bool kHas = false;
};
template <>
struct Int8LaneOf<StorageQ8_0> {
  static constexpr bool kHas = true;
  using type = LaneQ8_0Int8;
};

// Storages whose decode reads a scale table made at load where the launch
// has one (MatmulParams::tables).
template <class S>
struct TableLaneOf {
  static constexpr bool kHas = false;
};
template <>
struct TableLaneOf<StorageQ4_K> {
  static constexpr bool kHas = true;
  using type = LaneQ4_KTable;
};
// The lane matmul_kernel walks a storage's rows with.
template <class S, bool kTable>
struct WalkLaneOf {
  using type = typename LaneOf<S>::type;
};
template <class S>
struct WalkLaneOf<S, true> {
  using type = typename TableLaneOf<S>::type;
};

}  // namespace kiln

// Device decoders of every weight storage the CPU backend reads
// (runtime/formats/quant.h defines what a block means). Each storage is a
// struct with the block geometry and Decode8, which turns elements j..j+7 of
// one block (j a multiple of 8) into floats. Plain types use blocks of 8 so
// every storage is walked the same way; rows of a plain type whose length is
// not a multiple of 8 have a tail that DecodeOne reads.
#pragma once

namespace kiln {

__device__ __forceinline__ float HalfToFloat(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float Bf16ToFloat(unsigned short h) {
  return __uint_as_float(static_cast<unsigned>(h) << 16);
}
// Every block field of 16 bits or more sits at an even offset (all block
// sizes are even), so these are one or two 16-bit loads; odd addresses only
// come from a damaged layout and still read correctly, byte by byte.
__device__ __forceinline__ unsigned short LoadU16(const unsigned char* p) {
  if ((reinterpret_cast<unsigned long long>(p) & 1) == 0) return __ldg(reinterpret_cast<const unsigned short*>(p));
  return static_cast<unsigned short>(p[0] | (p[1] << 8));
}
__device__ __forceinline__ float LoadHalf(const unsigned char* p) { return HalfToFloat(LoadU16(p)); }
__device__ __forceinline__ unsigned LoadU32(const unsigned char* p) {
  if ((reinterpret_cast<unsigned long long>(p) & 3) == 0) return __ldg(reinterpret_cast<const unsigned*>(p));
  return LoadU16(p) | (static_cast<unsigned>(LoadU16(p + 2)) << 16);
}
// 16 bytes at p: one vector load where aligned, else bytes.
__device__ __forceinline__ uint4 Load16(const unsigned char* p) {
  if ((reinterpret_cast<unsigned long long>(p) & 15) == 0) return __ldg(reinterpret_cast<const uint4*>(p));
  uint4 r;
  r.x = LoadU32(p);
  r.y = LoadU32(p + 4);
  r.z = LoadU32(p + 8);
  r.w = LoadU32(p + 12);
  return r;
}
__device__ __forceinline__ uint2 Load8(const unsigned char* p) {
  if ((reinterpret_cast<unsigned long long>(p) & 7) == 0) return __ldg(reinterpret_cast<const uint2*>(p));
  uint2 r;
  r.x = LoadU32(p);
  r.y = LoadU32(p + 4);
  return r;
}

struct StorageF32 {
  static constexpr bool kPlain = true;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 8, kBlockBytes = 32;
  __device__ static void Decode8(const unsigned char* b, int, float* y) {
    const uint4 a = Load16(b), c = Load16(b + 16);
    y[0] = __uint_as_float(a.x); y[1] = __uint_as_float(a.y); y[2] = __uint_as_float(a.z); y[3] = __uint_as_float(a.w);
    y[4] = __uint_as_float(c.x); y[5] = __uint_as_float(c.y); y[6] = __uint_as_float(c.z); y[7] = __uint_as_float(c.w);
  }
  __device__ static float DecodeOne(const unsigned char* row, int i) { return __uint_as_float(LoadU32(row + 4 * i)); }
};

template <bool kBf16>
struct StorageHalfBits {
  static constexpr bool kPlain = true;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 8, kBlockBytes = 16;
  __device__ static float One(unsigned short h) { return kBf16 ? Bf16ToFloat(h) : HalfToFloat(h); }
  __device__ static void Decode8(const unsigned char* b, int, float* y) {
    const uint4 a = Load16(b);
    const unsigned w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      y[2 * i] = One(static_cast<unsigned short>(w[i] & 0xFFFF));
      y[2 * i + 1] = One(static_cast<unsigned short>(w[i] >> 16));
    }
  }
  __device__ static float DecodeOne(const unsigned char* row, int i) { return One(LoadU16(row + 2 * i)); }
};
using StorageF16 = StorageHalfBits<false>;
using StorageBF16 = StorageHalfBits<true>;

// q8_0 (34 bytes): f16 d | int8 q[32].
struct StorageQ8_0 {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 32;  // a whole block per lane in the decode GEMV
  static constexpr int kBlockElems = 32, kBlockBytes = 34;
  __device__ static void Decode32(const unsigned char* b, int, float* y) {
    const float d = LoadHalf(b);
    unsigned short q[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) q[i] = LoadU16(b + 2 + 2 * i);
#pragma unroll
    for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<signed char>((q[i / 2] >> (8 * (i % 2))) & 0xFF));
  }
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    const float d = LoadHalf(b);
    const uint2 q = Load8(b + 2 + j);
    const unsigned w[2] = {q.x, q.y};
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * static_cast<float>(static_cast<signed char>((w[i / 4] >> (8 * (i % 4))) & 0xFF));
  }
};

// q4_0 (18 bytes) / q4_1 (20 bytes): [f16 d | f16 m] | qs[16]; element e < 16
// is the low nibble of qs[e], e >= 16 the high nibble of qs[e - 16].
template <bool kHasMin>
struct StorageQ4Legacy {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 32, kBlockBytes = kHasMin ? 20 : 18;
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    const float d = LoadHalf(b);
    const float m = kHasMin ? LoadHalf(b + 2) : -8.0f * d;
    const unsigned char* qs = b + (kHasMin ? 4 : 2) + (j & 15);
    const int shift = j >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * static_cast<float>((qs[i] >> shift) & 0x0F) + m;
  }
};
using StorageQ4_0 = StorageQ4Legacy<false>;
using StorageQ4_1 = StorageQ4Legacy<true>;

// q5_0 (22 bytes) / q5_1 (24 bytes): [f16 d | f16 m] | qh[4] | qs[16].
template <bool kHasMin>
struct StorageQ5Legacy {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 32, kBlockBytes = kHasMin ? 24 : 22;
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    const float d = LoadHalf(b);
    const float m = kHasMin ? LoadHalf(b + 2) : -16.0f * d;
    const unsigned qh = LoadU32(b + (kHasMin ? 4 : 2));
    const unsigned char* qs = b + (kHasMin ? 8 : 6) + (j & 15);
    const int shift = j >= 16 ? 4 : 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = ((qs[i] >> shift) & 0x0F) | (((qh >> (j + i)) & 1) << 4);
      y[i] = d * static_cast<float>(q) + m;
    }
  }
};
using StorageQ5_0 = StorageQ5Legacy<false>;
using StorageQ5_1 = StorageQ5Legacy<true>;

// q2_K (84 bytes): scales[16] | qs[64] | f16 d | f16 dmin.
struct StorageQ2_K {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 256, kBlockBytes = 84;
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    const float d = LoadHalf(b + 80), dmin = LoadHalf(b + 82);
    const unsigned char sc = b[j / 16];
    const float scale = d * static_cast<float>(sc & 0x0F), min = dmin * static_cast<float>(sc >> 4);
    const unsigned char* qs = b + 16 + (j / 128) * 32 + (j % 32);
    const int shift = 2 * ((j % 128) / 32);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = scale * static_cast<float>((qs[i] >> shift) & 3) - min;
  }
};

// q3_K (110 bytes): hmask[32] | qs[64] | scales[12] | f16 d.
struct StorageQ3_K {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 256, kBlockBytes = 110;
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    const unsigned char* scales = b + 96;
    const int s = j / 16;
    const int low = s < 8 ? (scales[s] & 0x0F) : (scales[s - 8] >> 4);
    const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    const float scale = LoadHalf(b + 108) * static_cast<float>((low | (high << 4)) - 32);
    const unsigned char* qs = b + 32 + (j / 128) * 32 + (j % 32);
    const unsigned char* hm = b + (j % 32);
    const int shift = 2 * ((j % 128) / 32);
    const int hbit = j / 32;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = ((qs[i] >> shift) & 3) - (((hm[i] >> hbit) & 1) ? 0 : 4);
      y[i] = scale * static_cast<float>(q);
    }
  }
};

// The 6-bit scale and min of sub-block s of q4_K / q5_K.
__device__ __forceinline__ void ScaleMinK4(const unsigned char* t, int s, int* scale, int* min) {
  if (s < 4) {
    *scale = t[s] & 63;
    *min = t[s + 4] & 63;
  } else {
    *scale = (t[s + 4] & 0x0F) | ((t[s - 4] >> 6) << 4);
    *min = (t[s + 4] >> 4) | ((t[s] >> 6) << 4);
  }
}

// q4_K (144 bytes): f16 d | f16 dmin | scales[12] | qs[128]; element
// e = 64c + 32h + l is nibble h of qs[32c + l].
struct StorageQ4_K {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 32;  // one sub-block per lane in the decode GEMV
  static constexpr int kBlockElems = 256, kBlockBytes = 144;
  // Sub-block j / 32: nibble (j / 32) % 2 of the 32 bytes qs[32c ..], c = j / 64.
  __device__ static void Decode32(const unsigned char* b, int j, float* y) {
    int sc, mn;
    ScaleMinK4(b + 4, j / 32, &sc, &mn);
    const unsigned dm = LoadU32(b);
    const float scale = HalfToFloat(static_cast<unsigned short>(dm & 0xFFFF)) * static_cast<float>(sc);
    const float min = HalfToFloat(static_cast<unsigned short>(dm >> 16)) * static_cast<float>(mn);
    const uint4 a = Load16(b + 16 + (j / 64) * 32), c = Load16(b + 32 + (j / 64) * 32);
    const unsigned w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
    const int shift = 4 * ((j / 32) % 2);
#pragma unroll
    for (int i = 0; i < 32; ++i) y[i] = scale * static_cast<float>((w[i / 4] >> (8 * (i % 4) + shift)) & 0x0F) - min;
  }
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    int sc, mn;
    ScaleMinK4(b + 4, j / 32, &sc, &mn);
    const float scale = LoadHalf(b) * static_cast<float>(sc), min = LoadHalf(b + 2) * static_cast<float>(mn);
    const uint2 q = Load8(b + 16 + (j / 64) * 32 + (j % 32));
    const int shift = 4 * ((j / 32) % 2);
    const unsigned w[2] = {q.x >> shift, q.y >> shift};
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = scale * static_cast<float>((w[i / 4] >> (8 * (i % 4))) & 0x0F) - min;
  }
};

// q5_K (176 bytes): f16 d | f16 dmin | scales[12] | qh[32] | qs[128].
struct StorageQ5_K {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 256, kBlockBytes = 176;
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    int sc, mn;
    ScaleMinK4(b + 4, j / 32, &sc, &mn);
    const float scale = LoadHalf(b) * static_cast<float>(sc), min = LoadHalf(b + 2) * static_cast<float>(mn);
    const unsigned char* qh = b + 16 + (j % 32);
    const unsigned char* qs = b + 48 + (j / 64) * 32 + (j % 32);
    const int shift = 4 * ((j / 32) % 2);
    const int hbit = j / 32;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = ((qs[i] >> shift) & 0x0F) | (((qh[i] >> hbit) & 1) << 4);
      y[i] = scale * static_cast<float>(q) - min;
    }
  }
};

// q6_K (210 bytes): ql[128] | qh[64] | int8 scales[16] | f16 d.
struct StorageQ6_K {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = 256, kBlockBytes = 210;
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    const float scale = LoadHalf(b + 208) * static_cast<float>(static_cast<signed char>(b[192 + j / 16]));
    const int c = j / 128, k = (j % 128) / 32, l = j % 32;
    const unsigned char* ql = b + 64 * c + 32 * (k % 2) + l;
    const unsigned char* qh = b + 128 + 32 * c + l;
    const int lshift = 4 * (k / 2), hshift = 2 * k;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = (((ql[i] >> lshift) & 0x0F) | (((qh[i] >> hshift) & 3) << 4)) - 32;
      y[i] = scale * static_cast<float>(q);
    }
  }
};

// kiln's grouped int4 / int2 (runtime/formats/quant.h): per group of kGroup
// elements f16 d | f16 m | codes, value = d * q + m.
template <int kBits, int kGroup>
struct StorageGrouped {
  static constexpr bool kPlain = false;
  static constexpr int kLaneElems = 8;
  static constexpr int kBlockElems = kGroup, kBlockBytes = kGroup * kBits / 8 + 4;
  __device__ static void Decode8(const unsigned char* b, int j, float* y) {
    const float d = LoadHalf(b), m = LoadHalf(b + 2);
    // Eight codes are kBits bytes: one 32-bit word for int4, 16 bits for int2.
    const unsigned char* codes = b + 4 + j * kBits / 8;
    const unsigned w = kBits == 4 ? LoadU32(codes) : static_cast<unsigned>(LoadU16(codes));
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = d * static_cast<float>((w >> (kBits * i)) & ((1 << kBits) - 1)) + m;
  }
};
template <int kGroup>
using StorageInt4 = StorageGrouped<4, kGroup>;
template <int kGroup>
using StorageInt2 = StorageGrouped<2, kGroup>;

// kLane elements j.. of one block: Decode8 or, where a storage has one, its
// wider decoder (fewer, wider loads per lane).
template <class S, int kLane>
__device__ __forceinline__ void DecodeLane(const unsigned char* b, int j, float* y) {
  if constexpr (kLane == 8) {
    S::Decode8(b, j, y);
  } else {
    S::Decode32(b, j, y);
  }
}

// Element i of a row of K elements (any storage; the slow path for tails and
// embedding of odd widths).
template <class S>
__device__ __forceinline__ float DecodeElement(const unsigned char* row, int i) {
  if constexpr (S::kPlain) return S::DecodeOne(row, i);
  float y[8];
  S::Decode8(row + (i / S::kBlockElems) * S::kBlockBytes, (i % S::kBlockElems) & ~7, y);
  return y[i & 7];
}

}  // namespace kiln

// Reference conversions between f32 and the ggml storage types.
//
// Every block format is handled by one pair of functions working on a single
// block (`Dequant*Block` / `Quant*Block`); a table at the bottom maps a type to
// its pair, and the two public entry points validate sizes once and then walk
// the blocks. Blocks are read and written byte by byte (little-endian, no
// alignment assumed), so the code is independent of the host's layout rules.
//
// The layouts are ggml's `block_*` structs (ggml-common.h); the meaning of each
// block is ggml's `dequantize_row_*`. Element index formulas are spelled out
// in the comments because those are what a kernel author needs to know.

#include "runtime/formats/quant.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "runtime/util/half.h"

namespace kiln {
namespace {

constexpr int kQK = 32;    // block size of the legacy formats (q4_0 ... q8_0)
constexpr int kQKK = 256;  // super-block size of the k-quants

// ---------------------------------------------------------------------------
// Byte-level helpers.

uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
float LoadF16(const uint8_t* p) { return F16ToF32(LoadU16(p)); }

// Stores `v` as fp16 and returns the value actually stored, so that quantisers
// compute their integer codes against the scale the decoder will see. Scales
// beyond the fp16 range are saturated (the block then clips instead of
// decoding to inf).
float StoreF16(uint8_t* p, float v) {
  constexpr float kMaxF16 = 65504.0f;
  v = std::clamp(v, -kMaxF16, kMaxF16);
  const uint16_t h = F32ToF16(v);
  StoreU16(p, h);
  return F16ToF32(h);
}

// Round to nearest and clamp to [lo, hi]. Written so that no float-to-int
// conversion can overflow (a NaN ends up at lo).
int RoundClamp(float v, int lo, int hi) {
  const float r = std::nearbyint(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// x / d rounded into [lo, hi]; 0 (clamped into the range) where d is zero.
int QuantizeValue(float x, float d, int lo, int hi) {
  if (d == 0.0f) return std::clamp(0, lo, hi);
  return RoundClamp(x / d, lo, hi);
}

// The element of largest magnitude, with its sign (the legacy symmetric
// formats map it to the negative end of their range, which is one step longer).
float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// ---------------------------------------------------------------------------
// Plain types: one element per "block".

void DequantF32(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }
void QuantF32(const float* x, uint8_t* b) { std::memcpy(b, x, 4); }
void DequantF16(const uint8_t* b, float* y) { *y = LoadF16(b); }
void QuantF16(const float* x, uint8_t* b) { StoreU16(b, F32ToF16(*x)); }
void DequantBF16(const uint8_t* b, float* y) { *y = BF16ToF32(LoadU16(b)); }
void QuantBF16(const float* x, uint8_t* b) { StoreU16(b, F32ToBF16(*x)); }

// ---------------------------------------------------------------------------
// Legacy 32-element formats. In the 4- and 5-bit ones byte j of qs holds
// element j in its low nibble and element j + 16 in its high nibble.
//
// Their quantisers follow the rounding of ggml's reference quantisers
// (codes computed against the f32 scale before it is rounded to f16; q8_0
// rounds half away from zero, the others add a half and truncate), so our
// blocks can be checked byte for byte against llama-quantize's output.

// 1 / d, or 0 for an all-zero block.
float Inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Truncation of v (known to be >= -1 up to rounding) clamped to [0, hi]:
// ggml's "(int8_t)(v + offset)" step, without its overflow.
int TruncClamp(float v, int hi) {
  if (!(v >= 0.0f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// q8_0 (34 bytes): f16 d | int8 qs[32].  y[i] = d * qs[i].
void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  for (int i = 0; i < kQK; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}
void QuantQ8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = Inverse(d);
  StoreF16(b, d);
  for (int i = 0; i < kQK; ++i) {
    const float r = std::clamp(std::round(x[i] * id), -127.0f, 127.0f);
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(r));
  }
}

// q4_0 (18 bytes): f16 d | qs[16].  y[i] = d * (q[i] - 8), q in 0..15.
void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}
void QuantQ4_0(const float* x, uint8_t* b) {
  // The element of largest magnitude becomes code 0 (-8 * d).
  const float d = SignedAbsMax(x, kQK) / -8.0f;
  const float id = Inverse(d);
  StoreF16(b, d);
  uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    const int q0 = TruncClamp(x[j] * id + 8.5f, 15);
    const int q1 = TruncClamp(x[j + 16] * id + 8.5f, 15);
    qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// q4_1 (20 bytes): f16 d | f16 m | qs[16].  y[i] = d * q[i] + m, q in 0..15.
void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = LoadF16(b), m = LoadF16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}
void QuantQ4_1(const float* x, uint8_t* b) {
  const auto [lo, hi] = std::minmax_element(x, x + kQK);
  const float m = *lo;
  const float d = (*hi - m) / 15.0f;
  const float id = Inverse(d);
  StoreF16(b, d);
  StoreF16(b + 2, m);
  uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const int q0 = TruncClamp((x[j] - m) * id + 0.5f, 15);
    const int q1 = TruncClamp((x[j + 16] - m) * id + 0.5f, 15);
    qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// The fifth bits of q5_0/q5_1: a little-endian uint32 whose bit i belongs to
// element i.
uint32_t LoadQh(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
void StoreQh(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
// Element i's 5-bit code from the nibbles and the fifth bits.
int Q5Code(const uint8_t* qs, uint32_t qh, int i) {
  const int nibble = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
  return nibble | static_cast<int>(((qh >> i) & 1) << 4);
}
// Packs 32 5-bit codes into qh (4 bytes) followed by qs (16 bytes).
void PackQ5(const int* q, uint8_t* qh_qs) {
  uint32_t qh = 0;
  uint8_t* qs = qh_qs + 4;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
  }
  for (int i = 0; i < kQK; ++i) qh |= static_cast<uint32_t>((q[i] >> 4) & 1) << i;
  StoreQh(qh_qs, qh);
}

// q5_0 (22 bytes): f16 d | qh[4] | qs[16].  y[i] = d * (q[i] - 16), q in 0..31.
void DequantQ5_0(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const uint32_t qh = LoadQh(b + 2);
  for (int i = 0; i < kQK; ++i) y[i] = d * static_cast<float>(Q5Code(b + 6, qh, i) - 16);
}
void QuantQ5_0(const float* x, uint8_t* b) {
  const float d = SignedAbsMax(x, kQK) / -16.0f;
  const float id = Inverse(d);
  StoreF16(b, d);
  int q[kQK];
  for (int i = 0; i < kQK; ++i) q[i] = TruncClamp(x[i] * id + 16.5f, 31);
  PackQ5(q, b + 2);
}

// q5_1 (24 bytes): f16 d | f16 m | qh[4] | qs[16].  y[i] = d * q[i] + m.
void DequantQ5_1(const uint8_t* b, float* y) {
  const float d = LoadF16(b), m = LoadF16(b + 2);
  const uint32_t qh = LoadQh(b + 4);
  for (int i = 0; i < kQK; ++i) y[i] = d * static_cast<float>(Q5Code(b + 8, qh, i)) + m;
}
void QuantQ5_1(const float* x, uint8_t* b) {
  const auto [lo, hi] = std::minmax_element(x, x + kQK);
  const float m = *lo;
  const float d = (*hi - m) / 31.0f;
  const float id = Inverse(d);
  StoreF16(b, d);
  StoreF16(b + 2, m);
  int q[kQK];
  for (int i = 0; i < kQK; ++i) q[i] = TruncClamp((x[i] - m) * id + 0.5f, 31);
  PackQ5(q, b + 4);
}

// ---------------------------------------------------------------------------
// Scale search for the k-quants. Each sub-block gets its own scale (and, for
// the asymmetric formats, min); the super-block then stores those in a few
// bits relative to one or two f16 factors. The search tries a handful of
// candidate scales, refits each by least squares, and keeps the one with the
// smallest squared error: cheap, and much better than plain min/max on
// Gaussian-like weights.

// Fits x[i] ~ scale * L[i] + offset with L in 0..nmax. Starts from the
// min/max fit and tries narrower and wider ranges, each refit by least
// squares, keeping the smallest squared error. With `offset_at_most_zero`
// the range's lower end and the fitted offset stay at or below 0 (the
// k-quants: their mins are unsigned multiples of one shared dmin, so they
// must all have one sign; like ggml's quantiser we keep the lower end <= 0).
void FitAffine(const float* x, int n, int nmax, bool offset_at_most_zero, float* scale, float* offset) {
  const auto [lo_it, hi_it] = std::minmax_element(x, x + n);
  const float lo = offset_at_most_zero ? std::min(0.0f, *lo_it) : *lo_it, hi = *hi_it;
  *scale = (hi - lo) / static_cast<float>(nmax);
  *offset = lo;
  if (!(hi > lo)) return;
  auto squared_error = [&](double s, double off) {
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e =
          s * QuantizeValue(static_cast<float>(x[i] - off), static_cast<float>(s), 0, nmax) + off -
          x[i];
      err += e * e;
    }
    return err;
  };
  double best = squared_error(*scale, *offset);
  for (int step = -10; step <= 10; ++step) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / (hi - lo);
    double sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      const double l = RoundClamp(iscale * (x[i] - lo), 0, nmax);
      sl += l;
      sll += l * l;
      sx += x[i];
      sxl += x[i] * l;
    }
    const double det = n * sll - sl * sl;
    if (det <= 0) continue;
    double s = (n * sxl - sl * sx) / det;
    double off = (sll * sx - sl * sxl) / det;
    if (offset_at_most_zero && off > 0) {
      off = 0;
      s = sxl / sll;
    }
    if (s <= 0) continue;
    const double err = squared_error(s, off);
    if (err < best) {
      best = err;
      *scale = static_cast<float>(s);
      *offset = static_cast<float>(off);
    }
  }
}

// x[i] ~ scale * L[i] - min with scale >= 0 and min >= 0 (the k-quants).
void FitScaleMin(const float* x, int n, int nmax, float* scale, float* min) {
  float offset;
  FitAffine(x, n, nmax, /*offset_at_most_zero=*/true, scale, &offset);
  *min = -offset;
}

// Fits x[i] ~ scale * L[i] with L in lo..hi (lo < 0 < hi). The scale may be
// negative: that lets the longer negative end of the range cover the element
// of largest magnitude whatever its sign.
float FitScaleSym(const float* x, int n, int lo, int hi) {
  const float max = SignedAbsMax(x, n);
  if (max == 0.0f) return 0.0f;
  float best_scale = 0.0f;
  double best = std::numeric_limits<double>::infinity();
  for (int end : {lo, hi}) {
    for (int step = -5; step <= 5; ++step) {
      const float target = static_cast<float>(end) + 0.1f * static_cast<float>(step);
      if (target == 0.0f) continue;
      const float iscale = target / max;
      double sxl = 0, sll = 0;
      for (int i = 0; i < n; ++i) {
        const double l = RoundClamp(iscale * x[i], lo, hi);
        sxl += x[i] * l;
        sll += l * l;
      }
      if (sll == 0) continue;
      const double s = sxl / sll;
      double err = 0;
      for (int i = 0; i < n; ++i) {
        const double e = s * QuantizeValue(x[i], static_cast<float>(s), lo, hi) - x[i];
        err += e * e;
      }
      if (err < best) {
        best = err;
        best_scale = static_cast<float>(s);
      }
    }
  }
  return best_scale;
}

// Quantises the non-negative sub-block values v[0..n) to 0..qmax against one
// f16 factor written at `out`; returns that factor and fills q.
float QuantizeScalesUnsigned(const float* v, int n, int qmax, uint8_t* out, int* q) {
  const float max = *std::max_element(v, v + n);
  const float d = StoreF16(out, max / static_cast<float>(qmax));
  for (int i = 0; i < n; ++i) q[i] = QuantizeValue(v[i], d, 0, qmax);
  return d;
}

// Quantises signed sub-block scales to lo..hi against one f16 factor at `out`
// (the largest magnitude maps to the longer negative end `lo`).
float QuantizeScalesSigned(const float* v, int n, int lo, int hi, uint8_t* out, int* q) {
  const float d = StoreF16(out, SignedAbsMax(v, n) / static_cast<float>(lo));
  for (int i = 0; i < n; ++i) q[i] = QuantizeValue(v[i], d, lo, hi);
  return d;
}

// ---------------------------------------------------------------------------
// q2_K (84 bytes): scales[16] | qs[64] | f16 d | f16 dmin.
// 16 sub-blocks of 16. scales[s] = scale (low nibble) | min (high nibble).
// Element e = 128c + 32j + l (c < 2, j < 4, l < 32) is 2 bits at shift 2j of
// qs[32c + l]; its sub-block is e / 16.
// y[e] = d * scale * q - dmin * min, q in 0..3.

int Q2Q3ByteOf(int e) { return (e / 128) * 32 + e % 32; }
int Q2Q3ShiftOf(int e) { return 2 * ((e % 128) / 32); }

void DequantQ2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = LoadF16(b + 80), dmin = LoadF16(b + 82);
  for (int e = 0; e < kQKK; ++e) {
    const uint8_t sc = scales[e / 16];
    const int q = (qs[Q2Q3ByteOf(e)] >> Q2Q3ShiftOf(e)) & 3;
    y[e] = d * static_cast<float>(sc & 0x0F) * static_cast<float>(q) -
           dmin * static_cast<float>(sc >> 4);
  }
}
void QuantQ2_K(const float* x, uint8_t* b) {
  float scale[16], min[16];
  for (int s = 0; s < 16; ++s) FitScaleMin(x + 16 * s, 16, 3, &scale[s], &min[s]);
  int ls[16], lm[16];
  const float d = QuantizeScalesUnsigned(scale, 16, 15, b + 80, ls);
  const float dmin = QuantizeScalesUnsigned(min, 16, 15, b + 82, lm);
  for (int s = 0; s < 16; ++s) b[s] = static_cast<uint8_t>(ls[s] | (lm[s] << 4));
  uint8_t* qs = b + 16;
  std::memset(qs, 0, 64);
  for (int e = 0; e < kQKK; ++e) {
    const float sd = d * static_cast<float>(ls[e / 16]);
    const float sm = dmin * static_cast<float>(lm[e / 16]);
    const int q = QuantizeValue(x[e] + sm, sd, 0, 3);
    qs[Q2Q3ByteOf(e)] |= static_cast<uint8_t>(q << Q2Q3ShiftOf(e));
  }
}

// ---------------------------------------------------------------------------
// q3_K (110 bytes): hmask[32] | qs[64] | scales[12] | f16 d.
// 16 sub-blocks of 16 with 6-bit scales stored with a +32 bias. Scale s:
// low 4 bits in scales[s] (s < 8) or the high nibble of scales[s - 8];
// high 2 bits at bit 2*(s / 4) of scales[8 + s % 4].
// Element e has its low 2 bits placed as in q2_K and its third bit at bit
// e / 32 of hmask[e % 32]; a clear third bit means the code is 4 lower.
// y[e] = d * (scale - 32) * q, q in -4..3.

int Q3Scale(const uint8_t* scales, int s) {
  const int low = s < 8 ? (scales[s] & 0x0F) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void DequantQ3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = LoadF16(b + 108);
  for (int e = 0; e < kQKK; ++e) {
    const int low = (qs[Q2Q3ByteOf(e)] >> Q2Q3ShiftOf(e)) & 3;
    const bool high = (hmask[e % 32] >> (e / 32)) & 1;
    const int q = low - (high ? 0 : 4);
    y[e] = d * static_cast<float>(Q3Scale(scales, e / 16)) * static_cast<float>(q);
  }
}
void QuantQ3_K(const float* x, uint8_t* b) {
  float scale[16];
  for (int s = 0; s < 16; ++s) scale[s] = FitScaleSym(x + 16 * s, 16, -4, 3);
  int ls[16];
  const float d = QuantizeScalesSigned(scale, 16, -32, 31, b + 108, ls);
  uint8_t* hmask = b;
  uint8_t* qs = b + 32;
  uint8_t* scales = b + 96;
  std::memset(b, 0, 108);
  for (int s = 0; s < 16; ++s) {
    const int v = ls[s] + 32;  // 0..63
    if (s < 8) {
      scales[s] |= static_cast<uint8_t>(v & 0x0F);
    } else {
      scales[s - 8] |= static_cast<uint8_t>((v & 0x0F) << 4);
    }
    scales[8 + s % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (s / 4)));
  }
  for (int e = 0; e < kQKK; ++e) {
    const int q = QuantizeValue(x[e], d * static_cast<float>(ls[e / 16]), -4, 3) + 4;  // 0..7
    qs[Q2Q3ByteOf(e)] |= static_cast<uint8_t>((q & 3) << Q2Q3ShiftOf(e));
    if (q & 4) hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
  }
}

// ---------------------------------------------------------------------------
// q4_K and q5_K share a 12-byte table of eight 6-bit scales and eight 6-bit
// mins (ggml's get_scale_min_k4). For sub-block s < 4: scale = bytes[s] & 63,
// min = bytes[s + 4] & 63. For s >= 4: the low 4 bits are the nibbles of
// bytes[s + 4] (scale low, min high) and the top 2 bits are the top 2 bits of
// bytes[s - 4] (scale) and bytes[s] (min).

void PutScaleMinK4(uint8_t* t, const int* scale, const int* min) {
  std::memset(t, 0, 12);
  for (int s = 0; s < 8; ++s) {
    if (s < 4) {
      t[s] |= static_cast<uint8_t>(scale[s]);
      t[s + 4] |= static_cast<uint8_t>(min[s]);
    } else {
      t[s + 4] = static_cast<uint8_t>((scale[s] & 0x0F) | ((min[s] & 0x0F) << 4));
      t[s - 4] |= static_cast<uint8_t>((scale[s] >> 4) << 6);
      t[s] |= static_cast<uint8_t>((min[s] >> 4) << 6);
    }
  }
}

// Shared by q4_K and q5_K: fits the eight 32-element sub-blocks, writes d,
// dmin (at b, b + 2) and the scale table (at b + 4), and returns the effective
// per-sub-block scale and min.
void QuantKScales(const float* x, int nmax, uint8_t* b, float* sd, float* sm) {
  float scale[8], min[8];
  for (int s = 0; s < 8; ++s) FitScaleMin(x + 32 * s, 32, nmax, &scale[s], &min[s]);
  int ls[8], lm[8];
  const float d = QuantizeScalesUnsigned(scale, 8, 63, b, ls);
  const float dmin = QuantizeScalesUnsigned(min, 8, 63, b + 2, lm);
  PutScaleMinK4(b + 4, ls, lm);
  for (int s = 0; s < 8; ++s) {
    sd[s] = d * static_cast<float>(ls[s]);
    sm[s] = dmin * static_cast<float>(lm[s]);
  }
}

// q4_K (144 bytes): f16 d | f16 dmin | scales[12] | qs[128].
// Eight sub-blocks of 32. Element e = 64c + 32h + l (c < 4, h < 2, l < 32) is
// nibble h (0 = low) of qs[32c + l]; its sub-block is e / 32.
// y[e] = d * scale * q - dmin * min, q in 0..15.
void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = LoadF16(b), dmin = LoadF16(b + 2);
  const uint8_t* qs = b + 16;
  for (int e = 0; e < kQKK; ++e) {
    int sc, m;
    GetScaleMinK4(b + 4, e / 32, &sc, &m);
    const int q = (qs[(e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F;
    y[e] = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}
void QuantQ4_K(const float* x, uint8_t* b) {
  float sd[8], sm[8];
  QuantKScales(x, 15, b, sd, sm);
  uint8_t* qs = b + 16;
  std::memset(qs, 0, 128);
  for (int e = 0; e < kQKK; ++e) {
    const int q = QuantizeValue(x[e] + sm[e / 32], sd[e / 32], 0, 15);
    qs[(e / 64) * 32 + e % 32] |= static_cast<uint8_t>(q << (4 * ((e / 32) % 2)));
  }
}

// q5_K (176 bytes): f16 d | f16 dmin | scales[12] | qh[32] | qs[128].
// As q4_K, plus a fifth bit for element e at bit e / 32 of qh[e % 32].
// y[e] = d * scale * q - dmin * min, q in 0..31.
void DequantQ5_K(const uint8_t* b, float* y) {
  const float d = LoadF16(b), dmin = LoadF16(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int e = 0; e < kQKK; ++e) {
    int sc, m;
    GetScaleMinK4(b + 4, e / 32, &sc, &m);
    const int low = (qs[(e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0x0F;
    const int q = low | (((qh[e % 32] >> (e / 32)) & 1) << 4);
    y[e] = d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
  }
}
void QuantQ5_K(const float* x, uint8_t* b) {
  float sd[8], sm[8];
  QuantKScales(x, 31, b, sd, sm);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32 + 128);
  for (int e = 0; e < kQKK; ++e) {
    const int q = QuantizeValue(x[e] + sm[e / 32], sd[e / 32], 0, 31);
    qs[(e / 64) * 32 + e % 32] |= static_cast<uint8_t>((q & 0x0F) << (4 * ((e / 32) % 2)));
    qh[e % 32] |= static_cast<uint8_t>((q >> 4) << (e / 32));
  }
}

// ---------------------------------------------------------------------------
// q6_K (210 bytes): ql[128] | qh[64] | int8 scales[16] | f16 d.
// 16 sub-blocks of 16 with signed 8-bit scales. Element e = 128c + 32k + l
// (c < 2, k < 4, l < 32): low 4 bits are nibble k / 2 of ql[64c + 32(k % 2) + l],
// high 2 bits are bits 2k..2k+1 of qh[32c + l]; its sub-block is e / 16.
// y[e] = d * scale * (q - 32), q in 0..63.

int Q6LowByte(int e) { return 64 * (e / 128) + 32 * ((e % 128) / 32 % 2) + e % 32; }
int Q6LowShift(int e) { return 4 * (((e % 128) / 32) / 2); }
int Q6HighByte(int e) { return 32 * (e / 128) + e % 32; }
int Q6HighShift(int e) { return 2 * ((e % 128) / 32); }

void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const uint8_t* scales = b + 192;
  const float d = LoadF16(b + 208);
  for (int e = 0; e < kQKK; ++e) {
    const int low = (ql[Q6LowByte(e)] >> Q6LowShift(e)) & 0x0F;
    const int high = (qh[Q6HighByte(e)] >> Q6HighShift(e)) & 3;
    const int q = (low | (high << 4)) - 32;
    y[e] = d * static_cast<float>(static_cast<int8_t>(scales[e / 16])) * static_cast<float>(q);
  }
}
void QuantQ6_K(const float* x, uint8_t* b) {
  float scale[16];
  for (int s = 0; s < 16; ++s) scale[s] = FitScaleSym(x + 16 * s, 16, -32, 31);
  int ls[16];
  const float d = QuantizeScalesSigned(scale, 16, -128, 127, b + 208, ls);
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  std::memset(b, 0, 192);
  for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(ls[s]));
  for (int e = 0; e < kQKK; ++e) {
    const int q = QuantizeValue(x[e], d * static_cast<float>(ls[e / 16]), -32, 31) + 32;
    ql[Q6LowByte(e)] |= static_cast<uint8_t>((q & 0x0F) << Q6LowShift(e));
    qh[Q6HighByte(e)] |= static_cast<uint8_t>((q >> 4) << Q6HighShift(e));
  }
}

// ---------------------------------------------------------------------------
// kiln's group-wise int4 / int2 (layout in quant.h): per group f16 d | f16 m |
// codes, y[j] = d * q[j] + m. Code j sits at bits `bits * (j % per_byte)` of
// codes byte j / per_byte, so int4 puts even j in the low nibble.

struct GroupedLayout {
  int bits;      // per code
  int per_byte;  // codes per byte
  int qmax;      // largest code
};

GroupedLayout LayoutOf(GroupedKind kind) {
  return kind == GroupedKind::kInt4 ? GroupedLayout{4, 2, 15} : GroupedLayout{2, 4, 3};
}

int GroupedCode(const uint8_t* codes, GroupedLayout l, int j) {
  return (codes[j / l.per_byte] >> (l.bits * (j % l.per_byte))) & l.qmax;
}

void DequantGroup(GroupedLayout l, int group, const uint8_t* b, float* y) {
  const float d = LoadF16(b), m = LoadF16(b + 2);
  for (int j = 0; j < group; ++j) y[j] = d * static_cast<float>(GroupedCode(b + 4, l, j)) + m;
}

void QuantGroup(GroupedLayout l, int group, const float* x, uint8_t* b) {
  float scale, offset;
  // The stored m is a free f16: no sign constraint on the offset.
  FitAffine(x, group, l.qmax, /*offset_at_most_zero=*/false, &scale, &offset);
  const float d = StoreF16(b, scale);
  const float m = StoreF16(b + 2, offset);
  uint8_t* codes = b + 4;
  std::memset(codes, 0, static_cast<size_t>(group / l.per_byte));
  for (int j = 0; j < group; ++j) {
    const int q = QuantizeValue(x[j] - m, d, 0, l.qmax);
    codes[j / l.per_byte] |= static_cast<uint8_t>(q << (l.bits * (j % l.per_byte)));
  }
}

// Checks group and sizes for DequantizeGrouped / QuantizeGrouped.
absl::Status CheckGrouped(const char* op, GroupedKind kind, int64_t group, size_t elems,
                          size_t bytes) {
  const std::string_view name = GroupedKindName(kind);
  if (group < 8 || group % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s: group size must be a positive multiple of 8, got %d", op, name, group));
  }
  if (elems % static_cast<size_t>(group) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s: %d elements is not a whole number of %d-element groups", op, name, elems, group));
  }
  const std::optional<uint64_t> want = GroupedRowBytes(kind, group, elems);
  if (!want || *want != bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s (group %d): %d elements take %d bytes, but the buffer holds %d bytes", op, name,
        group, elems, want.value_or(0), bytes));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Dispatch.

using DequantBlockFn = void (*)(const uint8_t* block, float* out);
using QuantBlockFn = void (*)(const float* in, uint8_t* block);

struct Codec {
  GgmlType type;
  DequantBlockFn dequant;
  QuantBlockFn quant;
  bool finite_only;  // block formats cannot represent inf/nan
};

constexpr Codec kCodecs[] = {
    {GgmlType::kF32, DequantF32, QuantF32, false},
    {GgmlType::kF16, DequantF16, QuantF16, false},
    {GgmlType::kBF16, DequantBF16, QuantBF16, false},
    {GgmlType::kQ8_0, DequantQ8_0, QuantQ8_0, true},
    {GgmlType::kQ4_0, DequantQ4_0, QuantQ4_0, true},
    {GgmlType::kQ4_1, DequantQ4_1, QuantQ4_1, true},
    {GgmlType::kQ5_0, DequantQ5_0, QuantQ5_0, true},
    {GgmlType::kQ5_1, DequantQ5_1, QuantQ5_1, true},
    {GgmlType::kQ2_K, DequantQ2_K, QuantQ2_K, true},
    {GgmlType::kQ3_K, DequantQ3_K, QuantQ3_K, true},
    {GgmlType::kQ4_K, DequantQ4_K, QuantQ4_K, true},
    {GgmlType::kQ5_K, DequantQ5_K, QuantQ5_K, true},
    {GgmlType::kQ6_K, DequantQ6_K, QuantQ6_K, true},
};

// Geometry of a supported type, checked against the sizes of both buffers.
struct Plan {
  const Codec* codec;
  size_t blocks;
  size_t block_elems;
  size_t block_bytes;
};

absl::StatusOr<Plan> MakePlan(const char* op, GgmlType type, size_t elems, size_t bytes) {
  const auto info = GetGgmlTypeInfo(static_cast<uint32_t>(type));
  if (!info) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unknown ggml type id %d", op, static_cast<uint32_t>(type)));
  }
  const Codec* codec = nullptr;
  for (const Codec& c : kCodecs) {
    if (c.type == type) codec = &c;
  }
  if (codec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: type %s is not supported", op, info->name));
  }
  const auto block_elems = static_cast<size_t>(info->block_elems);
  if (elems % block_elems != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %s: %d elements is not a whole number of %d-element blocks", op,
                        info->name, elems, block_elems));
  }
  const std::optional<uint64_t> want = GgmlRowBytes(type, elems);
  if (!want || *want != bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %s: %d elements take %d bytes, but the buffer holds %d bytes", op,
                        info->name, elems, want.value_or(0), bytes));
  }
  return Plan{codec, elems / block_elems, block_elems, static_cast<size_t>(info->block_bytes)};
}

}  // namespace

absl::Status Dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst) {
  const absl::StatusOr<Plan> plan = MakePlan("Dequantize", type, dst.size(), src.size());
  if (!plan.ok()) return plan.status();
  for (size_t i = 0; i < plan->blocks; ++i) {
    plan->codec->dequant(src.data() + i * plan->block_bytes, dst.data() + i * plan->block_elems);
  }
  return absl::OkStatus();
}

absl::Status Quantize(GgmlType type, std::span<const float> src, std::span<uint8_t> dst) {
  const absl::StatusOr<Plan> plan = MakePlan("Quantize", type, src.size(), dst.size());
  if (!plan.ok()) return plan.status();
  if (plan->codec->finite_only) {
    for (size_t i = 0; i < src.size(); ++i) {
      if (!std::isfinite(src[i])) {
        return absl::InvalidArgumentError(
            absl::StrFormat("Quantize %s: element %d is %f, which the format cannot represent",
                            GgmlTypeName(type), i, src[i]));
      }
    }
  }
  for (size_t i = 0; i < plan->blocks; ++i) {
    plan->codec->quant(src.data() + i * plan->block_elems, dst.data() + i * plan->block_bytes);
  }
  return absl::OkStatus();
}

std::string_view GroupedKindName(GroupedKind kind) {
  return kind == GroupedKind::kInt4 ? "int4" : "int2";
}

std::optional<StorageName> ParseStorageName(std::string_view name) {
  for (GroupedKind kind : {GroupedKind::kInt4, GroupedKind::kInt2}) {
    const std::string_view prefix = kind == GroupedKind::kInt4 ? "int4:g" : "int2:g";
    if (name.size() < prefix.size()) continue;
    bool match = true;
    for (size_t i = 0; i < prefix.size(); ++i) {
      const char c = name[i];
      match &= (c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) == prefix[i];
    }
    if (!match) continue;
    // Digits only: no sign, no spaces, at most 9 of them.
    const std::string_view digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 9) return std::nullopt;
    int64_t group = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      group = group * 10 + (c - '0');
    }
    if (group < 8 || group % 8 != 0) return std::nullopt;
    return StorageName{GgmlType::kF32, kind, group};
  }
  const std::optional<GgmlType> type = ParseGgmlType(name);
  if (!type) return std::nullopt;
  return StorageName{*type, std::nullopt, 0};
}

std::optional<uint64_t> GroupedRowBytes(GroupedKind kind, int64_t group, uint64_t n) {
  if (group < 8 || group % 8 != 0 || n % static_cast<uint64_t>(group) != 0) return std::nullopt;
  const uint64_t groups = n / static_cast<uint64_t>(group);
  const uint64_t group_bytes =
      static_cast<uint64_t>(group / LayoutOf(kind).per_byte) + 4;  // codes + d + m
  if (groups > std::numeric_limits<uint64_t>::max() / group_bytes) return std::nullopt;
  return groups * group_bytes;
}

absl::Status DequantizeGrouped(GroupedKind kind, int64_t group, std::span<const uint8_t> src,
                               std::span<float> dst) {
  if (absl::Status st = CheckGrouped("DequantizeGrouped", kind, group, dst.size(), src.size());
      !st.ok()) {
    return st;
  }
  const GroupedLayout l = LayoutOf(kind);
  const size_t group_bytes = static_cast<size_t>(group / l.per_byte) + 4;
  const size_t groups = dst.size() / static_cast<size_t>(group);
  for (size_t g = 0; g < groups; ++g) {
    DequantGroup(l, static_cast<int>(group), src.data() + g * group_bytes,
                 dst.data() + g * static_cast<size_t>(group));
  }
  return absl::OkStatus();
}

absl::Status QuantizeGrouped(GroupedKind kind, int64_t group, std::span<const float> src,
                             std::span<uint8_t> dst) {
  if (absl::Status st = CheckGrouped("QuantizeGrouped", kind, group, src.size(), dst.size());
      !st.ok()) {
    return st;
  }
  for (size_t i = 0; i < src.size(); ++i) {
    if (!std::isfinite(src[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("QuantizeGrouped %s: element %d is %f, which the format cannot represent",
                          GroupedKindName(kind), i, src[i]));
    }
  }
  const GroupedLayout l = LayoutOf(kind);
  const size_t group_bytes = static_cast<size_t>(group / l.per_byte) + 4;
  const size_t groups = src.size() / static_cast<size_t>(group);
  for (size_t g = 0; g < groups; ++g) {
    QuantGroup(l, static_cast<int>(group), src.data() + g * static_cast<size_t>(group),
               dst.data() + g * group_bytes);
  }
  return absl::OkStatus();
}

}  // namespace kiln

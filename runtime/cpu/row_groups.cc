// Rows in groups of eight (row_groups.h): the packing, and the choice of
// kernel family (row_groups_avx512.cc, row_groups_avx2.cc).

#include "runtime/cpu/row_groups.h"

#include <cstring>
#include <vector>

#include "runtime/cpu/row_groups_layout.h"
#include "runtime/formats/quant.h"

namespace kiln::cpu {

namespace {

using row_groups::kQ4KBlockBytes;
using row_groups::kQ6KBlockBytes;

// Calls pack(o, r, b) for every super-block of groups [first, last) and
// each of its rows r: b the row's stored block (block_bytes a block), o the
// group's packed super-block in out.
template <class Pack>
void EachRowBlock(GgmlType type, const uint8_t* rows, int64_t k, int64_t first, int64_t last, int64_t block_bytes,
                  int64_t packed_bytes, uint8_t* out, Pack pack) {
  const int64_t supers = k / 256, row_bytes = supers * block_bytes;
  for (int64_t g = first; g < last; ++g) {
    for (int64_t s = 0; s < supers; ++s) {
      uint8_t* o = out + g * RowGroupBytes(type, k) + s * packed_bytes;
      for (int r = 0; r < kRowGroupRows; ++r) pack(o, r, rows + (g * kRowGroupRows + r) * row_bytes + s * block_bytes);
    }
  }
}

// q4_K (144 bytes: f16 d | f16 dmin | scales[12] | qs[128]).
void PackQ4KBlock(uint8_t* o, int r, const uint8_t* b) {
  std::memcpy(o + 2 * r, b, 2);
  std::memcpy(o + row_groups::kQ4KDmin + 2 * r, b + 2, 2);
  for (int j = 0; j < 8; ++j) {
    int scale = 0, min = 0;
    GetScaleMinK4(b + 4, j, &scale, &min);
    o[row_groups::kQ4KScales + 8 * j + r] = static_cast<uint8_t>(scale);
    o[row_groups::kQ4KMins + 8 * j + r] = static_cast<uint8_t>(min);
  }
  for (int c = 0; c < 16; ++c) {
    std::memcpy(o + row_groups::kQ4KCodes + 64 * c + 8 * r, b + 16 + 32 * (c / 4) + 8 * (c % 4), 8);
  }
}

// The 256 codes (0..63) of a q6_K block, element e = 128 h + 32 p + l
// (quant.cc's layout): plane p of half h, its low bits in ql[64 h + 32 (p %
// 2) + l] (nibble p / 2), its high two in bits 2 p of qh[32 h + l].
void Q6KCodes(const uint8_t* b, int* codes) {
  for (int h = 0; h < 2; ++h) {
    for (int p = 0; p < 4; ++p) {
      for (int l = 0; l < 32; ++l) {
        const int low = (b[64 * h + 32 * (p % 2) + l] >> (4 * (p / 2))) & 0x0F;
        const int high = (b[128 + 32 * h + l] >> (2 * p)) & 3;
        codes[128 * h + 32 * p + l] = low | (high << 4);
      }
    }
  }
}

// q6_K (210 bytes: ql[128] | qh[64] | int8 scales[16] | f16 d).
void PackQ6KBlock(uint8_t* o, int r, const uint8_t* b) {
  std::memcpy(o + 2 * r, b + 208, 2);
  int codes[256];
  Q6KCodes(b, codes);
  int32_t c = 0;
  for (int sub = 0; sub < 16; ++sub) {
    o[row_groups::kQ6KScales + 8 * sub + r] = b[192 + sub];
    int32_t sum = 0;
    for (int e = 16 * sub; e < 16 * sub + 16; ++e) sum += codes[e] - 32;
    c += static_cast<int8_t>(b[192 + sub]) * sum;
  }
  c *= 128;
  std::memcpy(o + row_groups::kQ6KOffset + 4 * r, &c, 4);
  for (int h = 0; h < 2; ++h) {
    for (int l0 = 0; l0 < 32; l0 += 8) {
      const int chunk = 3 * (4 * h + l0 / 8);
      std::memcpy(o + row_groups::kQ6KCodes + 64 * chunk + 8 * r, b + 64 * h + l0, 8);
      std::memcpy(o + row_groups::kQ6KCodes + 64 * (chunk + 1) + 8 * r, b + 64 * h + 32 + l0, 8);
      std::memcpy(o + row_groups::kQ6KCodes + 64 * (chunk + 2) + 8 * r, b + 128 + 32 * h + l0, 8);
    }
  }
}

}  // namespace

bool HasRowGroupKernel(GgmlType type, Q8Kernel kernel) {
  return (type == GgmlType::kQ4_K || type == GgmlType::kQ6_K) && Q8RowDot(type, kernel) != nullptr;
}

int64_t RowGroupBytes(GgmlType type, int64_t k) {
  return k / 256 * (type == GgmlType::kQ6_K ? kQ6KBlockBytes : kQ4KBlockBytes);
}

void PackRowGroups(GgmlType type, const uint8_t* rows, int64_t k, int64_t first, int64_t last, uint8_t* out) {
  if (type == GgmlType::kQ6_K) {
    EachRowBlock(type, rows, k, first, last, 210, kQ6KBlockBytes, out, PackQ6KBlock);
  } else {
    EachRowBlock(type, rows, k, first, last, 144, kQ4KBlockBytes, out, PackQ4KBlock);
  }
}

void RowGroupsDot(Q8Kernel kernel, GgmlType type, const uint8_t* groups, int64_t num_groups, int64_t k, const Q8Rows& x,
                  int64_t tokens, float* y, int64_t ldy) {
#if defined(__x86_64__)
  const uint8_t* xu = nullptr;
  if (type == GgmlType::kQ6_K) {
    // The activation codes plus 128, as the byte multiply-add's unsigned side.
    thread_local std::vector<uint8_t> shifted;
    shifted.resize(static_cast<size_t>(tokens * k));
    for (int64_t i = 0; i < tokens * k; ++i) shifted[i] = static_cast<uint8_t>(x.q[i]) ^ 0x80;
    xu = shifted.data();
  }
  if (kernel == Q8Kernel::kAvx512Vnni) {
    row_groups::DotAvx512(type, groups, num_groups, k, x, xu, tokens, y, ldy);
  } else {
    row_groups::DotAvx2(type, groups, num_groups, k, x, xu, tokens, y, ldy);
  }
#else
  (void)kernel, (void)type, (void)groups, (void)num_groups, (void)k, (void)x, (void)tokens, (void)y, (void)ldy;
#endif
}

}  // namespace kiln::cpu

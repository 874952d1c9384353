// The decode copies of q4_K weights (kernel_abi.h's Q4KTableRowBytes), made
// once at load from the weights on the device: per 256-element block its
// codes, then each sub-block's d * scale and dmin * min as f16, in
// LaneQ4_KTable's order. A product past f16's range (a block's d or dmin
// above 65504 / 63) sets bit 0 of *p.overflow and the runtime drops the
// copies: the header lane then reads such weights as the CPU does. Bit 1:
// 8 d sc past f16's range, which matmul_tile_int8_kernel's f16 MMA holds;
// the runtime then runs q4_K's steps of 2-63 tokens on
// matmul_tile_tc_kernel (block scales in f32).
#pragma once

#include "matmul_lanes.cuh"
#include "mma.cuh"

namespace kiln {

__global__ void __launch_bounds__(256) q4k_scale_table_kernel(Q4KTableParams p) {
  WaitForPrevious();
  const long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (i >= p.blocks) return;
  const uint4 head = Aligned16(p.w + i * 144);  // 144-byte blocks of 256-byte aligned weights
  const float d = HalfToFloat(static_cast<unsigned short>(head.x & 0xFFFF));
  const float dmin = HalfToFloat(static_cast<unsigned short>(head.x >> 16));
  unsigned out[8];
  bool overflow = false, tile_overflow = false;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float a[2], m[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sc, mn;
      LaneQ4_K::ScaleMin(head, 2 * c + h, &sc, &mn);
      a[h] = d * sc;  // an f16 times a 6-bit integer: exact in f32
      m[h] = dmin * mn;
      // (A header already infinite or NaN stays so, as the header lane reads it.)
      overflow = overflow || (isfinite(a[h]) && fabsf(a[h]) > 65504.0f) || (isfinite(m[h]) && fabsf(m[h]) > 65504.0f);
      tile_overflow = tile_overflow || (isfinite(a[h]) && 8.0f * fabsf(a[h]) > 65504.0f);
    }
    out[2 * c] = PackHalf2(a[0], a[1]);
    out[2 * c + 1] = PackHalf2(m[0], m[1]);
  }
  uint4* dst = reinterpret_cast<uint4*>(p.table + i * kQ4KTableBlockBytes);
#pragma unroll
  for (int j = 0; j < kQ4KTableCodeBytes / 16; ++j) dst[j] = Aligned16(p.w + i * 144 + 16 + 16 * j);
  dst[kQ4KTableCodeBytes / 16] = {out[0], out[1], out[2], out[3]};
  dst[kQ4KTableCodeBytes / 16 + 1] = {out[4], out[5], out[6], out[7]};
  if (overflow || tile_overflow) atomicOr(p.overflow, (overflow ? 1u : 0u) | (tile_overflow ? 2u : 0u));
}

}  // namespace kiln

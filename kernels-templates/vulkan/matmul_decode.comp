// matmul / fused_matmul (as matmul.comp defines them) for decode-sized
// buckets, one token per workgroup row. The workgroup stages its token's
// activations once in shared memory (RMS-normalised with the norm prologue),
// as f32 where K fits, else as f16 XCHUNK elements at a time; each subgroup then takes R output
// rows at a time, round-robin over the dispatch's subgroups, and its lanes
// stride over K: q4_K 32 elements a lane step (16 code bytes in one 16-byte
// load, the block's 16-byte header in another), other storages 4 elements
// through weights.glsl's WREAD4. A subgroup sum ends each row: no barrier
// between rows, only between staged chunks where K > XCHUNK.
//
// Constants: K, NUM_W, N0..N2, EPILOGUE, HAS_NORM, EPS, WG, R, XF16 (1:
// staged as f16), XCHUNK (a multiple of 256, or K rounded up to 8 where K
// fits), Q4K_LANES, weight slots.
// Push constants: in0 x, in1 residual, out0..out2 results.
// Launch shape: x = workgroups (any number: subgroups past the rows idle,
// too few take several rounds), y = the bucket's tokens.

#if EPILOGUE == 1
#define NACC 2
#else
#define NACC 1
#endif
#if EPILOGUE == 0
#define NCOLS (N0 + N1 + N2)
#else
#define NCOLS N0
#endif
#define NREDUCE 1
#include_reduce

#if XF16
shared uvec4 x_[XCHUNK / 8];  // eight f16 activations a word
#else
shared vec4 x_[XCHUNK / 4];
#endif

#if Q4K_LANES
// The weights as 16-byte words (q4_K rows are whole 144-byte blocks).
layout(std430, set = 0, binding = 0) readonly buffer Weight0Q { uvec4 w0q[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weight1Q { uvec4 w1q[]; };
layout(std430, set = 0, binding = 2) readonly buffer Weight2Q { uvec4 w2q[]; };
uvec4 wq(uint slot, uint at) {
#if NUM_W >= 2
  if (slot == 1u) return w1q[at];
#endif
#if NUM_W >= 3
  if (slot == 2u) return w2q[at];
#endif
  return w0q[at];
}
#endif

uint slot_of(uint n) {
#if EPILOGUE == 0
  if (n >= N0 + N1) return 2u;
  if (n >= N0) return 1u;
#endif
  return 0u;
}
uint row_of(uint n, uint slot) { return slot == 0u ? n : (slot == 1u ? n - N0 : n - N0 - N1); }

vec4 read_weight4(uint slot, uint row, uint k) {
#if NUM_W >= 2
  if (slot == 1u) return wread4_1(row, k);
#endif
#if NUM_W >= 3
  if (slot == 2u) return wread4_2(row, k);
#endif
  return wread4_0(row, k);
}
float read_weight(uint slot, uint row, uint k) {
#if NUM_W >= 2
  if (slot == 1u) return wread1(row, k);
#endif
#if NUM_W >= 3
  if (slot == 2u) return wread2(row, k);
#endif
  return wread0(row, k);
}

// Staged activations e..e+7 (e a multiple of 8), e..e+3 (e a multiple of 4) and e.
void x8(uint e, out vec4 a, out vec4 b) {
#if XF16
  const uvec4 w = x_[e / 8u];
  a = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  b = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
#else
  a = x_[e / 4u];
  b = x_[e / 4u + 1u];
#endif
}
vec4 x4(uint e) {
#if XF16
  const uvec4 w = x_[e / 8u];
  return (e & 4u) != 0u ? vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w)) : vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
#else
  return x_[e / 4u];
#endif
}
float x1(uint e) {
#if XF16
  return unpackHalf2x16(x_[e / 8u][(e % 8u) / 2u])[e % 2u];
#else
  return x_[e / 4u][e % 4u];
#endif
}

#if Q4K_LANES
// 1 + q / 16 for the four nibbles of a code word at bits 0-3 of each byte
// (lo) or 4-7 (hi): each nibble moved into the top of 1.0f's mantissa, so
// a dot with it is sum x + sum q x / 16 in f32 without integer conversions.
vec4 nibbles_lo(uint w) {
  return uintBitsToFloat((uvec4(w << 19, w << 11, w << 3, w >> 5) & 0x00780000u) | 0x3F800000u);
}
vec4 nibbles_hi(uint w) {
  return uintBitsToFloat((uvec4(w << 15, w << 7, w >> 1, w >> 9) & 0x00780000u) | 0x3F800000u);
}

// One lane step of q4_K row `row` of weight `slot`: lane chunk gc (16 code
// bytes: elements lo..lo+15 of sub-block s and lo+32..lo+47 of s + 1, lo =
// 256 (gc / 8) + 64 (gc % 8 / 2) + 16 (gc % 2)) against activations xl, xh
// (sums sum_lo, sum_hi).
float q4k_step(uint slot, uint row, uint gc, vec4 xl[4], vec4 xh[4], float sum_lo, float sum_hi) {
  const uint at = row * (K / 256u * 9u) + (gc / 8u) * 9u, q = gc % 8u;
  const uvec4 head = wq(slot, at), codes = wq(slot, at + 1u + q);
  const vec2 dm = unpackHalf2x16(head.x);
  const uint s = 2u * (q / 2u), u = 8u * (s & 3u);
  float sc[2], mn[2];
  for (uint i = 0u; i < 2u; ++i) {
    const uint sh = u + 8u * i;
    const uint by = (head.y >> sh) & 0xFFu, bz = (head.z >> sh) & 0xFFu, bw = (head.w >> sh) & 0xFFu;
    sc[i] = float(s < 4u ? by & 63u : (bw & 15u) | ((by >> 6) << 4));
    mn[i] = float(s < 4u ? bz & 63u : (bw >> 4) | ((bz >> 6) << 4));
  }
  const float lo = dot(nibbles_lo(codes.x), xl[0]) + dot(nibbles_lo(codes.y), xl[1]) +
                   dot(nibbles_lo(codes.z), xl[2]) + dot(nibbles_lo(codes.w), xl[3]);
  const float hi = dot(nibbles_hi(codes.x), xh[0]) + dot(nibbles_hi(codes.y), xh[1]) +
                   dot(nibbles_hi(codes.z), xh[2]) + dot(nibbles_hi(codes.w), xh[3]);
  return dm.x * sc[0] * 16.0 * (lo - sum_lo) - dm.y * mn[0] * sum_lo + dm.x * sc[1] * 16.0 * (hi - sum_hi) -
         dm.y * mn[1] * sum_hi;
}
#endif

// x' (normalised) of token t at k0..k0+len into x_, zeros past len.
void stage(uint t, uint k0, uint len, float scale) {
  const uint tid = gl_LocalInvocationID.x;
  for (uint i = tid; i < XCHUNK / 2u; i += WG) {
    vec2 v = vec2(0.0);
    for (uint j = 0u; j < 2u; ++j) {
      const uint e = 2u * i + j;
      if (e < len) {
        v[j] = arena[pc.in0 + t * K + k0 + e];
#if HAS_NORM
        v[j] *= scale * vec_[k0 + e];
#endif
      }
    }
#if XF16
    x_[i / 4u][i % 4u] = packHalf2x16(v);
#else
    x_[i / 2u][2u * (i % 2u)] = v.x;
    x_[i / 2u][2u * (i % 2u) + 1u] = v.y;
#endif
  }
}

void main() {
  const uint t = gl_WorkGroupID.y;
  if (t >= launch_rows()) return;  // the same for the whole workgroup
  const uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
  const uint groups = gl_NumWorkGroups.x * gl_NumSubgroups;
  const uint rounds = (NCOLS + groups * R - 1u) / (groups * R);
  if (gl_WorkGroupID.x * gl_NumSubgroups * R >= NCOLS) return;  // no rows in any round

  float scale = 1.0;
#if HAS_NORM
  float ss[1];
  ss[0] = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < K; k += WG) {
    const float x = arena[pc.in0 + t * K + k];
    ss[0] += x * x;
  }
  reduce_sum(ss);
  scale = inversesqrt(ss[0] / float(K) + EPS);
#endif
  const bool one_chunk = K <= XCHUNK;
  if (one_chunk) {
    stage(t, 0u, K, scale);
    barrier();
  }

  for (uint round = 0u; round < rounds; ++round) {
    const uint n0 = ((round * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_NumSubgroups + gl_SubgroupID) * R;
    float acc[R * NACC];
    for (uint i = 0u; i < R * NACC; ++i) acc[i] = 0.0;
    for (uint k0 = 0u; k0 < K; k0 += XCHUNK) {
      const uint len = min(uint(XCHUNK), K - k0);
      if (!one_chunk) {
        barrier();  // the previous chunk's readers are done
        stage(t, k0, len, scale);
        barrier();
      }
      if (n0 >= NCOLS) continue;
#if Q4K_LANES
      for (uint c = lane; c < len / 32u; c += lanes) {
        const uint gc = k0 / 32u + c, q = gc % 8u;
        const uint lo = (c / 8u) * 256u + 64u * (q / 2u) + 16u * (q % 2u);  // in the chunk
        vec4 xl[4], xh[4];
        x8(lo, xl[0], xl[1]);
        x8(lo + 8u, xl[2], xl[3]);
        x8(lo + 32u, xh[0], xh[1]);
        x8(lo + 40u, xh[2], xh[3]);
        const float sum_lo = dot(xl[0] + xl[1] + xl[2] + xl[3], vec4(1.0));
        const float sum_hi = dot(xh[0] + xh[1] + xh[2] + xh[3], vec4(1.0));
        for (uint r = 0u; r < R; ++r) {
          const uint n = n0 + r;
          if (n >= NCOLS) break;
          const uint slot = slot_of(n), row = row_of(n, slot);
          acc[r * NACC] += q4k_step(slot, row, gc, xl, xh, sum_lo, sum_hi);
#if EPILOGUE == 1
          acc[r * NACC + 1u] += q4k_step(1u, row, gc, xl, xh, sum_lo, sum_hi);
#endif
        }
      }
#else
      // Four k a lane step, then the K % 4 tail one at a time.
      for (uint e = 4u * lane; e + 4u <= len; e += 4u * lanes) {
        const vec4 xs = x4(e);
        for (uint r = 0u; r < R; ++r) {
          const uint n = n0 + r;
          if (n >= NCOLS) break;
          const uint slot = slot_of(n), row = row_of(n, slot);
          acc[r * NACC] += dot(read_weight4(slot, row, k0 + e), xs);
#if EPILOGUE == 1
          acc[r * NACC + 1u] += dot(wread4_1(row, k0 + e), xs);
#endif
        }
      }
      for (uint e = (len / 4u) * 4u + lane; e < len; e += lanes) {
        const float xs = x1(e);
        for (uint r = 0u; r < R; ++r) {
          const uint n = n0 + r;
          if (n >= NCOLS) break;
          const uint slot = slot_of(n), row = row_of(n, slot);
          acc[r * NACC] += read_weight(slot, row, k0 + e) * xs;
#if EPILOGUE == 1
          acc[r * NACC + 1u] += wread1(row, k0 + e) * xs;
#endif
        }
      }
#endif
    }
    if (n0 >= NCOLS) continue;
    for (uint i = 0u; i < R * NACC; ++i) acc[i] = subgroupAdd(acc[i]);
    if (subgroupElect()) {
      for (uint r = 0u; r < R; ++r) {
        const uint n = n0 + r;
        if (n >= NCOLS) break;
        const uint slot = slot_of(n), row = row_of(n, slot);
        const float y = acc[r * NACC];
#if EPILOGUE == 0
        const uint width = slot == 0u ? N0 : (slot == 1u ? N1 : N2);
        const uint dst = slot == 0u ? pc.out0 : (slot == 1u ? pc.out1 : pc.out2);
        arena[dst + t * width + row] = y;
#elif EPILOGUE == 1
        arena[pc.out0 + t * N0 + row] = y / (1.0 + exp(-y)) * acc[r * NACC + 1u];
#else
        arena[pc.out0 + t * N0 + row] = y + arena[pc.in1 + t * N0 + row];
#endif
      }
    }
  }
}

// matmul / fused_matmul for prefill-sized buckets on tensor cores, through
// cooperative matrices (SPV_NV_cooperative_matrix: f16 inputs, f32 sums),
// where the device has them; matmul_tiled.comp otherwise (and on lavapipe).
// Same function as matmul.comp (norm prologue, up to three weights,
// silu_mul, residual_add). A workgroup owns BM tokens x BN output columns in
// WG / 32 subgroups of 32 lanes (4 across), each 32 x 32 outputs as 2 x 2
// 16x16 accumulators (two sets with silu_mul). Per step of BK along k it
// stages the (normalised) activations and the decoded weights of the tile in
// shared memory as f16, 16 bytes a store; the global reads of the next step
// are issued before this step's multiplies and wait in registers. Results
// leave through a 16 x 32 patch of shared memory per subgroup (the tiles'
// memory, once the k loop is done), so partial tiles, the q/k/v split of a
// fused launch and the epilogues are written element by element; silu_mul is
// applied there too, since indexing a fragment's elements took it out of
// registers (docs/perf/vulkan-h200.md, session 14).
//
// Constants: as matmul.comp (K, NUM_W, N0..N2, EPILOGUE, HAS_NORM, EPS,
// Q4K_LANES, weight slots), plus BM, BN = 128, BK and WG with
// BM = 32 * WG / 128, and F16W (every slot f16 and K a multiple of 8: the
// weights staged as they are read, 16 bytes a copy, nothing decoded).
// Launch shape: x = workgroups striding over the output columns BN at a time,
// y = one per BM tokens of the bucket (renumbered so that y varies fastest
// with pc.tokens_first).

#if EPILOGUE == 1
#define NACC 2
#else
#define NACC 1
#endif
// SPLIT (silu_mul, WG = 512): 16 subgroups, each one weight's 32 x 32 (gate's
// four subgroups of a token row, then up's), so a subgroup holds 4
// accumulators, not 8, and twice the warps fit an SM for the same tile; the
// gate and up halves of an output meet in shared memory at the end.
#ifndef SPLIT
#define SPLIT 0
#endif
#if SPLIT
#define SG_SETS 1  // accumulator sets a subgroup holds
#else
#define SG_SETS NACC
#endif
#if EPILOGUE == 0
#define NCOLS (N0 + N1 + N2)
#else
#define NCOLS N0
#endif

// Subgroup-scope (3) 16 x 16 fragments: f16 inputs, f32 sums.
#define FRAG_IN fcoopmatNV<16, 3, 16, 16>
#define FRAG_SUM fcoopmatNV<32, 3, 16, 16>
// Staged rows as 16-byte words: BK halves and 8 of padding (80 bytes at
// BK = 32 keeps the eight rows a fragment load reads at once in different
// banks).
#define XS4 ((BK + 8u) / 8u)
#define A_VECS (BM * BK / 8u)  // words of activations a k step
#define A_PER ((A_VECS + WG - 1u) / WG)
#if F16W
// Weights as f16 rows, 8 to a 16-byte word: the executor's f16 copy of
// quantised weights (made once at load), or f16 weights read in place.
#define TPR (BK / 8u)          // 16-byte words of a weight row a k step
#else
#define TPR (BK / 16u)         // q4_K half sub-blocks of a weight row a k step
#endif
#define W_TASKS (NACC * BN * TPR)
#define W_PER ((W_TASKS + WG - 1u) / WG)
#define SM_TILES ((BM + NACC * BN) * XS4)
#define SM_PATCH ((WG / 32u) * 512u * SG_SETS / 4u)  // 16 x 32 f32 per subgroup (and up's)

#include_matmul

// One array for the staged tiles and, after the k loop, the result patches.
shared uvec4 sm_[SM_TILES > SM_PATCH ? SM_TILES : SM_PATCH];
shared float inv_rms_[BM];
// The arena as 16-byte words (its offsets are 256-byte aligned).
layout(std430, set = 0, binding = 5) buffer Arena4 { vec4 arena4[]; };

#if !SPLIT
// The subgroup's 16 x 32 patch of results (tokens r0.., columns n0..) into
// the outputs, element by element, after its epilogue.
void write_patch(uint r0, uint n0, uint rows) {
  const uint sg = gl_SubgroupID;
  subgroupBarrier();  // the patch is stored
  for (uint e = gl_SubgroupInvocationID; e < 512u; e += gl_SubgroupSize) {
    const uint r = r0 + e / 32u, n = n0 + e % 32u;
    if (r >= rows || n >= NCOLS) continue;
    const uint slot = slot_of(n), row = row_of(n, slot);
    const uint at = sg * 512u * NACC + e;
    float v = uintBitsToFloat(sm_[at / 4u][at % 4u]);
#if EPILOGUE == 0
    const uint width = slot == 0u ? N0 : (slot == 1u ? N1 : N2);
    const uint dst = slot == 0u ? pc.out0 : (slot == 1u ? pc.out1 : pc.out2);
    arena[dst + r * width + row] = v;
#elif EPILOGUE == 1
    const float up = uintBitsToFloat(sm_[(at + 512u) / 4u][(at + 512u) % 4u]);
    arena[pc.out0 + r * N0 + row] = v / (1.0 + exp(-v)) * up;
#else
    arena[pc.out0 + r * N0 + row] = v + arena[pc.in1 + r * N0 + row];
#endif
  }
  subgroupBarrier();  // the patch is read before the next store
}
#endif

#if SPLIT
// SPLIT's 16 x 32 patches: gate's subgroup `sg` and up's `sg + 4` hold the
// same outputs; gate's writes silu(gate) * up. Called by every subgroup
// (barriers); the patches are stored.
void write_split_patch(uint r0, uint n0, uint rows, bool gate) {
  const uint sg = gl_SubgroupID;
  barrier();  // every subgroup's patch is stored
  if (gate) {
    for (uint e = gl_SubgroupInvocationID; e < 512u; e += gl_SubgroupSize) {
      const uint r = r0 + e / 32u, n = n0 + e % 32u;
      if (r >= rows || n >= NCOLS) continue;
      const uint at = sg * 512u + e, up_at = at + 4u * 512u;
      const float v = uintBitsToFloat(sm_[at / 4u][at % 4u]), up = uintBitsToFloat(sm_[up_at / 4u][up_at % 4u]);
      arena[pc.out0 + r * N0 + n] = v / (1.0 + exp(-v)) * up;
    }
  }
  barrier();  // the patches are read before the next store
}
#endif

// Step k0's global reads: activation words (8 of token t's values from k
// on) and, for q4_K, each task's block header and 16-byte word of codes.
vec4 a_lo[A_PER], a_hi[A_PER];
#if HAS_NORM && K % 8 == 0
// The norm's gain for the same k, read with them (read between the step's
// barriers, its latency cost 4% of prefill on the H200).
vec4 g_lo[A_PER], g_hi[A_PER];
layout(std430, set = 0, binding = 4) readonly buffer Vector4 { vec4 vec4_[]; };
#endif
#if Q4K_LANES
uvec4 w_head[W_PER], w_codes[W_PER];
#elif F16W
layout(std430, set = 0, binding = 0) readonly buffer Weight0H { uvec4 w0h[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weight1H { uvec4 w1h[]; };
layout(std430, set = 0, binding = 2) readonly buffer Weight2H { uvec4 w2h[]; };
uvec4 wh(uint slot, uint at) {
#if NUM_W >= 2
  if (slot == 1u) return w1h[at];
#endif
#if NUM_W >= 3
  if (slot == 2u) return w2h[at];
#endif
  return w0h[at];
}
uvec4 w_half[W_PER];
#endif

void read_step(uint k0, uint t0, uint n0, uint rows) {
  const uint tid = gl_LocalInvocationID.x;
  for (uint j = 0u; j < A_PER; ++j) {
    const uint i = tid + j * WG, t = i / (BK / 8u), k = k0 + 8u * (i % (BK / 8u));
    a_lo[j] = vec4(0.0);
    a_hi[j] = vec4(0.0);
#if HAS_NORM && K % 8 == 0
    g_lo[j] = vec4(0.0);
    g_hi[j] = vec4(0.0);
#endif
    if (i < A_VECS && t0 + t < rows && k < K) {
      const uint at = pc.in0 + (t0 + t) * K + k;
#if K % 8 == 0
      a_lo[j] = arena4[at / 4u];
      a_hi[j] = arena4[at / 4u + 1u];
#if HAS_NORM
      g_lo[j] = vec4_[k / 4u];
      g_hi[j] = vec4_[k / 4u + 1u];
#endif
#else
      for (uint q = 0u; q < 4u; ++q) {
        if (k + q < K) a_lo[j][q] = arena[at + q];
        if (k + 4u + q < K) a_hi[j][q] = arena[at + 4u + q];
      }
#endif
    }
  }
#if Q4K_LANES
  for (uint j = 0u; j < W_PER; ++j) {
    const uint i = tid + j * WG, w = i / (BN * TPR), c = (i / TPR) % BN, part = i % TPR, n = n0 + c;
    if (i < W_TASKS && n < NCOLS) {
      // silu_mul's up (w = 1) has gate's rows.
      const uint row = row_of(n, slot_of(n)), slot = w == 1u ? 1u : slot_of(n);
      const uint sb = (k0 % 256u) / 32u + part / 2u, at = row * (K / 256u * 9u) + (k0 / 256u) * 9u;
      w_head[j] = wq(slot, at);
      w_codes[j] = wq(slot, at + 1u + 2u * (sb / 2u) + part % 2u);
    }
  }
#elif F16W
  for (uint j = 0u; j < W_PER; ++j) {
    const uint i = tid + j * WG, w = i / (BN * TPR), c = (i / TPR) % BN, part = i % TPR, n = n0 + c;
    w_half[j] = uvec4(0u);
    if (i < W_TASKS && n < NCOLS && k0 + 8u * part < K) {
      const uint row = row_of(n, slot_of(n)), slot = w == 1u ? 1u : slot_of(n);
      w_half[j] = wh(slot, row * (K / 8u) + k0 / 8u + part);
    }
  }
#endif
}

uvec4 pack8(vec4 lo, vec4 hi) {
  return uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw));
}

// Step k0's tiles into shared memory from the registers read_step filled
// (other storages than q4_K are read and decoded here).
void stage_step(uint k0, uint n0) {
  const uint tid = gl_LocalInvocationID.x;
  for (uint j = 0u; j < A_PER; ++j) {
    const uint i = tid + j * WG, t = i / (BK / 8u), k = k0 + 8u * (i % (BK / 8u));
    if (i >= A_VECS) continue;
    vec4 lo = a_lo[j], hi = a_hi[j];
#if HAS_NORM && K % 8 == 0
    const float r = inv_rms_[t];
    lo *= r * g_lo[j];
    hi *= r * g_hi[j];
#elif HAS_NORM
    const float r = inv_rms_[t];
    for (uint q = 0u; q < 4u; ++q) {
      lo[q] *= r * (k + q < K ? vec_[k + q] : 0.0);
      hi[q] *= r * (k + 4u + q < K ? vec_[k + 4u + q] : 0.0);
    }
#endif
    sm_[t * XS4 + i % (BK / 8u)] = pack8(lo, hi);
  }
#if Q4K_LANES
  // q4_K: a task is 16 of a row's elements (half of one sub-block's 32).
  // Two codes of a 32-bit word become f16 1024 + q (0x6400 | q), so that
  // q and d * q - m take one f16x2 operation each.
  for (uint j = 0u; j < W_PER; ++j) {
    const uint i = tid + j * WG, w = i / (BN * TPR), c = (i / TPR) % BN, part = i % TPR, n = n0 + c;
    if (i >= W_TASKS) continue;
    uint h[8] = uint[8](0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    if (n < NCOLS) {
      const uvec4 head = w_head[j], codes = w_codes[j];
      const uint sb = (k0 % 256u) / 32u + part / 2u;
      const vec2 dm = unpackHalf2x16(head.x);
      const vec2 sm = q4k_scale_min(head.y, head.z, head.w, sb);
      const f16vec2 d2 = f16vec2(float16_t(dm.x * sm.x)), m2 = f16vec2(float16_t(dm.y * sm.y));
      const f16vec2 k1024 = f16vec2(float16_t(1024.0));
      const uint nib = 4u * (sb % 2u);
      for (uint p = 0u; p < 4u; ++p) {
        const uint q = (codes[p] >> nib) & 0x0F0F0F0Fu;                 // codes 4p .. 4p + 3, a byte each
        const uint q01 = (q & 0xFFu) | ((q & 0xFF00u) << 8);            // codes 0 and 1 in 16-bit lanes
        const uint q23 = ((q >> 16) & 0xFFu) | ((q >> 8) & 0xFF0000u);  // codes 2 and 3
        h[2u * p] = packFloat2x16(fma(unpackFloat2x16(q01 | 0x64006400u) - k1024, d2, -m2));
        h[2u * p + 1u] = packFloat2x16(fma(unpackFloat2x16(q23 | 0x64006400u) - k1024, d2, -m2));
      }
    }
    const uint at = BM * XS4 + (w * BN + c) * XS4 + 2u * part;
    sm_[at] = uvec4(h[0], h[1], h[2], h[3]);
    sm_[at + 1u] = uvec4(h[4], h[5], h[6], h[7]);
  }
#elif F16W
  for (uint j = 0u; j < W_PER; ++j) {
    const uint i = tid + j * WG, w = i / (BN * TPR), c = (i / TPR) % BN, part = i % TPR;
    if (i < W_TASKS) sm_[BM * XS4 + (w * BN + c) * XS4 + part] = w_half[j];
  }
#else
  // Other storages: four consecutive k a read.
  for (uint e = tid; e < NACC * BN * (BK / 4u); e += WG) {
    const uint w = e / (BN * (BK / 4u)), c = (e / (BK / 4u)) % BN, kk = (e % (BK / 4u)) * 4u, k = k0 + kk, n = n0 + c;
    vec4 v = vec4(0.0);
    if (n < NCOLS) {
      const uint row = row_of(n, slot_of(n)), slot = w == 1u ? 1u : slot_of(n);
      if (k + 4u <= K && K % 4u == 0u) {
        v = read_weight4(slot, row, k);
      } else {
        for (uint q = 0u; q < 4u; ++q) {
          if (k + q < K) v[q] = read_weight(slot, row, k + q);
        }
      }
    }
    const uint at = BM * XS4 + (w * BN + c) * XS4 + kk / 8u;
    const uvec2 packed = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
    if ((kk / 4u) % 2u == 0u) {
      sm_[at].xy = packed;
    } else {
      sm_[at].zw = packed;
    }
  }
#endif
}

void main() {
  const uint rows = launch_rows();
  // pc.tokens_first: token tiles fastest, so that the workgroups in flight
  // share the column tiles' weights through L2 instead of each token tile
  // streaming every weight from DRAM again (the dispatch starts workgroups x
  // first); the executor sets it where the grid is larger than the GPU holds.
  const uint wg_id = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  const uint tile_t = pc.tokens_first != 0u ? wg_id % gl_NumWorkGroups.y : gl_WorkGroupID.y;
  const uint tile_n = pc.tokens_first != 0u ? wg_id / gl_NumWorkGroups.y : gl_WorkGroupID.x;
  const uint t0 = tile_t * BM;
  if (t0 >= rows) return;  // the same for the whole workgroup
  const uint sg = gl_SubgroupID;
#if SPLIT
  // Two rows of 32 tokens x (gate's 4, up's 4) subgroups of 32 columns.
  const uint sm = (sg / 8u) * 32u, sw = (sg % 8u) / 4u, sn = (sg % 4u) * 32u;
#else
  const uint sm = (sg / 4u) * 32u, sn = (sg % 4u) * 32u;  // the subgroup's corner in the tile
#endif

#if HAS_NORM
  // 1 / rms of the tile's tokens, from the row_rms dispatch before.
  for (uint t = gl_LocalInvocationID.x; t < BM; t += WG) inv_rms_[t] = t0 + t < rows ? arena[pc.row_rms + t0 + t] : 0.0;
  barrier();
#endif

  for (uint n0 = tile_n * BN; n0 < NCOLS; n0 += gl_NumWorkGroups.x * BN) {
    // Named accumulators, not arrays: fragments in arrays indexed by loops
    // may live in local memory.
    FRAG_SUM g00 = FRAG_SUM(0.0), g01 = FRAG_SUM(0.0), g10 = FRAG_SUM(0.0), g11 = FRAG_SUM(0.0);
#if EPILOGUE == 1 && !SPLIT
    FRAG_SUM u00 = FRAG_SUM(0.0), u01 = FRAG_SUM(0.0), u10 = FRAG_SUM(0.0), u11 = FRAG_SUM(0.0);
#endif
    read_step(0u, t0, n0, rows);
    for (uint k0 = 0u; k0 < K; k0 += BK) {
      barrier();  // the previous step's multiplies have read the tiles
      stage_step(k0, n0);
      barrier();
      if (k0 + BK < K) read_step(k0 + BK, t0, n0, rows);  // in flight during the multiplies
      for (uint kk = 0u; kk < BK; kk += 16u) {
        FRAG_IN a0, a1, b0, b1;
        const uint bb = BM * XS4, kw = kk / 8u;
        coopMatLoadNV(a0, sm_, sm * XS4 + kw, XS4, false);
        coopMatLoadNV(a1, sm_, (sm + 16u) * XS4 + kw, XS4, false);
#if SPLIT
        const uint bn = bb + sw * BN * XS4;  // this subgroup's weight's rows
#else
        const uint bn = bb;
#endif
        coopMatLoadNV(b0, sm_, bn + sn * XS4 + kw, XS4, true);
        coopMatLoadNV(b1, sm_, bn + (sn + 16u) * XS4 + kw, XS4, true);
        g00 = coopMatMulAddNV(a0, b0, g00);
        g01 = coopMatMulAddNV(a0, b1, g01);
        g10 = coopMatMulAddNV(a1, b0, g10);
        g11 = coopMatMulAddNV(a1, b1, g11);
#if EPILOGUE == 1 && !SPLIT
        coopMatLoadNV(b0, sm_, bb + (BN + sn) * XS4 + kw, XS4, true);
        coopMatLoadNV(b1, sm_, bb + (BN + sn + 16u) * XS4 + kw, XS4, true);
        u00 = coopMatMulAddNV(a0, b0, u00);
        u01 = coopMatMulAddNV(a0, b1, u01);
        u10 = coopMatMulAddNV(a1, b0, u10);
        u11 = coopMatMulAddNV(a1, b1, u11);
#endif
      }
    }
    barrier();  // every subgroup's multiplies are done: the tiles become patches

    // Rows 0-15 of the subgroup's 32 x 32, then rows 16-31 (up's patch 512
    // floats after gate's).
#if SPLIT
    const uint mine = sg * 128u;
    coopMatStoreNV(g00, sm_, mine, 8u, false);
    coopMatStoreNV(g01, sm_, mine + 4u, 8u, false);
    write_split_patch(t0 + sm, n0 + sn, rows, sw == 0u);
    coopMatStoreNV(g10, sm_, mine, 8u, false);
    coopMatStoreNV(g11, sm_, mine + 4u, 8u, false);
    write_split_patch(t0 + sm + 16u, n0 + sn, rows, sw == 0u);
#else
    const uint mine = sg * 128u * NACC;
    coopMatStoreNV(g00, sm_, mine, 8u, false);
    coopMatStoreNV(g01, sm_, mine + 4u, 8u, false);
#if EPILOGUE == 1
    coopMatStoreNV(u00, sm_, mine + 128u, 8u, false);
    coopMatStoreNV(u01, sm_, mine + 132u, 8u, false);
#endif
    write_patch(t0 + sm, n0 + sn, rows);
    coopMatStoreNV(g10, sm_, mine, 8u, false);
    coopMatStoreNV(g11, sm_, mine + 4u, 8u, false);
#if EPILOGUE == 1
    coopMatStoreNV(u10, sm_, mine + 128u, 8u, false);
    coopMatStoreNV(u11, sm_, mine + 132u, 8u, false);
#endif
    write_patch(t0 + sm + 16u, n0 + sn, rows);
#endif
    barrier();  // the patches are read before another column tile is staged
  }
}

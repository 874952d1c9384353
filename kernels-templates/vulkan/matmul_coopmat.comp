// matmul / fused_matmul for prefill-sized buckets on tensor cores, through
// cooperative matrices (SPV_NV_cooperative_matrix: f16 inputs, f32 sums),
// where the device has them; matmul_tiled.comp otherwise (and on lavapipe).
// Same function as matmul.comp (norm prologue, up to three weights,
// silu_mul, residual_add). A workgroup owns BM tokens x BN output columns in
// 8 subgroups of 32 lanes (2 x 4), each 32 x 32 outputs as 2 x 2 16x16
// accumulators (two sets with silu_mul); per step of BK along k it stages the
// (normalised) activations and the decoded weights of the tile in shared
// memory as f16 (weights decoded once per BM tokens), then each subgroup
// multiplies its fragments. Results leave through a 16 x 32 patch of shared
// memory per subgroup, so partial tiles, the q/k/v split of a fused launch
// and the epilogues are written element by element.
//
// Constants: as matmul.comp (K, NUM_W, N0..N2, EPILOGUE, HAS_NORM, EPS,
// Q4K_LANES, weight slots), plus BM = 64, BN = 128, BK = 32 and WG = 256.
// Launch shape: x = workgroups striding over the output columns BN at a time,
// y = one per BM tokens of the bucket.

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

// Subgroup-scope (3) 16 x 16 fragments: f16 inputs, f32 sums.
#define FRAG_IN fcoopmatNV<16, 3, 16, 16>
#define FRAG_SUM fcoopmatNV<32, 3, 16, 16>
// Row stride of the staged tiles in halves: 80 bytes keeps rows 16-byte
// aligned and puts the eight rows a fragment load reads at once in
// different banks.
#define XS (BK + 8)

shared float16_t xs_[BM * XS];         // activations, token-major (fragment A, row-major)
shared float16_t ws_[NACC * BN * XS];  // weights, column-major B: column n's k side by side
shared float cs_[8 * 512];             // 16 x 32 results per subgroup on their way out
shared float inv_rms_[BM];
shared float norm_partial_[WG];

#include_matmul

// The subgroup's 16 x 32 patch of results (tokens r0.., columns n0..) into
// the outputs, element by element, after its epilogue.
void write_patch(uint r0, uint n0, uint rows) {
  const uint sg = gl_SubgroupID;
  subgroupBarrier();  // the patch is stored
  for (uint e = gl_SubgroupInvocationID; e < 512u; e += gl_SubgroupSize) {
    const uint r = r0 + e / 32u, n = n0 + e % 32u;
    if (r >= rows || n >= NCOLS) continue;
    const uint slot = slot_of(n), row = row_of(n, slot);
    const float v = cs_[sg * 512u + e];
#if EPILOGUE == 0
    const uint width = slot == 0u ? N0 : (slot == 1u ? N1 : N2);
    const uint dst = slot == 0u ? pc.out0 : (slot == 1u ? pc.out1 : pc.out2);
    arena[dst + r * width + row] = v;
#elif EPILOGUE == 1
    arena[pc.out0 + r * N0 + row] = v;
#else
    arena[pc.out0 + r * N0 + row] = v + arena[pc.in1 + r * N0 + row];
#endif
  }
  subgroupBarrier();  // the patch is read before the next store
}

void main() {
  const uint rows = launch_rows();
  const uint t0 = gl_WorkGroupID.y * BM;
  if (t0 >= rows) return;  // the same for the whole workgroup
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint sm = (sg / 4u) * 32u, sn = (sg % 4u) * 32u;  // the subgroup's corner in the tile

#if HAS_NORM
  // 1 / rms of each of the tile's tokens: WG / BM threads per token.
  {
    const uint per = WG / BM, t = tid / per, part = tid % per;
    float s = 0.0;
    if (t0 + t < rows) {
      for (uint k = part; k < K; k += per) {
        const float x = arena[pc.in0 + (t0 + t) * K + k];
        s += x * x;
      }
    }
    norm_partial_[tid] = s;
    barrier();
    if (part == 0u) {
      float total = 0.0;
      for (uint i = 0u; i < per; ++i) total += norm_partial_[tid + i];
      inv_rms_[t] = inversesqrt(total / float(K) + EPS);
    }
    barrier();
  }
#endif

  for (uint n0 = gl_WorkGroupID.x * BN; n0 < NCOLS; n0 += gl_NumWorkGroups.x * BN) {
    // Named accumulators, not arrays: fragments in arrays indexed by loops
    // may live in local memory.
    FRAG_SUM g00 = FRAG_SUM(0.0), g01 = FRAG_SUM(0.0), g10 = FRAG_SUM(0.0), g11 = FRAG_SUM(0.0);
#if EPILOGUE == 1
    FRAG_SUM u00 = FRAG_SUM(0.0), u01 = FRAG_SUM(0.0), u10 = FRAG_SUM(0.0), u11 = FRAG_SUM(0.0);
#endif

    for (uint k0 = 0u; k0 < K; k0 += BK) {
      // Activations: BM x BK, consecutive threads along k (coalesced reads).
      for (uint e = tid; e < BM * BK; e += WG) {
        const uint t = e / BK, kk = e % BK, k = k0 + kk;
        float x = 0.0;
        if (t0 + t < rows && k < K) {
          x = arena[pc.in0 + (t0 + t) * K + k];
#if HAS_NORM
          x = x * inv_rms_[t] * vec_[k];
#endif
        }
        xs_[t * XS + kk] = float16_t(x);
      }
#if Q4K_LANES
      // q4_K: BK = 32 is one sub-block; a thread decodes 16 of a row's
      // elements from its block's header and one 16-byte word of codes
      // (half of the sub-block pair's 32 code bytes, low or high nibbles),
      // its scale and min unpacked once.
      for (uint e = tid; e < NACC * BN * 2u; e += WG) {
        const uint w = e / (2u * BN), c = (e / 2u) % BN, part = e % 2u, n = n0 + c;
        float v[16];
        for (uint i = 0u; i < 16u; ++i) v[i] = 0.0;
        if (n < NCOLS) {
          // silu_mul's up (w = 1) has gate's rows.
          const uint row = row_of(n, slot_of(n)), slot = w == 1u ? 1u : slot_of(n);
          const uint sb = (k0 % 256u) / 32u, at = row * (K / 256u * 9u) + (k0 / 256u) * 9u;
          const uvec4 head = wq(slot, at), codes = wq(slot, at + 1u + 2u * (sb / 2u) + part);
          const vec2 dm = unpackHalf2x16(head.x);
          const uint sh = 8u * (sb & 3u);
          const uint by = (head.y >> sh) & 0xFFu, bz = (head.z >> sh) & 0xFFu, bw = (head.w >> sh) & 0xFFu;
          const float sc = float(sb < 4u ? by & 63u : (bw & 15u) | ((by >> 6) << 4));
          const float mn = float(sb < 4u ? bz & 63u : (bw >> 4) | ((bz >> 6) << 4));
          const float d = dm.x * sc, m = dm.y * mn;
          const uint nib = 4u * (sb % 2u);
          for (uint i = 0u; i < 16u; ++i) v[i] = d * float((codes[i / 4u] >> (8u * (i % 4u) + nib)) & 15u) - m;
        }
        for (uint i = 0u; i < 16u; ++i) ws_[(w * BN + c) * XS + 16u * part + i] = float16_t(v[i]);
      }
#else
      // Weights: BN rows x BK, four consecutive k per read where the row allows.
      for (uint e = tid; e < BN * (BK / 4u); e += WG) {
        const uint c = e / (BK / 4u), kk = (e % (BK / 4u)) * 4u, k = k0 + kk, n = n0 + c;
        vec4 w = vec4(0.0);
#if EPILOGUE == 1
        vec4 up = vec4(0.0);
#endif
        if (n < NCOLS) {
          const uint slot = slot_of(n), row = row_of(n, slot);
          if (k + 4u <= K && K % 4u == 0u) {
            w = read_weight4(slot, row, k);
#if EPILOGUE == 1
            up = wread4_1(row, k);
#endif
          } else {
            for (uint i = 0u; i < 4u; ++i) {
              if (k + i < K) {
                w[i] = read_weight(slot, row, k + i);
#if EPILOGUE == 1
                up[i] = wread1(row, k + i);
#endif
              }
            }
          }
        }
        for (uint i = 0u; i < 4u; ++i) {
          ws_[c * XS + kk + i] = float16_t(w[i]);
#if EPILOGUE == 1
          ws_[(BN + c) * XS + kk + i] = float16_t(up[i]);
#endif
        }
      }
#endif
      barrier();
      for (uint kk = 0u; kk < BK; kk += 16u) {
        FRAG_IN a0, a1, b0, b1;
        coopMatLoadNV(a0, xs_, sm * XS + kk, XS, false);
        coopMatLoadNV(a1, xs_, (sm + 16u) * XS + kk, XS, false);
        coopMatLoadNV(b0, ws_, sn * XS + kk, XS, true);
        coopMatLoadNV(b1, ws_, (sn + 16u) * XS + kk, XS, true);
        g00 = coopMatMulAddNV(a0, b0, g00);
        g01 = coopMatMulAddNV(a0, b1, g01);
        g10 = coopMatMulAddNV(a1, b0, g10);
        g11 = coopMatMulAddNV(a1, b1, g11);
#if EPILOGUE == 1
        coopMatLoadNV(b0, ws_, (BN + sn) * XS + kk, XS, true);
        coopMatLoadNV(b1, ws_, (BN + sn + 16u) * XS + kk, XS, true);
        u00 = coopMatMulAddNV(a0, b0, u00);
        u01 = coopMatMulAddNV(a0, b1, u01);
        u10 = coopMatMulAddNV(a1, b0, u10);
        u11 = coopMatMulAddNV(a1, b1, u11);
#endif
      }
      barrier();
    }

#if EPILOGUE == 1
    // The two sets share a layout: silu(gate) * up element by element.
    for (int e = 0; e < g00.length(); ++e) {
      g00[e] = g00[e] / (1.0 + exp(-g00[e])) * u00[e];
      g01[e] = g01[e] / (1.0 + exp(-g01[e])) * u01[e];
      g10[e] = g10[e] / (1.0 + exp(-g10[e])) * u10[e];
      g11[e] = g11[e] / (1.0 + exp(-g11[e])) * u11[e];
    }
#endif
    // Rows 0-15 of the subgroup's 32 x 32, then rows 16-31, through its 16 x 32 patch.
    coopMatStoreNV(g00, cs_, sg * 512u, 32u, false);
    coopMatStoreNV(g01, cs_, sg * 512u + 16u, 32u, false);
    write_patch(t0 + sm, n0 + sn, rows);
    coopMatStoreNV(g10, cs_, sg * 512u, 32u, false);
    coopMatStoreNV(g11, cs_, sg * 512u + 16u, 32u, false);
    write_patch(t0 + sm + 16u, n0 + sn, rows);
  }
}

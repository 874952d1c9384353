// matmul / fused_matmul for prefill-sized buckets: the same function as
// matmul.comp (norm prologue, up to three weights, silu_mul, residual_add),
// computed as a shared-memory tiled product. A workgroup owns BM tokens x BN
// output columns; per step of BK along k it stages the (normalised)
// activations and the decoded weights of the tile in shared memory, so each
// weight is decoded once per BM tokens and each activation read once per BN
// columns (matmul.comp re-reads them per 8 tokens and per COLS columns).
// Each thread accumulates TM x TN outputs: tokens ty + TY * i, columns
// tx + TX * j, so a step's shared reads are a broadcast (activations) and
// consecutive words (weights).
//
// Constants: as matmul.comp (K, NUM_W, N0..N2, EPILOGUE, HAS_NORM, EPS,
// weight slots), plus BM, BN, BK and WG = (BM / TM) * (BN / TN) with
// TM = TN = 4.
// Launch shape: x = workgroups striding over the output columns BN at a time,
// y = one per BM tokens of the bucket.

#define TM 4
#define TN 4
#define TX (BN / TN)
#define TY (BM / TM)

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

// Rows padded by one word: the staging stores walk k, and an unpadded row
// of 64 words would put them all in one bank.
shared float xs_[BK][BM + 1];
shared float ws_[NACC][BK][BN + 1];
shared float inv_rms_[BM];

#include_matmul

void main() {
  const uint rows = launch_rows();
  const uint t0 = gl_WorkGroupID.y * BM;
  if (t0 >= rows) return;  // the same for the whole workgroup
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % TX, ty = tid / TX;

#if HAS_NORM
  // 1 / rms of the tile's tokens, from the row_rms dispatch before.
  for (uint t = tid; t < BM; t += WG) inv_rms_[t] = t0 + t < rows ? arena[pc.row_rms + t0 + t] : 0.0;
  barrier();
#endif

  for (uint n0 = gl_WorkGroupID.x * BN; n0 < NCOLS; n0 += gl_NumWorkGroups.x * BN) {
    float acc[NACC][TM][TN];
    for (int a = 0; a < NACC; ++a)
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[a][i][j] = 0.0;

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
        xs_[kk][t] = x;
      }
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
          ws_[0][kk + i][c] = w[i];
#if EPILOGUE == 1
          ws_[1][kk + i][c] = up[i];
#endif
        }
      }
      barrier();
      for (uint kk = 0u; kk < BK; ++kk) {
        float xv[TM];
        for (int i = 0; i < TM; ++i) xv[i] = xs_[kk][ty + TY * i];
        for (int a = 0; a < NACC; ++a) {
          for (int j = 0; j < TN; ++j) {
            const float w = ws_[a][kk][tx + TX * j];
            for (int i = 0; i < TM; ++i) acc[a][i][j] += xv[i] * w;
          }
        }
      }
      barrier();
    }

    for (int i = 0; i < TM; ++i) {
      const uint r = t0 + ty + TY * i;
      if (r >= rows) continue;
      for (int j = 0; j < TN; ++j) {
        const uint n = n0 + tx + TX * j;
        if (n >= NCOLS) continue;
        const uint slot = slot_of(n), row = row_of(n, slot);
        const float y = acc[0][i][j];
#if EPILOGUE == 0
        const uint width = slot == 0u ? N0 : (slot == 1u ? N1 : N2);
        const uint dst = slot == 0u ? pc.out0 : (slot == 1u ? pc.out1 : pc.out2);
        arena[dst + r * width + row] = y;
#elif EPILOGUE == 1
        arena[pc.out0 + r * N0 + row] = y / (1.0 + exp(-y)) * acc[NACC - 1][i][j];
#else
        arena[pc.out0 + r * N0 + row] = y + arena[pc.in1 + r * N0 + row];
#endif
      }
    }
  }
}

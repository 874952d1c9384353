// matmul / fused_matmul (kiln.matmul, kiln.fused_matmul): for each of the
// launch's rows t and output column n,
//   y[t, n] = sum_k x'[t, k] * W[n, k]
// where x' is x or, with the norm prologue, RMS-normalised x times the gain
// (binding 4). Epilogues: none (up to three weights, each to its own result),
// silu_mul (out0 = silu(x'W0^T) * x'W1^T), residual_add (out0 = x'W0^T + in1).
//
// Constants: K (input width), NUM_W (weights, 1..3), N0..N2 (their rows),
// EPILOGUE (0 none, 1 silu_mul, 2 residual_add), HAS_NORM (0/1), EPS, TT
// (tokens per workgroup), COLS (output columns per workgroup: one pass over
// the activations serves COLS weight rows), WG; each weight slot's decoder
// (weights.glsl); Q4K_LANES (1 when every weight is q4_K: 32-element steps
// through weights.glsl's WDOTQ4K instead of the 4-element decoders).
// Push constants: in0 x, in1 residual, out0..out2 results.
// Launch shape: x = workgroups striding over the output columns COLS at a
// time, y = one per TT tokens of the bucket; workgroups past the step's rows
// return at once.

#if EPILOGUE == 1
#define NACC 2
#else
#define NACC 1
#endif
// Sums per thread: TT tokens x NACC products x COLS columns.
#define NREDUCE (TT * NACC * COLS)
#include_reduce

#if EPILOGUE == 0
#define NCOLS (N0 + N1 + N2)
#else
#define NCOLS N0
#endif

#include_matmul

#if Q4K_LANES
float dot_q4k(uint slot, uint row, uint c, vec4 xl[4], vec4 xh[4], float sum_lo, float sum_hi) {
#if NUM_W >= 2
  if (slot == 1u) return wdotq4k_1(row, c, xl, xh, sum_lo, sum_hi);
#endif
#if NUM_W >= 3
  if (slot == 2u) return wdotq4k_2(row, c, xl, xh, sum_lo, sum_hi);
#endif
  return wdotq4k_0(row, c, xl, xh, sum_lo, sum_hi);
}
#endif

void main() {
  const uint rows = launch_rows();
  const uint t0 = gl_WorkGroupID.y * TT;
  if (t0 >= rows) return;  // the same for the whole workgroup
  const uint tid = gl_LocalInvocationID.x;

  float scale[NREDUCE];
  for (int i = 0; i < NREDUCE; ++i) scale[i] = 0.0;
#if HAS_NORM
  for (uint t = 0u; t < TT; ++t) {
    if (t0 + t >= rows) break;
    for (uint k = tid; k < K; k += WG) {
      const float x = arena[pc.in0 + (t0 + t) * K + k];
      scale[t] += x * x;
    }
  }
  reduce_sum(scale);
  for (uint t = 0u; t < TT; ++t) scale[t] = inversesqrt(scale[t] / float(K) + EPS);
#endif

  for (uint n0 = gl_WorkGroupID.x * COLS; n0 < NCOLS; n0 += gl_NumWorkGroups.x * COLS) {
    float acc[NREDUCE];
    for (int i = 0; i < NREDUCE; ++i) acc[i] = 0.0;
#if Q4K_LANES
    // Every weight is q4_K: 32 elements per step, the 16 code bytes of one
    // lane chunk (weights.glsl's WDOTQ4K) with their activations.
    for (uint c = tid; c < K / 32u; c += WG) {
      const uint q = c % 8u;
      const uint lo = (c / 8u) * 256u + 64u * (q / 2u) + 16u * (q % 2u);
      vec4 xl[TT][4], xh[TT][4];
      float sum_lo[TT], sum_hi[TT];
      for (uint t = 0u; t < TT; ++t) {
        sum_lo[t] = 0.0;
        sum_hi[t] = 0.0;
        for (uint i = 0u; i < 4u; ++i) {
          xl[t][i] = vec4(0.0);
          xh[t][i] = vec4(0.0);
          if (t0 + t < rows) {
            const uint at = pc.in0 + (t0 + t) * K + lo + 4u * i;
            xl[t][i] = vec4(arena[at], arena[at + 1u], arena[at + 2u], arena[at + 3u]);
            xh[t][i] = vec4(arena[at + 32u], arena[at + 33u], arena[at + 34u], arena[at + 35u]);
#if HAS_NORM
            const uint g = lo + 4u * i;
            xl[t][i] = xl[t][i] * scale[t] * vec4(vec_[g], vec_[g + 1u], vec_[g + 2u], vec_[g + 3u]);
            xh[t][i] = xh[t][i] * scale[t] * vec4(vec_[g + 32u], vec_[g + 33u], vec_[g + 34u], vec_[g + 35u]);
#endif
            sum_lo[t] += dot(xl[t][i], vec4(1.0));
            sum_hi[t] += dot(xh[t][i], vec4(1.0));
          }
        }
      }
      for (uint cc = 0u; cc < COLS; ++cc) {
        const uint n = n0 + cc;
        if (n >= NCOLS) break;
        const uint slot = slot_of(n);
        const uint row = row_of(n, slot);
        for (uint t = 0u; t < TT; ++t) {
          acc[cc * NACC * TT + t] += dot_q4k(slot, row, c, xl[t], xh[t], sum_lo[t], sum_hi[t]);
#if EPILOGUE == 1
          acc[cc * NACC * TT + TT + t] += wdotq4k_1(row, c, xl[t], xh[t], sum_lo[t], sum_hi[t]);
#endif
        }
      }
    }
#else
    // Four consecutive k per step (one block's scales, one word of codes),
    // then the K % 4 tail one at a time.
    for (uint k = 4u * tid; k + 4u <= K; k += 4u * WG) {
      vec4 xs[TT];  // this thread's activations at k..k+3, loaded once for all COLS columns
      for (uint t = 0u; t < TT; ++t) {
        xs[t] = vec4(0.0);
        if (t0 + t < rows) {
          const uint at = pc.in0 + (t0 + t) * K + k;
          xs[t] = vec4(arena[at], arena[at + 1u], arena[at + 2u], arena[at + 3u]);
#if HAS_NORM
          xs[t] = xs[t] * scale[t] * vec4(vec_[k], vec_[k + 1u], vec_[k + 2u], vec_[k + 3u]);
#endif
        }
      }
      for (uint c = 0u; c < COLS; ++c) {
        const uint n = n0 + c;
        if (n >= NCOLS) break;
        const uint slot = slot_of(n);
        const uint row = row_of(n, slot);
        const vec4 w = read_weight4(slot, row, k);
#if EPILOGUE == 1
        const vec4 w_up = wread4_1(row, k);
#endif
        for (uint t = 0u; t < TT; ++t) {
          acc[c * NACC * TT + t] += dot(xs[t], w);
#if EPILOGUE == 1
          acc[c * NACC * TT + TT + t] += dot(xs[t], w_up);
#endif
        }
      }
    }
#if K % 4 != 0
    for (uint k = (K / 4) * 4 + tid; k < K; k += WG) {
      float xs[TT];
      for (uint t = 0u; t < TT; ++t) {
        xs[t] = 0.0;
        if (t0 + t < rows) {
          xs[t] = arena[pc.in0 + (t0 + t) * K + k];
#if HAS_NORM
          xs[t] = xs[t] * scale[t] * vec_[k];
#endif
        }
      }
      for (uint c = 0u; c < COLS; ++c) {
        const uint n = n0 + c;
        if (n >= NCOLS) break;
        const uint slot = slot_of(n);
        const uint row = row_of(n, slot);
        const float w = read_weight(slot, row, k);
#if EPILOGUE == 1
        const float w_up = wread1(row, k);
#endif
        for (uint t = 0u; t < TT; ++t) {
          acc[c * NACC * TT + t] += xs[t] * w;
#if EPILOGUE == 1
          acc[c * NACC * TT + TT + t] += xs[t] * w_up;
#endif
        }
      }
    }
#endif
#endif  // Q4K_LANES
    reduce_sum(acc);
    if (tid == 0u) {
      for (uint c = 0u; c < COLS; ++c) {
        const uint n = n0 + c;
        if (n >= NCOLS) break;
        const uint slot = slot_of(n);
        const uint row = row_of(n, slot);
        for (uint t = 0u; t < TT; ++t) {
          const uint r = t0 + t;
          if (r >= rows) break;
          const float y = acc[c * NACC * TT + t];
#if EPILOGUE == 0
          const uint width = slot == 0u ? N0 : (slot == 1u ? N1 : N2);
          const uint dst = slot == 0u ? pc.out0 : (slot == 1u ? pc.out1 : pc.out2);
          arena[dst + r * width + row] = y;
#elif EPILOGUE == 1
          arena[pc.out0 + r * N0 + row] = y / (1.0 + exp(-y)) * acc[c * NACC * TT + TT + t];
#else
          arena[pc.out0 + r * N0 + row] = y + arena[pc.in1 + r * N0 + row];
#endif
        }
      }
    }
  }
}

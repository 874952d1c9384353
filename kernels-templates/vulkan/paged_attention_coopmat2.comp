// paged_attention for prefill-sized steps (one split) on workgroup-scope
// cooperative matrices (SPV_NV_cooperative_matrix2), where the device has
// them: the same output as paged_attention_prefill.comp, with Q K^T and P V
// as tensor-core products. That kernel's dots and sums on CUDA cores took
// 7.3 ms of a 512-token step of Llama-3-8B on an H100, ~9 TFLOP/s
// (docs/perf/vulkan-h200.md, session 47).
//
// A workgroup takes BR query rows, QT consecutive tokens x the GROUP query
// heads of one KV head (row r: token t0 + r / GROUP, head g GROUP + r %
// GROUP), so each K and V row is staged once for all of them, and walks the
// positions in tiles of BC (flash attention: a running row max M and sum L,
// O rescaled by exp(M_old - M) each tile). Q (rotated, times SCALE) and each
// K and V tile are gathered from the arena and the pages into shared memory
// as f16 by the workgroup's threads (any page size, f32 or f16 pages; each
// tile's loads issued while the tile before is multiplied), then loaded into
// cooperative matrices; S, P's sums and O stay f32.
// A tile of tokens from several sequences takes one pass per sequence, as
// paged_attention_prefill.comp does; a row counts only in its sequence's
// pass (masked to MASKED elsewhere, so its P is 0 there).
// Constants: NUM_HEADS, NUM_KV_HEADS, HEAD_DIM (a multiple of 16), PAGE_SIZE,
// SCALE, HAS_ROPE (+ ROPE_DIMS, ROPE_STYLE), KV_F16, BR (a multiple of 16
// and of GROUP), BC (a multiple of 16), WG (at 256 threads NVIDIA's driver
// wants HEAD_DIM, BR and BC multiples of 32).
// Push constants: in0 q, out0, kv_base, kv_half.
// Launch shape: x = NUM_KV_HEADS, y = ceil(bucket / QT), the last token
// tiles (the longest: causal) first.
#if HAS_ROPE
#include_rope
#endif
#define KV_W (NUM_KV_HEADS * HEAD_DIM)
#define GROUP (NUM_HEADS / NUM_KV_HEADS)
#define QT (BR / GROUP)
#define HV (HEAD_DIM / 4)  // vec4s of a row
// A masked score: far below any real one, and finite, so that M - S and
// M_old - M never meet inf - inf.
#define MASKED (-1.0e30)
#define NO_ROW 0xFFFFFFFFu

#if KV_F16
layout(std430, set = 0, binding = 6) readonly buffer KvPagesH { uvec2 kvh[]; };
vec4 kv_vec4(uint i) {
  const uvec2 w = kvh[i];
  return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
}
#else
layout(std430, set = 0, binding = 6) readonly buffer KvPages4 { vec4 kv4[]; };
vec4 kv_vec4(uint i) { return kv4[i]; }
#endif

#define ROWS_QK (BR > BC ? BR : BC)
// Q's rows first (read once into a matrix), then each tile's K rows.
shared f16vec4 qk_[ROWS_QK * HV];
shared f16vec4 v_[BC * HV];
shared uint row_pos_[BR];
shared uint row_seq_[BR];  // NO_ROW: past the step's tokens

#define TILE_S coopmat<float, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseAccumulator>
#define TILE_O coopmat<float, gl_ScopeWorkgroup, BR, HEAD_DIM, gl_MatrixUseAccumulator>

float max2(const in float a, const in float b) { return max(a, b); }
float add2(const in float a, const in float b) { return a + b; }
// Scores of rows outside sequence s, and of positions past a row's own.
float mask_score(const in uint r, const in uint c, const in float e, const in uint j0, const in uint s) {
  return row_seq_[r] == s && j0 + c <= row_pos_[r] ? e : MASKED;
}
float max_of(const in uint r, const in uint c, const in float e, const in float other) { return max(e, other); }
float exp_of_difference(const in uint r, const in uint c, const in float e, const in float m) {
  return e <= MASKED ? 0.0 : exp(e - m);
}
float exp_of_drop(const in uint r, const in uint c, const in float m_old, const in float m) { return exp(m_old - m); }
// Row r's output, divided by its sum, to the arena (rows of the step only).
float store_row(const in uint r, const in uint c, const in float e, const in float l, const in uint dst0) {
  if (row_seq_[r] != NO_ROW) arena[dst0 + (r / GROUP) * (NUM_HEADS * HEAD_DIM) + (r % GROUP) * HEAD_DIM + c] = e / l;
  return e;
}

// The K and V vec4s of position tile j0 that thread tid stages (PER of
// each), read into registers one tile ahead, so that their loads are in
// flight while the tile before is multiplied.
#define PER ((BC * HV + WG - 1) / WG)
void load_tile(out vec4 kp[PER], out vec4 vp[PER], uint tid, uint j0, uint end, uint table, uint kv_col) {
  for (uint i = 0u; i < PER; ++i) {
    const uint e = tid + i * WG, p = e / HV, c = e % HV;
    // Past the tile's end: zeros (weighed 0, and 0 x garbage could be NaN).
    kp[i] = vec4(0.0);
    vp[i] = vec4(0.0);
    if (p < BC && j0 + p < end) {
      const uint j = j0 + p;
      const uint page = uint(io_at(IO_BLOCK_TABLES, table + j / PAGE_SIZE));
      const uint row = (pc.kv_base + (page * PAGE_SIZE + j % PAGE_SIZE) * KV_W + kv_col) / 4u;
      kp[i] = kv_vec4(row + c);
      vp[i] = kv_vec4(row + pc.kv_half / 4u + c);
    }
  }
}

float q_element(uint q_head, uint c, uint pos) {
#if HAS_ROPE
  if (c < ROPE_DIMS) return rope_element(q_head, c, pos);
#endif
  return arena[q_head + c];
}

void main() {
  const uint g = gl_WorkGroupID.x;
  const uint T = step_tokens();
  const uint tiles = (T + QT - 1u) / QT;
  if (gl_WorkGroupID.y >= tiles) return;
  const uint t0 = (tiles - 1u - gl_WorkGroupID.y) * QT;  // the longest rows first
  const uint tid = gl_LocalInvocationID.x;

  for (uint r = tid; r < BR; r += WG) {
    const uint t = t0 + r / GROUP;
    row_seq_[r] = t < T ? sequence_of(t) : NO_ROW;
    row_pos_[r] = t < T ? uint(io_at(IO_POSITIONS, t)) : 0u;
  }
  barrier();
  for (uint e = tid; e < BR * HV; e += WG) {
    const uint r = e / HV, c = (e % HV) * 4u;
    vec4 x = vec4(0.0);
    if (row_seq_[r] != NO_ROW) {
      const uint q_head = pc.in0 + ((t0 + r / GROUP) * NUM_HEADS + g * GROUP + r % GROUP) * HEAD_DIM;
      const uint pos = row_pos_[r];
      x = SCALE * vec4(q_element(q_head, c, pos), q_element(q_head, c + 1u, pos), q_element(q_head, c + 2u, pos),
                       q_element(q_head, c + 3u, pos));
    }
    qk_[e] = f16vec4(x);
  }
  barrier();
  coopmat<float16_t, gl_ScopeWorkgroup, BR, HEAD_DIM, gl_MatrixUseA> q;
  coopMatLoad(q, qk_, 0, HV, gl_CooperativeMatrixLayoutRowMajor);

  TILE_O o = TILE_O(0.0);
  TILE_S m = TILE_S(MASKED), l = TILE_S(0.0);
  const uint t_last = min(t0 + uint(QT), T) - 1u;
  const uint S = uint(io[IO_S]);
  const uint kv_col = g * HEAD_DIM;
  const uint s_last = sequence_of(t_last);
  for (uint s = sequence_of(t0); s <= s_last; ++s) {
    // A sequence without tokens in this step has no rows here.
    const uint next = s + 1u < S ? uint(io_at(IO_QUERY_STARTS, s + 1u)) : T;
    if (next == uint(io_at(IO_QUERY_STARTS, s))) continue;
    // Positions 0 .. end - 1: up to the last of this sequence's tokens in the tile.
    const uint end = uint(io_at(IO_POSITIONS, min(t_last, next - 1u))) + 1u;
    const uint table = s * uint(io[IO_PAGES_PER_SEQ]);
    vec4 kp[PER], vp[PER];
    load_tile(kp, vp, tid, 0u, end, table, kv_col);
    [[dont_unroll]] for (uint j0 = 0u; j0 < end; j0 += BC) {
      barrier();  // the previous tile's (or Q's) rows are read
      for (uint i = 0u; i < PER; ++i) {
        const uint e = tid + i * WG;
        if (e < BC * HV) {
          qk_[e] = f16vec4(kp[i]);
          v_[e] = f16vec4(vp[i]);
        }
      }
      barrier();
      if (j0 + BC < end) load_tile(kp, vp, tid, j0 + BC, end, table, kv_col);
      // S = Q K^T: K's rows (p, c) read as the columns of B.
      coopmat<float16_t, gl_ScopeWorkgroup, HEAD_DIM, BC, gl_MatrixUseB> kt;
      coopMatLoad(kt, qk_, 0, HV, gl_CooperativeMatrixLayoutColumnMajor);
      TILE_S sc = coopMatMulAdd(q, kt, TILE_S(0.0));
      coopMatPerElementNV(sc, sc, mask_score, j0, s);
      TILE_S row_max, m_new, p, drop, row_sum;
      coopMatReduceNV(row_max, sc, gl_CooperativeMatrixReduceRowNV, max2);
      coopMatPerElementNV(m_new, row_max, max_of, m);
      coopMatPerElementNV(p, sc, exp_of_difference, m_new);
      coopMatPerElementNV(drop, m, exp_of_drop, m_new);
      coopMatReduceNV(row_sum, p, gl_CooperativeMatrixReduceRowNV, add2);
      l = l * drop + row_sum;
      m = m_new;
      // O's rows times their drop: the drop's row (all one value) spread
      // to O's width.
      TILE_O drop_o;
      coopMatReduceNV(drop_o, drop, gl_CooperativeMatrixReduceRowNV, max2);
      o = o * drop_o;
      coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA> p16 =
          coopmat<float16_t, gl_ScopeWorkgroup, BR, BC, gl_MatrixUseA>(p);
      coopmat<float16_t, gl_ScopeWorkgroup, BC, HEAD_DIM, gl_MatrixUseB> vt;
      coopMatLoad(vt, v_, 0, HV, gl_CooperativeMatrixLayoutRowMajor);
      o = coopMatMulAdd(p16, vt, o);
    }
  }
  TILE_O l_o;
  coopMatReduceNV(l_o, l, gl_CooperativeMatrixReduceRowNV, max2);
  const uint dst0 = pc.out0 + (t0 * NUM_HEADS + g * GROUP) * HEAD_DIM;
  coopMatPerElementNV(o, o, store_row, l_o, dst0);
}

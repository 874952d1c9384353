// The front half of paged_attention (kiln.paged_attention): every token's k
// (rotated at its position when HAS_ROPE) and v rows go into the layer's
// pages at (block_tables[s][pos / PAGE_SIZE], pos % PAGE_SIZE); attention,
// the next dispatch, then sees this step's own tokens. (Decode-sized steps
// whose k and v come from a q, k, v matmul skip it: matmul_decode.comp writes
// them there itself, APPEND_KV.)
// Constants: NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, HAS_ROPE (+ ROPE_DIMS,
// ROPE_STYLE), KV_F16 (pages of halves: an invocation per pair, rounded to
// nearest even as the CPU rounds them), WG. Push constants: in0 k, in1 v,
// kv_base, kv_half.
// Launch shape: x = workgroups striding over bucket * NUM_KV_HEADS * HEAD_DIM
// (halved with KV_F16).
#include_kv_pages
#if HAS_ROPE
#include_rope
#endif

// Element c of token t's K row (element i of the arena's k), rotated.
float k_element(uint i, uint c, uint pos) {
#if HAS_ROPE
  const uint d = c % HEAD_DIM;
  if (d < ROPE_DIMS) return rope_element(pc.in0 + i - d, d, pos);
#endif
  return arena[pc.in0 + i];
}

#if KV_F16
void main() {
  // Pairs (KV_W, kv_base and kv_half are even): one word of two halves each.
  const uint n = step_tokens() * KV_W / 2u;
  for (uint w = gl_GlobalInvocationID.x; w < n; w += gl_NumWorkGroups.x * WG) {
    const uint i = 2u * w, t = i / KV_W, c = i % KV_W;
    const uint pos = uint(io_at(IO_POSITIONS, t)), row = k_row(t, pos);
    put_pair(row, c, k_element(i, c, pos), k_element(i + 1u, c + 1u, pos));
    put_pair(row + pc.kv_half, c, arena[pc.in1 + i], arena[pc.in1 + i + 1u]);
  }
}
#else
void main() {
  const uint n = step_tokens() * KV_W;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint t = i / KV_W, c = i % KV_W;
    const uint pos = uint(io_at(IO_POSITIONS, t)), row = k_row(t, pos);
    kv[row + c] = k_element(i, c, pos);
    kv[row + pc.kv_half + c] = arena[pc.in1 + i];
  }
}
#endif

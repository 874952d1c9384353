// The front half of paged_attention (kiln.paged_attention): every token's k
// (rotated at its position when HAS_ROPE) and v rows go into the layer's
// pages at (block_tables[s][pos / PAGE_SIZE], pos % PAGE_SIZE); attention,
// the next dispatch, then sees this step's own tokens.
// Constants: NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, HAS_ROPE (+ ROPE_DIMS,
// ROPE_STYLE), WG. Push constants: in0 k, in1 v, kv_base, kv_half.
// Launch shape: x = workgroups striding over bucket * NUM_KV_HEADS * HEAD_DIM.
#if HAS_ROPE
#include_rope
#endif
#define KV_W (NUM_KV_HEADS * HEAD_DIM)

void main() {
  const uint n = step_tokens() * KV_W;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint t = i / KV_W, c = i % KV_W;
    const uint pos = uint(io_at(IO_POSITIONS, t));
    const uint s = sequence_of(t);
    const uint page = uint(io_at(IO_BLOCK_TABLES, s * uint(io[IO_PAGES_PER_SEQ]) + pos / PAGE_SIZE));
    const uint row = pc.kv_base + (page * PAGE_SIZE + pos % PAGE_SIZE) * KV_W;
    float k = arena[pc.in0 + i];
#if HAS_ROPE
    const uint d = c % HEAD_DIM;
    if (d < ROPE_DIMS) k = rope_element(pc.in0 + i - d, d, pos);
#endif
    kv[row + c] = k;
    kv[row + pc.kv_half + c] = arena[pc.in1 + i];
  }
}

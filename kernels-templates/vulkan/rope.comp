// rope (kiln.rope): out0 = in0 with every head of every token rotated at the
// token's position; dims past ROPE_DIMS are copied. One thread per pair
// reads both elements before writing, so out0 may alias in0.
// Constants: NUM_HEADS, HEAD_DIM, ROPE_DIMS, ROPE_STYLE, WG.
// Push constants: in0, out0. Launch shape: x = workgroups striding over
// bucket * NUM_HEADS * (HEAD_DIM - ROPE_PAIRS) items.
#include_rope
#define ITEMS_PER_HEAD (HEAD_DIM - ROPE_PAIRS)

void main() {
  const uint n = step_tokens() * NUM_HEADS * ITEMS_PER_HEAD;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint head = i / ITEMS_PER_HEAD, j = i % ITEMS_PER_HEAD;
    const uint t = head / NUM_HEADS;
    const uint src = pc.in0 + head * HEAD_DIM, dst = pc.out0 + head * HEAD_DIM;
    if (j < ROPE_PAIRS) {
      const uint pos = uint(io_at(IO_POSITIONS, t));
#if ROPE_STYLE == 0
      const uint a = 2u * j, b = a + 1u;
#else
      const uint a = j, b = j + ROPE_PAIRS;
#endif
      const vec2 r = rope_pair(j, pos, arena[src + a], arena[src + b]);
      arena[dst + a] = r.x;
      arena[dst + b] = r.y;
    } else {
      const uint c = ROPE_DIMS + (j - ROPE_PAIRS);
      arena[dst + c] = arena[src + c];
    }
  }
}

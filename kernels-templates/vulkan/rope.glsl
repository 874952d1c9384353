// Rotary embedding helpers, as runtime/cpu/rope.cc defines it. The cos/sin
// of every (position, pair) come from a table the runtime computes in double
// (binding 4: [position][pair][cos, sin]; ROPE_TABLE names another buffer
// of that layout), so GPU and CPU rotate alike.
// Constants: ROPE_DIMS (rotated dims, even), ROPE_STYLE (0 interleaved pairs
// (2i, 2i+1), 1 half pairs (i, i + ROPE_DIMS/2)).
#define ROPE_PAIRS (ROPE_DIMS / 2)
#ifndef ROPE_TABLE
#define ROPE_TABLE vec_
#endif

// (x0, x1), the values of pair i, rotated at `pos`.
vec2 rope_pair(uint i, uint pos, float x0, float x1) {
  const float cs = ROPE_TABLE[(pos * ROPE_PAIRS + i) * 2u], sn = ROPE_TABLE[(pos * ROPE_PAIRS + i) * 2u + 1u];
  return vec2(x0 * cs - x1 * sn, x0 * sn + x1 * cs);
}

// Element c (< ROPE_DIMS) of a head rotated at `pos`; `head` is the float
// offset of the unrotated head in `arena`.
float rope_element(uint head, uint c, uint pos) {
#if ROPE_STYLE == 0
  const uint i = c / 2u, a = 2u * i, b = a + 1u;
#else
  const uint i = c % ROPE_PAIRS, a = i, b = i + ROPE_PAIRS;
#endif
  const vec2 r = rope_pair(i, pos, arena[head + a], arena[head + b]);
  return c == a ? r.x : r.y;
}

// Rotary embedding helpers, as runtime/cpu/rope.cc defines it. The cos/sin
// of every (position, pair) come from a table the runtime computes in double
// (binding 4: [position][pair][cos, sin]), so GPU and CPU rotate alike.
// Constants: ROPE_DIMS (rotated dims, even), ROPE_STYLE (0 interleaved pairs
// (2i, 2i+1), 1 half pairs (i, i + ROPE_DIMS/2)).
#define ROPE_PAIRS (ROPE_DIMS / 2)

// Element c (< ROPE_DIMS) of a head rotated at `pos`; `head` is the float
// offset of the unrotated head in `arena`.
float rope_element(uint head, uint c, uint pos) {
#if ROPE_STYLE == 0
  const uint i = c / 2u, a = 2u * i, b = a + 1u;
#else
  const uint i = c % ROPE_PAIRS, a = i, b = i + ROPE_PAIRS;
#endif
  const float cs = vec_[(pos * ROPE_PAIRS + i) * 2u], sn = vec_[(pos * ROPE_PAIRS + i) * 2u + 1u];
  const float x0 = arena[head + a], x1 = arena[head + b];
  return c == a ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
}

// The front half of paged_attention (kiln.paged_attention): every token's k
// (rotated at its position when HAS_ROPE) and v rows go into the layer's
// pages at (block_tables[s][pos / PAGE_SIZE], pos % PAGE_SIZE); attention,
// the next dispatch, then sees this step's own tokens.
// Constants: NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, HAS_ROPE (+ ROPE_DIMS,
// ROPE_STYLE), KV_F16 (pages of halves: an invocation per pair, rounded to
// nearest even as the CPU rounds them), WG. Push constants: in0 k, in1 v,
// kv_base, kv_half.
// Launch shape: x = workgroups striding over bucket * NUM_KV_HEADS * HEAD_DIM
// (halved with KV_F16).
#if HAS_ROPE
#include_rope
#endif
#define KV_W (NUM_KV_HEADS * HEAD_DIM)

// Element c of token t's K row (element i of the arena's k), rotated.
float k_element(uint i, uint c, uint pos) {
#if HAS_ROPE
  const uint d = c % HEAD_DIM;
  if (d < ROPE_DIMS) return rope_element(pc.in0 + i - d, d, pos);
#endif
  return arena[pc.in0 + i];
}

// The element offset of token t's K row (at position pos) in the layer's pages.
uint k_row(uint t, uint pos) {
  const uint page = uint(io_at(IO_BLOCK_TABLES, sequence_of(t) * uint(io[IO_PAGES_PER_SEQ]) + pos / PAGE_SIZE));
  return pc.kv_base + (page * PAGE_SIZE + pos % PAGE_SIZE) * KV_W;
}

#if KV_F16
layout(std430, set = 0, binding = 6) buffer KvPagesU { uint kvu[]; };

// x in f16 bits, rounded to nearest even (packHalf2x16's rounding is the
// implementation's; the CPU's and CUDA's are to nearest even).
uint half_rne(float x) {
  const uint b = floatBitsToUint(x), sign = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u);  // inf, nan
  if (a >= 0x477FF000u) return sign | 0x7C00u;                                   // rounds past 65504
  if (a < 0x38800000u) {                                                           // subnormal or zero
    if (a < 0x33000000u) return sign;
    const uint shift = 126u - (a >> 23), m = (a & 0x7FFFFFu) | 0x800000u;
    uint r = m >> shift;
    const uint rem = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
    if (rem > half_ulp || (rem == half_ulp && (r & 1u) != 0u)) ++r;
    return sign | r;
  }
  uint r = (a >> 13) - (112u << 10);
  const uint rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) != 0u)) ++r;
  return sign | r;
}

void main() {
  // Pairs (KV_W, kv_base and kv_half are even): one word of two halves each.
  const uint n = step_tokens() * KV_W / 2u;
  for (uint w = gl_GlobalInvocationID.x; w < n; w += gl_NumWorkGroups.x * WG) {
    const uint i = 2u * w, t = i / KV_W, c = i % KV_W;
    const uint pos = uint(io_at(IO_POSITIONS, t)), row = k_row(t, pos);
    kvu[(row + c) / 2u] = half_rne(k_element(i, c, pos)) | (half_rne(k_element(i + 1u, c + 1u, pos)) << 16);
    kvu[(row + pc.kv_half + c) / 2u] = half_rne(arena[pc.in1 + i]) | (half_rne(arena[pc.in1 + i + 1u]) << 16);
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

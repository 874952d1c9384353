// Writing K/V rows into a layer's pages (kv_append.comp, and matmul_decode.comp
// where it appends its own k and v rows). Constants: NUM_KV_HEADS, HEAD_DIM,
// PAGE_SIZE, KV_F16 (pages of halves: rows written a pair a word, rounded to
// nearest even as the CPU rounds them).
#define KV_W (NUM_KV_HEADS * HEAD_DIM)

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
#endif

// Elements c, c + 1 (c even) of a page row at element offset `row`.
void put_pair(uint row, uint c, float a, float b) {
#if KV_F16
  kvu[(row + c) / 2u] = half_rne(a) | (half_rne(b) << 16);
#else
  kv[row + c] = a;
  kv[row + c + 1u] = b;
#endif
}

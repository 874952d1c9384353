// Shared by the matmul templates (matmul.comp, matmul_decode.comp,
// matmul_tiled.comp, matmul_coopmat.comp): which weight and row an output
// column is, and reads through that weight's decoders (weights.glsl) by
// slot. With Q4K_LANES (every weight q4_K), the weights also as 16-byte
// words: q4_K rows are whole 144-byte blocks.
// Needs EPILOGUE, NUM_W, N0, N1 defined and the slots' decoders included.

// Which weight (slot) and which of its rows output column n is.
uint slot_of(uint n) {
#if EPILOGUE == 0
  if (n >= N0 + N1) return 2u;
  if (n >= N0) return 1u;
#endif
  return 0u;
}
uint row_of(uint n, uint slot) { return slot == 0u ? n : (slot == 1u ? n - N0 : n - N0 - N1); }

vec4 read_weight4(uint slot, uint row, uint k) {
#if NUM_W >= 2
  if (slot == 1u) return wread4_1(row, k);
#endif
#if NUM_W >= 3
  if (slot == 2u) return wread4_2(row, k);
#endif
  return wread4_0(row, k);
}
float read_weight(uint slot, uint row, uint k) {
#if NUM_W >= 2
  if (slot == 1u) return wread1(row, k);
#endif
#if NUM_W >= 3
  if (slot == 2u) return wread2(row, k);
#endif
  return wread0(row, k);
}

#if Q4K_LANES
layout(std430, set = 0, binding = 0) readonly buffer Weight0Q { uvec4 w0q[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weight1Q { uvec4 w1q[]; };
layout(std430, set = 0, binding = 2) readonly buffer Weight2Q { uvec4 w2q[]; };
uvec4 wq(uint slot, uint at) {
#if NUM_W >= 2
  if (slot == 1u) return w1q[at];
#endif
#if NUM_W >= 3
  if (slot == 2u) return w2q[at];
#endif
  return w0q[at];
}
#endif

// Shared by every kiln Vulkan kernel: the one descriptor-set layout every
// pipeline uses, the push constants, and the step inputs that the runtime
// writes into the host-visible io buffer before each submit.
//
// Codegen puts `#version`, the extensions and the template's constants
// (`#define NAME value`) in front of this file; WG (threads per workgroup)
// is always one of them.
//
// Bindings (set 0): 0..2 the weights of the launch as raw 32-bit words
// (attention: 0 holds its split-K partials),
// 3 the host-visible io buffer (only the logits are written there), 4 an f32
// vector (norm gain, bias or a rope cos/sin table), 5 the activation arena,
// 6 the KV pages of the launch's layer, 7 the step inputs, copied from the
// io buffer into device memory at the start of every step (so kernels never
// read the host's memory across the bus). Bindings a launch does not use hold
// a small dummy buffer.

layout(local_size_x = WG) in;

#if defined(USES_PARTIALS) && defined(FOLD) && FOLD
// paged_attention's FOLD: a split's last workgroup reads the partials the
// others wrote in the same dispatch (coherent: from L2, never a stale L1),
// after a count per (token, KV head) at the buffer's front says they are done.
layout(std430, set = 0, binding = 0) coherent buffer Partials { float partial_[]; };
layout(std430, set = 0, binding = 0) coherent buffer FoldCounts { uint fold_count_[]; };
#elif defined(USES_PARTIALS)
// Attention's split-K partials take the first weight slot (it has no weights).
layout(std430, set = 0, binding = 0) buffer Partials { float partial_[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer Weight0 { uint w0[]; };
#endif
layout(std430, set = 0, binding = 1) readonly buffer Weight1 { uint w1[]; };
layout(std430, set = 0, binding = 2) readonly buffer Weight2 { uint w2[]; };
#if defined(APPEND_KV) && HAS_ROPE
// matmul_decode appending rotated k rows (it writes no logits): the rope
// table (rope.glsl's layout) in the io buffer's place.
layout(std430, set = 0, binding = 3) readonly buffer RopeTable { float rope_[]; };
#else
layout(std430, set = 0, binding = 3) buffer HostIo { int host_io[]; };
#endif
layout(std430, set = 0, binding = 4) readonly buffer Vector { float vec_[]; };
layout(std430, set = 0, binding = 5) buffer Arena { float arena[]; };
layout(std430, set = 0, binding = 6) buffer KvPages { float kv[]; };
layout(std430, set = 0, binding = 7) buffer Io { int io[]; };

// Per-dispatch values recorded into the command buffer: arena offsets (in
// floats) of the launch's operands for the bucket, whether its rows are the
// step's T tokens or its R logit rows, where the layer's pages start, the
// bucket, and where the io fields start (the header's entries from
// IO_TOKENS on, which never change): each read of the header was one more
// memory round trip at the start of a dispatch.
layout(push_constant) uniform Params {
  uint in0;
  uint in1;
  uint out0;
  uint out1;
  uint out2;
  uint rows_are_logit_rows;
  uint kv_base;  // element offset (f32, or f16 with KV_F16) of the layer's K half inside binding 6
  uint kv_half;  // elements from a K row to its V row
  uint splits;   // attention: workgroups that share one (token, head); split_sum: K slices
  uint tokens_first;  // matmul_coopmat: token tiles fastest in the workgroup order
  uint row_rms;       // tiled matmuls with a norm: arena offset of each token's 1 / rms (row_rms.comp)
  uint bucket;        // tokens the step's bucket holds (a 1-token bucket's steps have T = 1)
  int io_field[7];    // io[IO_TOKENS + i]: where field IO_TOKENS + i starts in io
  uint column_tile_base;  // matmul_coopmat2: its first column tile (a launch's tail in small tiles)
  int rows_gate;          // see launch_rows
} pc;

// The step inputs' header (runtime/vulkan/vulkan_executor.cc writes the same layout).
#define IO_T 0
#define IO_S 1
#define IO_R 2
#define IO_PAGES_PER_SEQ 3
#define IO_TOKENS 4
#define IO_POSITIONS 5
#define IO_QUERY_STARTS 6
#define IO_CONTEXT_LENS 7
#define IO_LOGIT_ROWS 8
#define IO_BLOCK_TABLES 9
#define IO_LOGITS_OUT 10

uint step_tokens() { return pc.bucket == 1u ? 1u : uint(io[IO_T]); }
// A launch of logit rows in a prefill-sized bucket is recorded twice: on
// its decode variant for steps of at most rows_gate of them (rows_gate > 0;
// a prefill step has one), and on its tiled variant for steps of more
// (rows_gate < 0). The one that sits a step out sees no rows.
uint launch_rows() {
  if (pc.rows_are_logit_rows == 0u) return step_tokens();
  const uint r = uint(io[IO_R]);
  const bool idle = pc.rows_gate > 0 ? r > uint(pc.rows_gate) : pc.rows_gate < 0 && r <= uint(-pc.rows_gate);
  return idle ? 0u : r;
}
int io_start(int field) { return pc.io_field[field - IO_TOKENS]; }
int io_at(int field, uint i) { return io[io_start(field) + int(i)]; }

// The sequence of token t: the s with query_starts[s] <= t < query_starts[s + 1].
uint sequence_of(uint t) {
  int s = 0;
  const int S = io[IO_S];
  while (s + 1 < S && uint(io_at(IO_QUERY_STARTS, uint(s + 1))) <= t) ++s;
  return uint(s);
}

// Positions each split of paged_attention takes of token position pos's
// pos + 1 (split-K): at least min_chunk, so short contexts leave the later
// splits empty; attention_combine reads the splits the same way.
uint attention_chunk(uint pos, uint splits, uint min_chunk) { return max((pos + splits) / splits, min_chunk); }

// Weight storages (codegen sets WSTORAGE per weight slot to one of these).
#define ST_F32 0
#define ST_F16 1
#define ST_BF16 2
#define ST_Q8_0 3
#define ST_Q4_0 4
#define ST_Q4_1 5
#define ST_Q5_0 6
#define ST_Q5_1 7
#define ST_Q2_K 8
#define ST_Q3_K 9
#define ST_Q4_K 10
#define ST_Q5_K 11
#define ST_Q6_K 12
#define ST_INT4 13
#define ST_INT2 14

// q4_K sub-block s's 6-bit scale and min (x, y), from the three 32-bit words
// y, z, w of the block's 12 scale bytes (the words after d and dmin).
vec2 q4k_scale_min(uint y, uint z, uint w, uint s) {
  const uint sh = 8u * (s & 3u);
  const uint by = (y >> sh) & 0xFFu, bz = (z >> sh) & 0xFFu, bw = (w >> sh) & 0xFFu;
  return vec2(s < 4u ? by & 63u : (bw & 15u) | ((by >> 6) << 4), s < 4u ? bz & 63u : (bw >> 4) | ((bz >> 6) << 4));
}

// (word >> (shift + 8 i)) & mask for the four bytes i of a word: four codes
// of a weight block at once.
vec4 byte_fields(uint word, uint shift, uint mask) {
  return vec4((word >> shift) & mask, (word >> (shift + 8u)) & mask, (word >> (shift + 16u)) & mask,
              (word >> (shift + 24u)) & mask);
}

#if defined(USES_PARTIALS)
// Output element c of one (token, head) from its first `used` split-K
// partials at `base` (each HEAD_DIM + 2 floats: max m_s, sum l_s, weighted
// V a_s), sum_s a_s[c] exp(m_s - M) / sum_s l_s exp(m_s - M), M = max_s m_s.
// Two passes whose loads do not wait on each other's sums (a running
// maximum made each split's loads wait on the previous split's: a chain of
// `used` L2 round trips). Split 0 always has positions, so M is finite; an
// empty split (m_s = -inf, l_s = 0) weighs 0.
float merge_splits(uint base, uint used, uint c) {
  float mx = uintBitsToFloat(0xFF800000u);  // -inf
  for (uint s = 0u; s < used; ++s) mx = max(mx, partial_[base + s * (HEAD_DIM + 2u)]);
  float sum = 0.0, v = 0.0;
  for (uint s = 0u; s < used; ++s) {
    const uint at = base + s * (HEAD_DIM + 2u);
    const float w = exp(partial_[at] - mx);
    sum += partial_[at + 1u] * w;
    v += partial_[at + 2u + c] * w;
  }
  return v / sum;
}
#endif

// argmax (kiln.argmax): out0[r] = the index (as int32 bits) of the largest
// element of in0[r, :], the first of equal maxima. With TO_HOST (the
// executor's greedy steps) the index goes to the host-visible io buffer
// instead, where copy_logits puts the logits.
// Constants: WIDTH, WG, TO_HOST. Push constants: in0, out0, rows_are_logit_rows.
// Launch shape: x = one workgroup per row of the bucket.
#ifndef TO_HOST
#define TO_HOST 0
#endif
shared float best_value_[WG];
shared uint best_index_[WG];

#if WIDTH % 4 == 0
// The row as 16-byte words (where it starts on one: kiln's plans align
// every buffer to 256 bytes).
layout(std430, set = 0, binding = 5) buffer Arena4 { vec4 arena4[]; };

// Word w's four elements against the thread's best (in index order: the
// first of equal maxima stays).
void take(vec4 v, uint w, inout float best, inout uint index) {
  for (uint c = 0u; c < 4u; ++c) {
    if (v[c] > best) {
      best = v[c];
      index = 4u * w + c;
    }
  }
}
#endif

void main() {
  const uint r = gl_WorkGroupID.x;
  if (r >= launch_rows()) return;
  const uint tid = gl_LocalInvocationID.x;
  float best = uintBitsToFloat(0xFF800000u);  // -inf
  uint index = 0xFFFFFFFFu;
  const uint row = pc.in0 + r * WIDTH;
#if WIDTH % 4 == 0
  if (row % 4u == 0u) {
    // Four 16-byte loads a thread in flight before any compare: one
    // workgroup reads the whole row (~500 KB for a 128k vocabulary), so it
    // waits on L2's latency unless many loads are outstanding.
    const uint base = row / 4u, words = WIDTH / 4u;
    uint w = tid;
    for (; w + 3u * WG < words; w += 4u * WG) {
      vec4 v[4];
      for (uint j = 0u; j < 4u; ++j) v[j] = arena4[base + w + j * WG];
      for (uint j = 0u; j < 4u; ++j) take(v[j], w + j * WG, best, index);
    }
    for (; w < words; w += WG) take(arena4[base + w], w, best, index);
  } else
#endif
  {
    for (uint k = tid; k < WIDTH; k += WG) {
      const float x = arena[row + k];
      if (x > best) {
        best = x;
        index = k;
      }
    }
  }
  best_value_[tid] = best;
  best_index_[tid] = index;
  barrier();
  for (uint stride = WG / 2u; stride > 0u; stride /= 2u) {
    if (tid < stride) {
      const float v = best_value_[tid + stride];
      const uint i = best_index_[tid + stride];
      if (v > best_value_[tid] || (v == best_value_[tid] && i < best_index_[tid])) {
        best_value_[tid] = v;
        best_index_[tid] = i;
      }
    }
    barrier();
  }
  const int id = int(best_index_[0] == 0xFFFFFFFFu ? 0u : best_index_[0]);
#if TO_HOST
  if (tid == 0u) host_io[io[IO_LOGITS_OUT] + int(r)] = id;
#else
  if (tid == 0u) arena[pc.out0 + r] = intBitsToFloat(id);
#endif
}

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

void main() {
  const uint r = gl_WorkGroupID.x;
  if (r >= launch_rows()) return;
  const uint tid = gl_LocalInvocationID.x;
  float best = uintBitsToFloat(0xFF800000u);  // -inf
  uint index = 0xFFFFFFFFu;
  for (uint k = tid; k < WIDTH; k += WG) {
    const float x = arena[pc.in0 + r * WIDTH + k];
    if (x > best) {
      best = x;
      index = k;
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
  if (tid == 0u) host_io[io_start(IO_LOGITS_OUT) + int(r)] = id;
#else
  if (tid == 0u) arena[pc.out0 + r] = intBitsToFloat(id);
#endif
}

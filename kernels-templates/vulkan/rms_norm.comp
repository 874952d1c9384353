// rms_norm (kiln.rms_norm): out0[r, :] = in0[r, :] * rsqrt(mean(in0[r, :]^2) + EPS) * gain
// (gain in binding 4). Out may alias in: each thread writes only what it read.
// Constants: WIDTH, EPS, WG. Push constants: in0, out0, rows_are_logit_rows.
// Launch shape: x = one workgroup per row of the bucket.
#define NREDUCE 1
#include_reduce

void main() {
  const uint r = gl_WorkGroupID.x;
  if (r >= launch_rows()) return;
  const uint tid = gl_LocalInvocationID.x;
  float ss[1];
  ss[0] = 0.0;
  for (uint k = tid; k < WIDTH; k += WG) {
    const float x = arena[pc.in0 + r * WIDTH + k];
    ss[0] += x * x;
  }
  reduce_sum(ss);
  const float scale = inversesqrt(ss[0] / float(WIDTH) + EPS);
  for (uint k = tid; k < WIDTH; k += WG) {
    arena[pc.out0 + r * WIDTH + k] = arena[pc.in0 + r * WIDTH + k] * scale * vec_[k];
  }
}

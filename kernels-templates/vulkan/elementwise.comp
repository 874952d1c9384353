// bias_add, silu, mul, add (kiln.bias_add / silu / mul / add) over the
// launch's rows of WIDTH elements:
//   OP 0 silu:     out0 = in0 / (1 + exp(-in0))
//   OP 1 mul:      out0 = in0 * in1
//   OP 2 add:      out0 = in0 + in1
//   OP 3 bias_add: out0 = in0 + bias[c]   (bias in binding 4)
//   OP 4 silu_mul: out0 = in0 / (1 + exp(-in0)) * in1 (after a silu_mul
//                  launch on matmul_coopmat2, which writes gate and up apart)
//   OP 5 split_sum: out0 = in0[0] + .. + in0[splits - 1] + in1 (the K slices
//                  of a residual_add launch on matmul_coopmat2, each
//                  rows x WIDTH floats, then the residual)
// Element-wise, so out0 may alias an input.
// Constants: OP, WIDTH, WG. Push constants: in0, in1, out0, rows_are_logit_rows,
// splits (OP 5).
// Launch shape: x = workgroups striding over bucket * WIDTH elements.
void main() {
  const uint n = launch_rows() * WIDTH;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const float a = arena[pc.in0 + i];
#if OP == 0
    arena[pc.out0 + i] = a / (1.0 + exp(-a));
#elif OP == 1
    arena[pc.out0 + i] = a * arena[pc.in1 + i];
#elif OP == 2
    arena[pc.out0 + i] = a + arena[pc.in1 + i];
#elif OP == 4
    arena[pc.out0 + i] = a / (1.0 + exp(-a)) * arena[pc.in1 + i];
#elif OP == 5
    float sum = a;
    for (uint z = 1u; z < pc.splits; ++z) sum += arena[pc.in0 + z * n + i];
    arena[pc.out0 + i] = sum + arena[pc.in1 + i];
#else
    arena[pc.out0 + i] = a + vec_[i % WIDTH];
#endif
  }
}

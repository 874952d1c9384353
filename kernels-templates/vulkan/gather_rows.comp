// gather_rows (kiln.gather_rows): out0[i, :] = in0[logit_rows[i], :] for the
// step's R requested rows (the rows whose logits the caller wants).
// Constants: WIDTH, WG. Push constants: in0, out0.
// Launch shape: x = workgroups striding over bucket * WIDTH elements.
void main() {
  const uint n = uint(io[IO_R]) * WIDTH;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint r = i / WIDTH, c = i % WIDTH;
    arena[pc.out0 + i] = arena[pc.in0 + uint(io_at(IO_LOGIT_ROWS, r)) * WIDTH + c];
  }
}

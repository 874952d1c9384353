// The step's result (R rows of WIDTH floats at in0) into the host-visible io
// buffer (binding 3) where the runtime reads it back; only the R rows asked
// for cross to the host.
// Constants: WIDTH, WG. Push constants: in0.
// Launch shape: x = workgroups striding over bucket * WIDTH elements.
void main() {
  const uint n = uint(io[IO_R]) * WIDTH;
  const int at = io_start(IO_LOGITS_OUT);
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    host_io[at + int(i)] = floatBitsToInt(arena[pc.in0 + i]);
  }
}

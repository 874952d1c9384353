// embedding (kiln.embedding): out0[t, c] = table[tokens[t], c], the table
// decoded from its storage (slot 0). The runtime checks the token ids against
// the table's rows before it submits.
// Constants: WIDTH, WG, slot 0's decoder. Push constants: out0.
// Launch shape: x = workgroups striding over bucket * WIDTH elements.
void main() {
  const uint n = step_tokens() * WIDTH;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * WG) {
    const uint t = i / WIDTH, c = i % WIDTH;
    arena[pc.out0 + i] = wread0(uint(io_at(IO_TOKENS, t)), c);
  }
}

// Workgroup-wide sums of NREDUCE floats per thread: subgroup adds first, then
// one partial per subgroup through shared memory. Works for any subgroup size
// the device picks. Every thread of the workgroup must call it (uniform flow);
// every thread gets the totals.
shared float reduce_partial_[NREDUCE * WG];

void reduce_sum(inout float v[NREDUCE]) {
  for (int i = 0; i < NREDUCE; ++i) v[i] = subgroupAdd(v[i]);
  if (subgroupElect()) {
    for (int i = 0; i < NREDUCE; ++i) reduce_partial_[i * WG + gl_SubgroupID] = v[i];
  }
  barrier();
  for (int i = 0; i < NREDUCE; ++i) {
    float s = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) s += reduce_partial_[i * WG + g];
    v[i] = s;
  }
  barrier();
}

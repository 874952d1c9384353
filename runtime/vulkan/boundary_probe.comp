// The Vulkan boundary probe (`kiln bench --probe`): what a step pays to move
// from one phase of work to the next, two ways.
// - pc.phases = 0: an empty dispatch; the probe times a run of them, each
//   followed by the compute-to-compute barrier the executor records, i.e.
//   one dispatch boundary.
// - pc.phases = n: one dispatch whose workgroups (all resident) pass n
//   device-wide barriers: an arrival count that only grows (barrier k waits
//   for (k + 1) x the workgroups), so it needs no reset. Each phase a
//   workgroup writes its slot and, past the barrier, reads its neighbour's:
//   a wrong value counts an error, so the barrier is checked, not only timed.
//   Slots alternate between two halves by phase parity, so a neighbour that
//   runs ahead writes the other half. A workgroup that spins pc.spin_limit
//   times gives up and counts a timeout (workgroups not all resident).
//   With pc.two_level, workgroups arrive on a counter per 32 of them and the
//   last of each 32 on the top one (fewer atomics on one address).
// Compiled ahead of time into boundary_probe_spirv.inc (the runtime links no
// shader compiler):
//   glslangValidator -V --target-env vulkan1.1 -x -o boundary_probe_spirv.inc boundary_probe.comp
// (ctest vulkan.boundary_probe_spirv_is_current checks the two agree).
#version 450
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) coherent volatile buffer Sync {
  uint arrived;
  uint errors;
  uint timeouts;
  uint pad;
  uint sub[64];  // two_level: the arrivals of workgroups 32 i .. 32 i + 31
  uint slot[];   // 2 x the workgroups
};
layout(push_constant) uniform Params {
  uint phases;
  uint spin_limit;
  uint two_level;
} pc;
shared bool gave_up_;

void main() {
  if (pc.phases == 0u) return;
  const uint groups = gl_NumWorkGroups.x, g = gl_WorkGroupID.x;
  const bool lead = gl_LocalInvocationIndex == 0u;
  for (uint k = 0u; k < pc.phases; ++k) {
    const uint half_start = (k & 1u) * groups;
    if (lead) slot[half_start + g] = k + 1u;
    barrier();
    if (lead) {
      memoryBarrierBuffer();
      uint target = (k + 1u) * groups;
      if (pc.two_level != 0u) {
        const uint of = g / 32u, members = min(32u, groups - of * 32u);
        if (atomicAdd(sub[of], 1u) + 1u == (k + 1u) * members) atomicAdd(arrived, 1u);
        target = (k + 1u) * ((groups + 31u) / 32u);
      } else {
        atomicAdd(arrived, 1u);
      }
      uint spins = 0u;
      gave_up_ = false;
      while (arrived < target && !gave_up_) gave_up_ = ++spins == pc.spin_limit;
      memoryBarrierBuffer();
      if (gave_up_) {
        atomicAdd(timeouts, 1u);  // the others give up too: their counts never complete
      } else if (slot[half_start + (g + 1u) % groups] != k + 1u) {
        atomicAdd(errors, 1u);
      }
    }
    barrier();
    if (gave_up_) return;  // the same for the whole workgroup
  }
}

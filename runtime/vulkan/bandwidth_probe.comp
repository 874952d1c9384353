// The Vulkan bandwidth probe's copy: dst = src, 16 bytes per thread and step,
// a grid-stride loop over n vectors. Compiled ahead of time into
// bandwidth_probe_spirv.inc (the runtime links no shader compiler):
//   glslangValidator -V --target-env vulkan1.1 -x -o bandwidth_probe_spirv.inc bandwidth_probe.comp
// (ctest vulkan.bandwidth_probe_spirv_is_current checks the two agree).
#version 450
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uvec4 dst[]; };
layout(push_constant) uniform Params { uint n; } pc;
void main() {
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) dst[i] = src[i];
}

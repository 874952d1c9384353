// Which instruction set the CPU kernels use. Every kernel has a portable
// scalar path; some also have an AVX2 path (with FMA and F16C), compiled per
// function so that the library still runs on CPUs without them.
#pragma once

#include <string_view>

namespace kiln::cpu {

enum class CpuIsa { kScalar, kAvx2 };

// kAvx2 when this CPU has AVX2, FMA and F16C; otherwise kScalar.
CpuIsa DetectCpuIsa();

std::string_view CpuIsaName(CpuIsa isa);  // "scalar", "avx2"

}  // namespace kiln::cpu

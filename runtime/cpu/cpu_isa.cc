#include "runtime/cpu/cpu_isa.h"

namespace kiln::cpu {

CpuIsa DetectCpuIsa() {
#if defined(__x86_64__) || defined(__i386__)
  static const CpuIsa isa = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                                    __builtin_cpu_supports("f16c")
                                ? CpuIsa::kAvx2
                                : CpuIsa::kScalar;
  return isa;
#else
  return CpuIsa::kScalar;
#endif
}

std::string_view CpuIsaName(CpuIsa isa) { return isa == CpuIsa::kAvx2 ? "avx2" : "scalar"; }

}  // namespace kiln::cpu

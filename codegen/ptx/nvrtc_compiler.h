// Compiles template instantiations of the embedded CUDA templates for one
// SM: NVRTC to PTX (compute_NN), nvJitLink to a cubin (sm_NN), keeping the
// lowered name of every instantiation and the assembler's verbose log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::codegen::ptx {

struct CompiledModule {
  std::string ptx;
  std::vector<uint8_t> cubin;
  std::vector<std::string> lowered_names;  // one per name expression, same order
  std::string info_log;                    // nvJitLink -verbose (ptxas resource lines)
};

// Errors name the failing instantiation(s) and carry the compiler's log.
absl::StatusOr<CompiledModule> CompileInstantiations(const std::vector<std::string>& name_expressions, uint32_t sm);

}  // namespace kiln::codegen::ptx

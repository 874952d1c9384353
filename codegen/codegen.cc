#include "codegen/codegen.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kiln::codegen {

absl::StatusOr<std::vector<uint8_t>> GenerateKernels(const Plan& plan, const std::string& target) {
  return absl::UnimplementedError(absl::StrCat("this kiln was built without codegen for target '", target, "'"));
}

}  // namespace kiln::codegen

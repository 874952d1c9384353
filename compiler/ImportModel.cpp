//===- ImportModel.cpp - pick the importer by what the path is ------------===//

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "compiler/Importers.h"
#include "runtime/formats/gguf.h"
#include "runtime/formats/hf_config.h"

namespace kiln::compiler {

absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> ImportModel(mlir::MLIRContext& context, const std::string& path,
                                                              int64_t max_context) {
  absl::StatusOr<LlamaModelSpec> spec;
  if (std::filesystem::is_directory(path)) {
    absl::StatusOr<HfModel> hf = OpenHfModel(path);
    if (!hf.ok()) return hf.status();
    spec = SpecFromHf(*hf, path);
  } else {
    absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Open(path);
    if (!gguf.ok()) return gguf.status();
    spec = SpecFromGguf(**gguf);
  }
  if (!spec.ok()) return spec.status();
  return BuildStepModule(context, *spec, max_context);
}

}  // namespace kiln::compiler

// A testdata model compiled in memory and bound for the CPU executor, as the
// end-to-end checks use it.
#pragma once

#include <memory>
#include <string>

#include "compiler/CompileModel.h"
#include "gtest/gtest.h"
#include "runtime/executor/cpu_executor.h"
#include "runtime/executor/program.h"
#include "tests/test_support.h"

namespace kiln::testing {

// models/<tag>.gguf compiled with `quant` and a `kv_type` page pool; null
// (and a test failure on a compile error) when the file is absent or does
// not load.
inline std::unique_ptr<Program> CompileTestModel(const std::string& tag, const std::string& quant = "",
                                                 const std::string& kv_type = "f32") {
  const std::filesystem::path model = TestDataFile("models/" + tag + ".gguf");
  if (model.empty()) return nullptr;
  compiler::PipelineOptions options;
  options.quant = quant;
  options.kv_type = kv_type;
  options.print_remarks = false;
  absl::StatusOr<compiler::CompiledModel> compiled = compiler::CompileModel(model.string(), options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  absl::StatusOr<Program> program = LoadGgufProgram(model.string(), compiled->plan_json);
  EXPECT_TRUE(program.ok()) << program.status();
  return program.ok() ? std::make_unique<Program>(*std::move(program)) : nullptr;
}

// An executor for `program` with pages for `tokens` positions.
inline std::unique_ptr<CpuExecutor> MakeExecutor(const Program& program, int64_t tokens) {
  CpuExecutorOptions exec;
  exec.num_pages = (tokens + program.plan.pool.page_size - 1) / program.plan.pool.page_size;
  absl::StatusOr<std::unique_ptr<CpuExecutor>> ex = CpuExecutor::Create(program.plan, program.weights, exec);
  EXPECT_TRUE(ex.ok()) << ex.status();
  return ex.ok() ? *std::move(ex) : nullptr;
}

}  // namespace kiln::testing

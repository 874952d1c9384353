// Backend selection around CUDA on any machine: without a driver (or without
// cuda kernels in the program) "auto" falls back to the CPU and says why,
// and an explicit --backend cuda is an Unavailable error with the reason.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/backend/backend.h"
#include "runtime/cuda/cuda_driver.h"
#include "tests/cuda/single_op_plans.h"

namespace kiln {
namespace {

Program TinyProgram(testing::SingleOpPlan& b) {
  const int64_t x = b.Activation(16, 8);
  Program p;
  p.plan = b.PlanWithResult(x, 16);
  p.weights = b.Source();
  return p;
}

TEST(CudaBackend, ProgramWithoutCudaKernelsFallsBackToTheCpuSayingWhy) {
  testing::SingleOpPlan b({1}, PlanPagePool{1, 1, 8, 16, 16}, 1);
  Program p = TinyProgram(b);
  absl::StatusOr<SelectedBackend> s = CreateExecutor(p, BackendOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(absl::StartsWith(s->executor->Describe(), "cpu")) << s->executor->Describe();
  EXPECT_TRUE(absl::StrContains(s->reason, "cuda: ")) << s->reason;
  BackendOptions cuda;
  cuda.backend = "cuda";
  absl::StatusOr<SelectedBackend> explicit_cuda = CreateExecutor(p, cuda);
  ASSERT_FALSE(explicit_cuda.ok());
  EXPECT_TRUE(absl::IsUnavailable(explicit_cuda.status())) << explicit_cuda.status();
  EXPECT_TRUE(absl::StrContains(explicit_cuda.status().message(), "cuda kernels")) << explicit_cuda.status();
}

TEST(CudaBackend, DriverAbsenceIsUnavailableNotACrash) {
  absl::StatusOr<const cuda::DriverApi*> api = cuda::LoadDriver();
  if (api.ok()) GTEST_SKIP() << "a CUDA driver is present here";
  EXPECT_TRUE(absl::IsUnavailable(api.status())) << api.status();
  EXPECT_TRUE(absl::StrContains(api.status().message(), "libcuda.so.1")) << api.status();
}

TEST(CudaBackend, DescribeKernelBundleReadsCudaSectionsAndRefusesGarbage) {
  const std::vector<uint8_t> garbage = {1, 2, 3};
  EXPECT_TRUE(absl::StrContains(DescribeKernelBundle("cuda:sm_90", garbage), "unreadable")) << DescribeKernelBundle("cuda:sm_90", garbage);
}

}  // namespace
}  // namespace kiln

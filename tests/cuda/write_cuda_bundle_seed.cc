// Writes a small valid CUDA kernels section (the bundle format of
// runtime/cuda/cuda_bundle.h) as the bundle fuzzer's seed.
#include <cstdio>

#include "runtime/cuda/cuda_bundle.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_cuda_bundle_seed OUT\n");
    return 2;
  }
  kiln::cuda::CudaBundle b;
  b.sm = 90;
  b.ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  b.cubin = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  b.info_log = "ptxas info    : Used 12 registers, used 0 barriers, 64 bytes smem\n";
  b.kernels.push_back({"kiln::rms_norm_kernel", "_ZN4kiln15rms_norm_kernelE", 12, 0, 0, 64, 0});
  b.kernels.push_back({"kiln::attention_kernel<128>", "_ZN4kiln16attention_kernelILi128EE", 108, 0, 0, 2600, 0});
  const std::vector<uint8_t> bytes = kiln::cuda::SerializeBundle(b);
  FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  return 0;
}

// Writes a small valid kernels section of each GPU backend (the bundle
// formats of runtime/cuda/cuda_bundle.h and runtime/vulkan/vulkan_bundle.h),
// made by this tree's serializers, as the bundle fuzzers' seeds.
#include <cstdio>
#include <iterator>
#include <vector>

#include "runtime/cuda/cuda_bundle.h"
#include "runtime/vulkan/vulkan_bundle.h"

namespace {

constexpr uint32_t kProbeSpirv[] = {
#include "runtime/vulkan/bandwidth_probe_spirv.inc"
};

std::vector<uint8_t> CudaSeed() {
  kiln::cuda::CudaBundle b;
  b.sm = 90;
  b.ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  b.cubin = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  b.info_log = "ptxas info    : Used 12 registers, used 0 barriers, 64 bytes smem\n";
  b.kernels.push_back({"kiln::rms_norm_kernel", "_ZN4kiln15rms_norm_kernelE", 12, 0, 0, 64, 0});
  b.kernels.push_back({"kiln::attention_kernel<128, kiln::KvF32>",
                       "_ZN4kiln16attention_kernelILi128ENS_5KvF32EEEvNS_15AttentionParamsE", 108, 0, 0, 2600, 0});
  return kiln::cuda::SerializeBundle(b);
}

// The bandwidth probe's real SPIR-V and a minimal module.
std::vector<uint8_t> VulkanSeed() {
  kiln::vulkan::SpirvModule probe;
  probe.template_name = "bandwidth_probe";
  probe.constants = "WG=256";
  probe.workgroup_size = 256;
  probe.words.assign(std::begin(kProbeSpirv), std::end(kProbeSpirv));
  kiln::vulkan::SpirvModule tiny;
  tiny.template_name = "rms_norm";
  tiny.constants = "D=64 EPS=1e-05";
  tiny.workgroup_size = 64;
  tiny.words = {0x07230203, 0x00010300, 0, 8, 0};
  return kiln::vulkan::SerializeBundle({probe, tiny});
}

bool Write(const char* path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: write_bundle_seeds CUDA_OUT VULKAN_OUT\n");
    return 2;
  }
  return Write(argv[1], CudaSeed()) && Write(argv[2], VulkanSeed()) ? 0 : 1;
}

#include "runtime/vulkan/vulkan_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/vulkan/vulkan_device.h"

namespace kiln::vulkan {
namespace {

// bandwidth_probe.comp compiled to SPIR-V (see that file).
constexpr uint32_t kCopySpirv[] = {
#include "runtime/vulkan/bandwidth_probe_spirv.inc"
};
constexpr uint32_t kCopyThreads = 256;  // local_size_x of bandwidth_probe.comp

// boundary_probe.comp compiled to SPIR-V (see that file).
constexpr uint32_t kBoundarySpirv[] = {
#include "runtime/vulkan/boundary_probe_spirv.inc"
};

// matmul_probe.comp's variants (tile shapes) compiled to SPIR-V.
struct MatmulProbeVariant {
  uint32_t bm, bn, bk, threads;
  std::span<const uint32_t> spirv;
};
#include "runtime/vulkan/matmul_probe_spirv.inc"

// A probe's pipeline and its one descriptor set over its buffers (bindings
// 0..), destroyed with it.
class ProbePipeline {
 public:
  explicit ProbePipeline(VulkanDevice& dev) : dev_(dev) {}
  ~ProbePipeline() {
    const VulkanApi& api = dev_.api();
    if (pipeline_ != VK_NULL_HANDLE) api.vkDestroyPipeline(dev_.device(), pipeline_, nullptr);
    if (pool_ != VK_NULL_HANDLE) api.vkDestroyDescriptorPool(dev_.device(), pool_, nullptr);
    if (layout_ != VK_NULL_HANDLE) api.vkDestroyPipelineLayout(dev_.device(), layout_, nullptr);
    if (set_layout_ != VK_NULL_HANDLE) api.vkDestroyDescriptorSetLayout(dev_.device(), set_layout_, nullptr);
  }

  absl::Status Create(std::span<const uint32_t> spirv, std::span<const Buffer* const> buffers, uint32_t push_bytes,
                      const std::string& what) {
    const auto n = static_cast<uint32_t>(buffers.size());
    if (absl::Status s = dev_.CreateComputeLayouts(n, push_bytes, &set_layout_, &layout_); !s.ok()) return s;
    absl::StatusOr<VkPipeline> pipeline = dev_.CreateComputePipeline(spirv, "main", layout_, what);
    if (!pipeline.ok()) return pipeline.status();
    pipeline_ = *pipeline;
    absl::StatusOr<VkDescriptorPool> pool = dev_.CreateDescriptorPool(1, n);
    if (!pool.ok()) return pool.status();
    pool_ = *pool;
    absl::StatusOr<VkDescriptorSet> set = dev_.AllocateDescriptorSet(pool_, set_layout_);
    if (!set.ok()) return set.status();
    set_ = *set;
    std::vector<VkDescriptorBufferInfo> infos;
    for (const Buffer* b : buffers) infos.push_back({b->buffer, 0, b->size});
    dev_.WriteStorageBuffers(set_, infos);
    return absl::OkStatus();
  }

  // `n` dispatches of `groups`, a barrier after each.
  void Record(VkCommandBuffer cb, std::span<const uint32_t> push, uint32_t groups_x, uint32_t groups_y, int n) const {
    const VulkanApi& api = dev_.api();
    api.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_);
    api.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout_, 0, 1, &set_, 0, nullptr);
    if (!push.empty()) {
      api.vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<uint32_t>(push.size_bytes()),
                             push.data());
    }
    for (int i = 0; i < n; ++i) {
      api.vkCmdDispatch(cb, groups_x, groups_y, 1);
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      api.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                               &mb, 0, nullptr, 0, nullptr);
    }
  }

 private:
  VulkanDevice& dev_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkDescriptorSet set_ = VK_NULL_HANDLE;
};

// Seconds for `n` runs of `record`, after one run to warm up.
absl::StatusOr<double> TimeRuns(VulkanDevice& dev, const std::function<void(VkCommandBuffer, int)>& record, int n) {
  if (absl::Status s = dev.RunOnce([&](VkCommandBuffer cb) { record(cb, 1); }); !s.ok()) return s;
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = dev.RunOnce([&](VkCommandBuffer cb) { record(cb, n); }); !s.ok()) return s;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The fastest variant of matmul_probe.comp on an f16 GEMM of kSize^3 (a and b
// all ones, so every output is kSize, exact in f16: checked). Returns FLOP/s
// and names the variant in `what`.
absl::StatusOr<double> ProbeMatmul(VulkanDevice& dev, std::string* what) {
  constexpr uint32_t kSize = 8192;  // scripts/compile_matmul_probe.py's KSIZE
  constexpr int kRuns = 8;
  const VkDeviceSize bytes = VkDeviceSize{kSize} * kSize * 2;
  Buffer a, b, c, host;
  absl::Status s;
  double best = 0;
  auto make = [&](Buffer& x, VkDeviceSize size, bool visible, const char* name) {
    if (!s.ok()) return;
    absl::StatusOr<Buffer> r = dev.CreateBuffer(size, visible, name);
    if (r.ok()) x = *r; else s = r.status();
  };
  make(a, bytes, false, "matmul probe a");
  make(b, bytes, false, "matmul probe b");
  make(c, bytes, false, "matmul probe c");
  make(host, 16, true, "matmul probe check");
  if (s.ok()) {
    s = dev.RunOnce([&](VkCommandBuffer cb) {
      dev.api().vkCmdFillBuffer(cb, a.buffer, 0, bytes, 0x3C003C00u);  // f16 1.0 pairs
      dev.api().vkCmdFillBuffer(cb, b.buffer, 0, bytes, 0x3C003C00u);
    });
  }
  for (const MatmulProbeVariant& v : kMatmulProbeVariants) {
    if (!s.ok()) break;
    const std::string name = absl::StrFormat("matmul probe %ux%ux%u", v.bm, v.bn, v.bk);
    ProbePipeline pipeline(dev);
    const Buffer* buffers[] = {&a, &b, &c};
    // The sizes are the shader's constants (kSize = its KSIZE): no push constants.
    if (absl::Status p = pipeline.Create(v.spirv, buffers, 0, name); !p.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(p.message()).c_str());
      continue;
    }
    absl::StatusOr<double> seconds = TimeRuns(
        dev, [&](VkCommandBuffer cb, int n) { pipeline.Record(cb, {}, kSize / v.bn, kSize / v.bm, n); }, kRuns);
    if (!seconds.ok()) {
      s = seconds.status();
      break;
    }
    // The last output row's last 8 values, read back: each must be kSize.
    uint16_t got[8] = {};
    s = dev.RunOnce([&](VkCommandBuffer cb) {
      const VkBufferCopy region{bytes - 16, 0, 16};
      dev.api().vkCmdCopyBuffer(cb, c.buffer, host.buffer, 1, &region);
    });
    if (!s.ok()) break;
    std::memcpy(got, host.mapped, sizeof(got));
    const double flops = 2.0 * kSize * kSize * static_cast<double>(kSize) * kRuns / *seconds;
    const bool exact = std::all_of(std::begin(got), std::end(got), [](uint16_t h) { return h == 0x7000; });  // 8192
    if (!exact) std::fprintf(stderr, "%s: wrong result, not counted (%.1f TFLOP/s)\n", name.c_str(), flops / 1e12);
    if (exact && flops > best) {
      best = flops;
      *what = absl::StrFormat("f16 GEMM %u^3 on workgroup-scope cooperative matrices, %ux%ux%u tiles, %u threads",
                              kSize, v.bm, v.bn, v.bk, v.threads);
    }
  }
  dev.DestroyBuffer(a);
  dev.DestroyBuffer(b);
  dev.DestroyBuffer(c);
  dev.DestroyBuffer(host);
  if (!s.ok()) return s;
  return best;
}

// What moving from one phase of a step to the next costs (boundary_probe.comp):
// an empty dispatch of the decode launches' size (4 workgroups a compute unit)
// with its barrier, and, where every workgroup is resident (a GPU that says
// how many compute units it has), a device-wide barrier inside one dispatch of
// 1 and 4 workgroups a unit. A line for the probe's description.
absl::StatusOr<std::string> ProbeBoundaries(VulkanDevice& dev) {
  const uint32_t units = dev.compute_units();
  const bool resident = dev.props().deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU && units > 0;
  const uint32_t groups = 4 * std::max(1u, units);
  const VkDeviceSize bytes = 16 + 4 * 64 + 8 * VkDeviceSize{groups};  // boundary_probe.comp's Sync
  absl::StatusOr<Buffer> sync = dev.CreateBuffer(bytes, false, "boundary probe");
  if (!sync.ok()) return sync.status();
  absl::StatusOr<Buffer> host = dev.CreateBuffer(16, true, "boundary probe readback");
  if (!host.ok()) {
    dev.DestroyBuffer(*sync);
    return host.status();
  }
  std::string line;
  absl::Status s = [&]() -> absl::Status {
    ProbePipeline probe(dev);
    const Buffer* buffers[] = {&*sync};
    if (absl::Status c = probe.Create(kBoundarySpirv, buffers, 3 * sizeof(uint32_t), "of the boundary probe");
        !c.ok()) {
      return c;
    }
    constexpr int kDispatches = 2000;
    const uint32_t empty[] = {0, 0, 0};
    absl::StatusOr<double> t = TimeRuns(
        dev, [&](VkCommandBuffer cb, int n) { probe.Record(cb, empty, groups, 1, n); }, kDispatches);
    if (!t.ok()) return t.status();
    line = absl::StrFormat("dispatch boundary %.2f us (an empty dispatch of %u workgroups and its barrier)",
                           *t / kDispatches * 1e6, groups);
    if (!resident) {
      absl::StrAppend(&line, "; no device-wide barrier probe (",
                      units == 0 ? "the driver does not say how many compute units the device has"
                                 : "a CPU implementation runs its workgroups a few at a time",
                      ")");
      return absl::OkStatus();
    }
    // Seconds of one dispatch of `g` workgroups passing `phases` barriers,
    // the count zeroed first; its errors and timeouts read back.
    uint32_t counts[4] = {};
    auto run = [&](uint32_t g, uint32_t phases, uint32_t two_level) -> absl::StatusOr<double> {
      const uint32_t push[] = {phases, 1u << 20, two_level};  // the spin limit: far above any wait that ends
      const auto start = std::chrono::steady_clock::now();
      absl::Status r = dev.RunOnce([&](VkCommandBuffer cb) {
        const VulkanApi& api = dev.api();
        api.vkCmdFillBuffer(cb, sync->buffer, 0, VK_WHOLE_SIZE, 0);
        VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
        api.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                                 nullptr, 0, nullptr);
        probe.Record(cb, push, g, 1, 1);
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
        api.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                                 nullptr, 0, nullptr);
        const VkBufferCopy region{0, 0, 16};
        api.vkCmdCopyBuffer(cb, sync->buffer, host->buffer, 1, &region);
      });
      if (!r.ok()) return r;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::memcpy(counts, host->mapped, sizeof(counts));
      return seconds;
    };
    constexpr uint32_t kPhases = 4000;
    for (const uint32_t two_level : {0u, 1u}) {
      absl::StrAppend(
          &line, two_level ? "; in two levels (a counter per 32 workgroups) " : "; device-wide barrier in a dispatch ");
      for (const uint32_t g : {units, groups}) {
        if (g > 64 * 32) continue;  // boundary_probe.comp's counters
        // The difference of a long and a short run leaves the submission out.
        absl::StatusOr<double> warm = run(g, kPhases, two_level), shorter = run(g, 1, two_level);
        absl::StatusOr<double> longer = run(g, kPhases, two_level);
        for (const absl::StatusOr<double>* r : {&warm, &shorter, &longer}) {
          if (!r->ok()) return r->status();
        }
        if (g != units) absl::StrAppend(&line, ", ");
        if (counts[2] > 0) {
          absl::StrAppend(&line, "did not complete (", g, " workgroups: not all resident)");
        } else if (counts[1] > 0) {
          absl::StrAppend(&line, "wrong (", counts[1], " stale reads of ", g * kPhases, ", ", g, " workgroups)");
        } else {
          absl::StrAppend(&line,
                          absl::StrFormat("%.2f us (%u workgroups)", (*longer - *shorter) / (kPhases - 1) * 1e6, g));
        }
      }
    }
    return absl::OkStatus();
  }();
  dev.DestroyBuffer(*sync);
  dev.DestroyBuffer(*host);
  if (!s.ok()) return s;
  return line;
}

}  // namespace

absl::StatusOr<Ceilings> ProbeVulkanCeilings(const BackendOptions& options) {
  VulkanDevice dev;
  if (absl::Status s = dev.Open(options.device); !s.ok()) return s;
  // The largest pair of buffers the device gives us, from 1 GiB down (a
  // 16-byte vector count must fit the shader's 32-bit index).
  Buffer a, b;
  VkDeviceSize size = VkDeviceSize{1} << 30;
  for (; size >= (VkDeviceSize{16} << 20); size /= 4) {
    absl::StatusOr<Buffer> x = dev.CreateBuffer(size, false, "probe source");
    if (!x.ok()) continue;
    absl::StatusOr<Buffer> y = dev.CreateBuffer(size, false, "probe destination");
    if (!y.ok()) {
      dev.DestroyBuffer(*x);
      continue;
    }
    a = *x;
    b = *y;
    break;
  }
  if (a.buffer == VK_NULL_HANDLE) return absl::ResourceExhaustedError("vulkan probe: no room for two 16 MiB buffers");
  // A compute-shader copy, as the kernels move memory: vkCmdCopyBuffer may run
  // on a copy engine well below the memory's bandwidth (840 GB/s against 4.2
  // TB/s on an H200 with NVIDIA's driver).
  constexpr int kCopies = 8;
  absl::Status s;
  double seconds = 0;
  {
    ProbePipeline copy(dev);
    const Buffer* buffers[] = {&a, &b};
    s = copy.Create(kCopySpirv, buffers, sizeof(uint32_t), "of the probe");
    const uint32_t vectors[] = {static_cast<uint32_t>(size / 16)};
    // Enough workgroups to fill any GPU; each thread loops over the rest.
    const uint32_t groups = std::clamp<uint32_t>(vectors[0] / kCopyThreads, 1, 8192);
    absl::StatusOr<double> t = absl::InternalError("not run");
    if (s.ok()) t = TimeRuns(dev, [&](VkCommandBuffer cb, int n) { copy.Record(cb, vectors, groups, 1, n); }, kCopies);
    if (s.ok() && !t.ok()) s = t.status();
    if (t.ok()) seconds = *t;
  }
  dev.DestroyBuffer(a);
  dev.DestroyBuffer(b);
  if (!s.ok()) return s;
  Ceilings c;
  c.bytes_per_second = 2.0 * static_cast<double>(size) * kCopies / seconds;
  c.what = absl::StrFormat("%s: compute-shader copy %d MiB x %d, bytes read + written", dev.description(), size >> 20,
                           kCopies);
  absl::StatusOr<std::string> boundaries = ProbeBoundaries(dev);
  if (!boundaries.ok()) return boundaries.status();
  absl::StrAppend(&c.what, "; ", *boundaries);
  if (!dev.has_coopmat2()) {
    absl::StrAppend(&c.what, " (no FLOP probe: it needs workgroup-scope cooperative matrices)");
    return c;
  }
  std::string matmul;
  absl::StatusOr<double> flops = ProbeMatmul(dev, &matmul);
  if (!flops.ok()) return flops.status();
  c.flops_per_second = *flops;
  absl::StrAppend(&c.what, "; ", matmul.empty() ? "no matmul probe variant gave the right result" : matmul);
  return c;
}

}  // namespace kiln::vulkan

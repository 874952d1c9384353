// Read-only bound of the one-token q4_K decode launches (run on the GPU
// machine; scripts/gpu/prepare.sh builds it here into .gpu/bin). For each launch of a
// Llama-3-8B layer it times, from a cold L2, kernels that issue exactly the
// global loads of matmul_kernel's table lane (the same grid, warps, rows per
// warp, K split, lane steps and steps in flight; 16 bytes of nibbles and 8 of
// the scale table per row and lane step) with no arithmetic but an xor, and
// the same bytes read in other orders: each warp's rows whole and in order,
// and the whole buffer linearly. If the kernel's own order reads no faster
// than the real launch runs, the order of its loads, not its arithmetic, is
// the bound. `gemv_read_probe REPS chain`: the four launches of eight layers
// back to back in one CUDA graph, plain and as programmatic dependent
// launches (docs/perf/cuda-h200.md, session 30).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kWarps = 8, kRows = 4, kThreads = 32 * kWarps;

struct Launch {
  const char* name;
  int n, k, parts;  // output rows, K, weights per output (2: gate and up)
};

struct Args {
  const unsigned char* w[2];
  const unsigned char* t[2];
  int n, k, ksplit, row_bytes, table_row_bytes;
  unsigned* out;
};

__device__ __forceinline__ unsigned Xor4(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// matmul_kernel's order (MatmulRows with WalkChunkInt8 over LaneQ4_KTable).
// kPdl: as a programmatic dependent launch, as kiln's kernels are: each lane
// first asks L2 for its rows' first kPrefetch lane steps, then waits for the
// launch before (griddepcontrol.wait); once its loads are done it lets the
// next launch start (launch_dependents).
template <int kParts, int kSteps, int kPrefetch = 0, bool kPdl = false>
__global__ void __launch_bounds__(kThreads, 2) kernel_order(Args a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slice = warp % a.ksplit, groups_per_block = kWarps / a.ksplit;
  const int total_groups = (a.n + kRows - 1) / kRows;
  const int rounds = (total_groups + gridDim.x * groups_per_block - 1) / (gridDim.x * groups_per_block);
  const unsigned stride = a.ksplit * 32 * 32;
  if (kPrefetch > 0) {
    const int first = (blockIdx.x * groups_per_block + warp / a.ksplit) * kRows;
    if (first < a.n) {
#pragma unroll
      for (int s = 0; s < kPrefetch; ++s) {
        const unsigned e = (slice * 32 + lane) * 32 + s * stride;
        if (e >= static_cast<unsigned>(a.k)) break;
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int w = 0; w < kParts; ++w) {
            const long long row = min(first + r, a.n - 1);
            const unsigned char* q = a.w[w] + row * a.row_bytes + (e / 256) * 144 + 16 + 16 * ((e / 32) % 8);
            const unsigned char* t = a.t[w] + row * a.table_row_bytes + (e / 256) * 32 + 8 * ((e / 64) % 4);
            asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(t));
          }
      }
    }
  }
  if (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned acc = 0;
  for (int round = 0; round < rounds; ++round) {
    const int first = ((round * gridDim.x + blockIdx.x) * groups_per_block + warp / a.ksplit) * kRows;
    if (first >= a.n) continue;
    const unsigned char* rows[kRows][kParts];
    const unsigned char* tabs[kRows][kParts];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int w = 0; w < kParts; ++w) {
        const long long row = min(first + r, a.n - 1);
        rows[r][w] = a.w[w] + row * a.row_bytes;
        tabs[r][w] = a.t[w] + row * a.table_row_bytes;
      }
    for (unsigned e0 = (slice * 32 + lane) * 32; e0 < static_cast<unsigned>(a.k); e0 += kSteps * stride) {
      uint4 qs[kSteps][kRows][kParts];
      uint2 am[kSteps][kRows][kParts];
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const unsigned e = e0 + s * stride;
        if (s > 0 && e >= static_cast<unsigned>(a.k)) break;
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int w = 0; w < kParts; ++w) {
            qs[s][r][w] =
                __ldg(reinterpret_cast<const uint4*>(rows[r][w] + (e / 256) * 144 + 16 + 16 * ((e / 32) % 8)));
            am[s][r][w] = __ldg(reinterpret_cast<const uint2*>(tabs[r][w] + (e / 256) * 32 + 8 * ((e / 64) % 4)));
          }
      }
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        if (s > 0 && e0 + s * stride >= static_cast<unsigned>(a.k)) break;
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int w = 0; w < kParts; ++w) acc ^= Xor4(qs[s][r][w]) ^ am[s][r][w].x ^ am[s][r][w].y;
      }
    }
  }
  if (kPdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (acc == 0x9E3779B9u) a.out[blockIdx.x * kThreads + threadIdx.x] = acc;
}

// The same rows (same grid and rounds), each warp reading its rows whole:
// lanes side by side over each row's bytes and then its table row, all of
// the warp's rows a step.
template <int kParts>
__global__ void __launch_bounds__(kThreads, 2) kernel_rows(Args a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slice = warp % a.ksplit, groups_per_block = kWarps / a.ksplit;
  const int total_groups = (a.n + kRows - 1) / kRows;
  const int rounds = (total_groups + gridDim.x * groups_per_block - 1) / (gridDim.x * groups_per_block);
  unsigned acc = 0;
  const int row16 = a.row_bytes / 16, tab16 = a.table_row_bytes / 16, all16 = row16 + tab16;
  for (int round = 0; round < rounds; ++round) {
    const int first = ((round * gridDim.x + blockIdx.x) * groups_per_block + warp / a.ksplit) * kRows;
    if (first >= a.n) continue;
    // The slice's share of each row: a contiguous run of 16-byte words.
    const int per = (all16 + a.ksplit - 1) / a.ksplit, from = slice * per, to = min(all16, from + per);
    for (int j = from + lane; j < to; j += 32) {
      uint4 v[kRows][kParts];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int w = 0; w < kParts; ++w) {
          const long long row = min(first + r, a.n - 1);
          v[r][w] = j < row16 ? __ldg(reinterpret_cast<const uint4*>(a.w[w] + row * a.row_bytes) + j)
                              : __ldg(reinterpret_cast<const uint4*>(a.t[w] + row * a.table_row_bytes) + (j - row16));
        }
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int w = 0; w < kParts; ++w) acc ^= Xor4(v[r][w]);
    }
  }
  if (acc == 0x9E3779B9u) a.out[blockIdx.x * kThreads + threadIdx.x] = acc;
}

// Every byte of the weights and tables once, in address order, four 16-byte
// loads in flight per thread.
__global__ void __launch_bounds__(kThreads) kernel_linear(const uint4* p, long long n16, unsigned* out) {
  unsigned acc = 0;
  const long long step = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = blockIdx.x * kThreads + threadIdx.x; i < n16; i += 4 * step) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = i + j * step < n16 ? __ldg(p + i + j * step) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc ^= Xor4(v[j]);
  }
  if (acc == 0x9E3779B9u) out[blockIdx.x * kThreads + threadIdx.x] = acc;
}

// Evicts the weights from L2 by reading another buffer (reading: written
// lines would be written back to DRAM during the timed kernel).
__global__ void flush_kernel(const uint4* p, long long n16, unsigned* out) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n16;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    acc ^= Xor4(__ldcg(p + i));
  if (acc == 0x9E3779B9u) out[threadIdx.x] = acc;
}

#define CHECK(x)                                                    \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

// The four q4_K launches of a Llama-3-8B layer.
constexpr Launch kLaunches[] = {
    {"qkv", 6144, 4096, 1}, {"o", 4096, 4096, 1}, {"gate/up", 14336, 4096, 2}, {"down", 4096, 14336, 1}};

// Bytes of launch l's weights and scale tables (what buf must hold).
long long BytesOf(const Launch& l) { return static_cast<long long>(l.parts) * l.n * (l.k / 256) * (144 + 32); }

// Launch l over weights and tables at buf (weights first, then tables), with
// the host's geometry (MatmulKSplit, one wave of at most two blocks an SM):
// its arguments, and its grid in *blocks.
Args ArgsFor(const Launch& l, unsigned char* buf, int sms, unsigned* out, int* blocks) {
  Args a{};
  a.n = l.n, a.k = l.k, a.row_bytes = l.k / 256 * 144, a.table_row_bytes = l.k / 256 * 32, a.out = out;
  const long long part_bytes = static_cast<long long>(l.n) * a.row_bytes;
  const long long part_tables = static_cast<long long>(l.n) * a.table_row_bytes;
  for (int w = 0; w < l.parts; ++w) {
    a.w[w] = buf + w * part_bytes;
    a.t[w] = buf + l.parts * part_bytes + w * part_tables;
  }
  const int row_blocks = (l.n + kRows * kWarps - 1) / (kRows * kWarps);
  a.ksplit = row_blocks <= sms ? 2 : 1;
  *blocks = std::min(row_blocks * a.ksplit, 2 * sms);
  return a;
}

// A chain of the four launches over kLayers layers of distinct weights (as
// a decode step streams them), captured in one CUDA graph and replayed:
// plain launches against programmatic dependent launches with 0, 1 or 2
// lane steps prefetched before the wait. Per layer, the median of the replays.
constexpr int kLayers = 8;

template <int kPrefetch>
cudaError_t LaunchOrder(const Args& a, int blocks, int parts, bool pdl, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  if (!pdl) {
    if (parts == 2) return cudaLaunchKernelEx(&cfg, kernel_order<2, 1>, a);
    return cudaLaunchKernelEx(&cfg, kernel_order<1, 2>, a);
  }
  if (parts == 2) return cudaLaunchKernelEx(&cfg, kernel_order<2, 1, kPrefetch, true>, a);
  return cudaLaunchKernelEx(&cfg, kernel_order<1, 2, kPrefetch, true>, a);
}

int RunChain(int reps) {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::vector<Args> args;
  std::vector<int> grids, parts;
  unsigned* out;
  CHECK(cudaMalloc(&out, 1 << 24));
  double layer_bytes = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (const Launch& L : kLaunches) {
      unsigned char* buf;
      CHECK(cudaMalloc(&buf, BytesOf(L)));
      CHECK(cudaMemset(buf, 0x5A, BytesOf(L)));
      if (l == 0) layer_bytes += BytesOf(L);
      int blocks;
      args.push_back(ArgsFor(L, buf, sms, out, &blocks));
      grids.push_back(blocks);
      parts.push_back(L.parts);
    }
  }
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const char* names[] = {"plain", "PDL, no prefetch", "PDL, 1 step to L2", "PDL, 2 steps to L2"};
  for (int v = 0; v < 4; ++v) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (size_t i = 0; i < args.size(); ++i) {
      cudaError_t e = v == 0   ? LaunchOrder<0>(args[i], grids[i], parts[i], false, s)
                      : v == 1 ? LaunchOrder<0>(args[i], grids[i], parts[i], true, s)
                      : v == 2 ? LaunchOrder<1>(args[i], grids[i], parts[i], true, s)
                               : LaunchOrder<2>(args[i], grids[i], parts[i], true, s);
      CHECK(e);
    }
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<float> ms;
    for (int rep = 0; rep < reps + 2; ++rep) {
      CHECK(cudaEventRecord(start, s));
      CHECK(cudaGraphLaunch(ge, s));
      CHECK(cudaEventRecord(stop, s));
      CHECK(cudaEventSynchronize(stop));
      float t;
      CHECK(cudaEventElapsedTime(&t, start, stop));
      if (rep >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double per_layer = ms[ms.size() / 2] * 1e-3 / kLayers;
    std::printf("chain %-20s %7.2f us a layer (min %7.2f)  %6.0f GB/s\n", names[v], per_layer * 1e6,
                ms[0] * 1e3 / kLayers, layer_bytes / per_layer / 1e9);
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  if (argc > 2 && std::string(argv[2]) == "chain") return RunChain(reps);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
  // One buffer for the largest launch's weights and tables, another to flush L2.
  long long max_bytes = 0;
  for (const Launch& l : kLaunches) max_bytes = std::max(max_bytes, BytesOf(l));
  unsigned char* buf;
  uint4* flush;
  unsigned* out;
  const long long flush16 = (512LL << 20) / 16;
  CHECK(cudaMalloc(&buf, max_bytes));
  CHECK(cudaMalloc(&flush, flush16 * 16));
  CHECK(cudaMalloc(&out, 1 << 24));
  CHECK(cudaMemset(buf, 0x5A, max_bytes));
  CHECK(cudaMemset(flush, 0x3C, flush16 * 16));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));

  for (const Launch& l : kLaunches) {
    int blocks;
    const Args a = ArgsFor(l, buf, sms, out, &blocks);
    const double bytes = static_cast<double>(BytesOf(l));
    // The row-order variants (one weight a row, or gate and up), then linear.
    // "kernel order" is matmul_kernel's: two steps in flight for one weight
    // a row, one for two.
    using Kernel = void (*)(Args);
    const bool two = l.parts == 2;
    const Kernel kernels[] = {two ? kernel_order<2, 1> : kernel_order<1, 2>,
                              two ? kernel_order<2, 1> : kernel_order<1, 1>,
                              two ? kernel_order<2, 2> : kernel_order<1, 2>, two ? kernel_rows<2> : kernel_rows<1>};
    const char* names[] = {"kernel order", "kernel order, 1 step", "kernel order, 2 steps", "rows whole", "linear"};
    for (int v = 0; v < 5; ++v) {
      const int grid = v < 4 ? blocks : 8 * sms;
      std::vector<float> ms;
      for (int rep = 0; rep < reps; ++rep) {
        flush_kernel<<<4 * sms, 256>>>(flush, flush16, out);
        CHECK(cudaEventRecord(start));
        if (v < 4) {
          kernels[v]<<<grid, kThreads>>>(a);
        } else {
          kernel_linear<<<grid, kThreads>>>(reinterpret_cast<const uint4*>(buf), static_cast<long long>(bytes) / 16,
                                            out);
        }
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float t;
        CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
      }
      CHECK(cudaGetLastError());
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2] * 1e-3;
      std::printf("%-8s %-22s grid %4d ksplit %d  %6.2f MB  median %7.2f us (min %7.2f)  %6.0f GB/s\n", l.name,
                  names[v], grid, a.ksplit, bytes / 1e6, med * 1e6, ms[0] * 1e3, bytes / med / 1e9);
    }
  }
  return 0;
}

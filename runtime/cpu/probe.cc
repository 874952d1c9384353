#include "runtime/cpu/probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "runtime/cpu/peak.h"

namespace kiln::cpu {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Operations a second with every thread of the pool running `loop` (ops
// done in n iterations) at once: chunks of the loop handed out until all
// are done, the median of three timed rounds after a warm-up.
double PeakRate(ThreadPool& pool, const std::function<double(int64_t)>& loop) {
  constexpr int64_t kIterations = int64_t{1} << 20;  // a few ms a chunk
  const int64_t chunks = 8 * pool.num_threads();
  std::vector<double> rates;
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<double> ops(static_cast<size_t>(chunks));
    const auto start = std::chrono::steady_clock::now();
    pool.ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ops[i] = loop(kIterations);
    });
    const double seconds = Seconds(start);
    double total = 0;
    for (double o : ops) total += o;
    if (rep > 0) rates.push_back(total / seconds);
  }
  return Median(rates);
}

}  // namespace

absl::StatusOr<CpuCeilings> ProbeCpuCeilings(ThreadPool& pool) {
  CpuCeilings c;
  // 256 MiB, well past any cache; random contents (never time zeros).
  const int64_t n = int64_t{64} << 20;
  std::vector<float> src(n), dst(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& x : src) x = dist(rng);
  const int64_t chunk = int64_t{1} << 20;
  std::vector<double> copy_s;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    pool.ParallelFor(n / chunk, 1, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b * chunk, src.data() + b * chunk, sizeof(float) * (e - b) * chunk);
    });
    if (rep > 0) copy_s.push_back(Seconds(start));  // the first touches fresh pages
  }
  c.bytes_per_second = 2.0 * sizeof(float) * n / Median(copy_s);

  c.f32_flops_per_second = PeakRate(pool, [](int64_t n) { return RunF32Peak(n); });
  c.int8_kernel = BestQ8Kernel();
  c.int8_ops_per_second = PeakRate(pool, [&](int64_t n) { return RunInt8Peak(c.int8_kernel, n); });
  return c;
}

}  // namespace kiln::cpu

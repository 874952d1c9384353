#include "runtime/cpu/probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/matmul.h"

namespace kiln::cpu {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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

  const int64_t tokens = 128, k = 2048, rows = 2048;
  std::vector<float> x(tokens * k), w(rows * k), y(tokens * rows);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  const WeightMatrix m{WeightStorage::Ggml(GgmlType::kF32), reinterpret_cast<const uint8_t*>(w.data()), rows, k};
  std::vector<double> mm_s;
  for (int rep = 0; rep < 4; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = Matmul(x.data(), tokens, m, y.data(), pool); !s.ok()) return s;
    if (rep > 0) mm_s.push_back(Seconds(start));
  }
  c.flops_per_second = 2.0 * tokens * k * rows / Median(mm_s);
  return c;
}

}  // namespace kiln::cpu

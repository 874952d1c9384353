#include "runtime/cpu/probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/cpu/cpu_isa.h"
#include "runtime/cpu/peak.h"

namespace kiln::cpu {
namespace {

volatile uint64_t g_read_sink;

// Reads `bytes` (a multiple of 128) at p and folds them into one word, so
// that the loads stay: the pattern of a decode step, which streams its
// weights and writes next to nothing.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void ReadStreamAvx2(const uint8_t* p, size_t bytes) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < bytes; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  g_read_sink = static_cast<uint64_t>(_mm256_extract_epi64(s, 0) ^ _mm256_extract_epi64(s, 3));
}
#endif

void ReadStream(const uint8_t* p, size_t bytes) {
#if defined(__x86_64__)
  if (DetectCpuIsa() == CpuIsa::kAvx2) return ReadStreamAvx2(p, bytes);
#endif
  uint64_t s[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < bytes; i += 32) {
    for (int j = 0; j < 4; ++j) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * j, 8);
      s[j] ^= w;
    }
  }
  g_read_sink = s[0] ^ s[1] ^ s[2] ^ s[3];
}

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
  // 512 MiB, well past any cache, read by every thread at once in 1 MiB
  // chunks; random contents (never time zeros). A read, not a copy: a
  // copy's figure (bytes read plus written) came out at 19.5 GB/s on one
  // Zen 4 core that decodes at 28 GB/s of weights, above its "limit".
  const size_t bytes = size_t{512} << 20, chunk = size_t{1} << 20;
  std::unique_ptr<uint8_t, void (*)(void*)> buffer(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)), std::free);
  if (buffer == nullptr) return absl::ResourceExhaustedError("CPU probe: no memory for its 512 MiB buffer");
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t w = rng();
    std::memcpy(buffer.get() + i, &w, 8);
  }
  std::vector<double> read_s;
  for (int rep = 0; rep < 6; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    pool.ParallelFor(static_cast<int64_t>(bytes / chunk), 1,
                     [&](int64_t b, int64_t e) { ReadStream(buffer.get() + b * chunk, (e - b) * chunk); });
    if (rep > 0) read_s.push_back(Seconds(start));
  }
  c.bytes_per_second = static_cast<double>(bytes) / Median(read_s);

  c.f32_flops_per_second = PeakRate(pool, [](int64_t n) { return RunF32Peak(n); });
  c.int8_kernel = BestQ8Kernel();
  c.int8_ops_per_second = PeakRate(pool, [&](int64_t n) { return RunInt8Peak(c.int8_kernel, n); });
  return c;
}

}  // namespace kiln::cpu

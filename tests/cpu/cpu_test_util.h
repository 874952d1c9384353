// Helpers shared by the tests/cpu binaries (header-only: each *_test.cc is
// its own binary).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace kiln::cpu::testing {

// Standard normal samples from a fixed seed (Box-Muller over mt19937, whose
// output the standard fixes, unlike std::normal_distribution's).
inline std::vector<float> Gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  auto uniform = [&rng] { return (static_cast<double>(rng()) + 0.5) / 4294967296.0; };
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double u1 = uniform(), u2 = uniform();
    out[i] = scale *
             static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return out;
}

// ||got - want|| / ||want|| (want in double).
inline double RelL2(const std::vector<double>& want, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = want[i] - got[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double RelL2(const std::vector<float>& want, const std::vector<float>& got) {
  return RelL2(std::vector<double>(want.begin(), want.end()), got);
}

// Bitwise equality (so that -0 != +0 and NaN == the same NaN).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace kiln::cpu::testing

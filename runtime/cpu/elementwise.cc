#include "runtime/cpu/elementwise.h"

#include <cmath>

namespace kiln::cpu {
namespace {

// For large finite negative x, exp(-x) overflows to inf and the result is
// -0, the correct limit; -inf gives NaN, as in ggml.
float SiluOf(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void Silu(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = SiluOf(x[i]);
}

void Mul(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void Add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void SiluMul(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = SiluOf(gate[i]) * up[i];
}

void BiasAdd(const float* x, int64_t tokens, int64_t width, const float* bias, float* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < width; ++i) y[t * width + i] = x[t * width + i] + bias[i];
  }
}

}  // namespace kiln::cpu

// Elementwise ops over f32 activations. Every output may alias an input.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// y = x * sigmoid(x) = x / (1 + exp(-x)).
void Silu(const float* x, int64_t n, float* y);

// y = a * b.
void Mul(const float* a, const float* b, int64_t n, float* y);

// y = a + b.
void Add(const float* a, const float* b, int64_t n, float* y);

// y = silu(gate) * up: the SwiGLU of a Llama FFN.
void SiluMul(const float* gate, const float* up, int64_t n, float* y);

// y[t, i] = x[t, i] + bias[i] for `tokens` rows of `width`.
void BiasAdd(const float* x, int64_t tokens, int64_t width, const float* bias, float* y);

}  // namespace kiln::cpu

// Rotary position embedding, in place, over every head of every token.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace kiln::cpu {

enum class RopeStyle {
  // Pairs (2i, 2i + 1): GGUF llama files (llama.cpp's normal mode).
  kInterleaved,
  // Pairs (i, i + dims / 2): HF checkpoints, qwen2 (llama.cpp's NeoX mode).
  kHalf,
};

struct RopeParams {
  double theta = 10000.0;  // frequency base
  int64_t dims = 0;        // rotated dimensions at the start of each head (even)
  RopeStyle style = RopeStyle::kInterleaved;
  double linear_factor = 1.0;  // "linear" scaling: positions are divided by it (1: none)
};

// For each token t and head h of x ([tokens, num_heads * head_dim]), rotates
// pair i < dims / 2 of the head's first `dims` elements by the angle
//   (positions[t] / linear_factor) * theta^(-2i / dims)
// (a' = a cos - b sin, b' = a sin + b cos). Angles, cosines and sines are
// computed in double, the rotation in f32; elements past `dims` are left as
// they are. Errors: dims odd, not positive or above head_dim; theta or
// linear_factor not positive.
absl::Status Rope(float* x, int64_t tokens, int64_t num_heads, int64_t head_dim,
                  const int32_t* positions, const RopeParams& params);

// The cosines and sines Rope uses, for positions 0..positions-1:
// [position][pair][cos, sin] (GPU backends look them up instead of
// evaluating double-precision transcendentals per element).
std::vector<float> RopeTable(const RopeParams& params, int64_t positions);

}  // namespace kiln::cpu

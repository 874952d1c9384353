#include "runtime/cpu/rope.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"

namespace kiln::cpu {

namespace {

std::vector<double> Frequencies(const RopeParams& params) {
  std::vector<double> freq(static_cast<size_t>(params.dims / 2));
  for (size_t i = 0; i < freq.size(); ++i) {
    freq[i] = std::pow(params.theta, -2.0 * static_cast<double>(i) / static_cast<double>(params.dims));
  }
  return freq;
}

void CosSin(int64_t position, const RopeParams& params, double freq, float* c, float* s) {
  const double angle = (static_cast<double>(position) / params.linear_factor) * freq;
  *c = static_cast<float>(std::cos(angle));
  *s = static_cast<float>(std::sin(angle));
}

}  // namespace

absl::Status Rope(float* x, int64_t tokens, int64_t num_heads, int64_t head_dim,
                  const int32_t* positions, const RopeParams& params) {
  const int64_t dims = params.dims;
  if (dims <= 0 || dims % 2 != 0 || dims > head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Rope: rotated dims must be even and in 1..head_dim (%d), got %d", head_dim, dims));
  }
  if (!(params.theta > 0) || !(params.linear_factor > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Rope: theta (%g) and linear factor (%g) must be positive", params.theta,
                        params.linear_factor));
  }
  const int64_t pairs = dims / 2;
  // Per-pair frequencies once; per token, cos and sin once for all heads.
  const std::vector<double> freq = Frequencies(params);
  std::vector<float> cos_t(static_cast<size_t>(pairs)), sin_t(static_cast<size_t>(pairs));
  // Index of the second element of pair i: next to it, or half the dims away.
  const int64_t step = params.style == RopeStyle::kInterleaved ? 1 : pairs;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < pairs; ++i) CosSin(positions[t], params, freq[i], &cos_t[i], &sin_t[i]);
    for (int64_t h = 0; h < num_heads; ++h) {
      float* head = x + (t * num_heads + h) * head_dim;
      for (int64_t i = 0; i < pairs; ++i) {
        const int64_t a = params.style == RopeStyle::kInterleaved ? 2 * i : i;
        const float x0 = head[a], x1 = head[a + step];
        head[a] = x0 * cos_t[i] - x1 * sin_t[i];
        head[a + step] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
  return absl::OkStatus();
}

std::vector<float> RopeTable(const RopeParams& params, int64_t positions) {
  const std::vector<double> freq = Frequencies(params);
  const size_t pairs = freq.size();
  std::vector<float> table(static_cast<size_t>(positions) * pairs * 2);
  for (int64_t pos = 0; pos < positions; ++pos) {
    for (size_t i = 0; i < pairs; ++i) {
      float* at = &table[(static_cast<size_t>(pos) * pairs + i) * 2];
      CosSin(pos, params, freq[i], at, at + 1);
    }
  }
  return table;
}

}  // namespace kiln::cpu

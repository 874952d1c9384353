// RMS normalisation of each row of an activation.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// y[t, i] = x[t, i] / sqrt(mean_i(x[t, i]^2) + eps) * gamma[i] for each of
// `tokens` rows of `width`. The mean of squares is summed in double (as
// ggml does). y may alias x.
void RmsNorm(const float* x, int64_t tokens, int64_t width, const float* gamma, double eps,
             float* y);

}  // namespace kiln::cpu

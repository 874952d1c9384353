#include "runtime/cpu/norm.h"

#include <cmath>

namespace kiln::cpu {

void RmsNorm(const float* x, int64_t tokens, int64_t width, const float* gamma, double eps,
             float* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * width;
    float* yt = y + t * width;
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(xt[i]) * xt[i];
    const auto scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(width) + eps));
    for (int64_t i = 0; i < width; ++i) yt[i] = xt[i] * scale * gamma[i];
  }
}

}  // namespace kiln::cpu

// RMSNorm (portable; the cost is negligible next to the matmuls around it).
#include "ops/rms_norm.h"

#include <cmath>

namespace gb::ops {

void rms_norm(const float* x, const float* w, int64_t n, int64_t width, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * width;
    float* yr = out + t * width;
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(width)) + eps);
    for (int64_t i = 0; i < width; ++i) yr[i] = (xr[i] * scale) * w[i];
  }
}

void rms_norm_ref(const float* x, const float* w, int64_t n, int64_t width, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(x[t * width + i]) * x[t * width + i];
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(width) + eps);
    for (int64_t i = 0; i < width; ++i) out[t * width + i] = static_cast<float>(x[t * width + i] * scale * w[i]);
  }
}

}  // namespace gb::ops

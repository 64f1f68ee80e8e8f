// RMSNorm (portable; the cost is negligible next to the matmuls around it).
#include "ops/rms_norm.h"

#include <cmath>

namespace gb::ops {

namespace {

// The sum of x[i]² (each square rounded to float, then widened), element i added into
// accumulator i mod 8 in index order, the accumulators summed pairwise: a fixed order, so the
// result depends on the row alone. Eight independent add chains instead of one: a decode step
// normalises ~5k elements per layer (the layer's two norms and Qwen3's per-head q/k norms) on
// its serial path, and one chain of dependent double adds cost ~1 µs per 1024. (Scalar
// accumulators: the compiler keeps them in registers, where a double vector type was spilled.)
double sum_squares(const float* x, int64_t width) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  auto add8 = [&](const float* p) {
    s0 += static_cast<double>(p[0] * p[0]);
    s1 += static_cast<double>(p[1] * p[1]);
    s2 += static_cast<double>(p[2] * p[2]);
    s3 += static_cast<double>(p[3] * p[3]);
    s4 += static_cast<double>(p[4] * p[4]);
    s5 += static_cast<double>(p[5] * p[5]);
    s6 += static_cast<double>(p[6] * p[6]);
    s7 += static_cast<double>(p[7] * p[7]);
  };
  int64_t i = 0;
  for (; i + 8 <= width; i += 8) add8(x + i);
  if (i < width) {  // the tail padded with zeros: adding +0 to a sum of squares changes no bit
    float tail[8] = {};
    for (int64_t j = 0; i + j < width; ++j) tail[j] = x[i + j];
    add8(tail);
  }
  return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n, int64_t width, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * width;
    float* yr = out + t * width;
    const double sum = sum_squares(xr, width);
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

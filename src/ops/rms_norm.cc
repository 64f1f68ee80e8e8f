// RMSNorm (portable; the cost is negligible next to the matmuls around it).
#include "ops/rms_norm.h"

#include <cmath>

namespace gb::ops {

namespace {

// Eight lanes of floats and of doubles: the baseline (SSE2) lowers each to two or four
// registers, so the sum of squares runs as four independent add chains instead of one: a
// decode step normalises ~5k elements per layer (the layer's two norms and Qwen3's per-head q/k
// norms) on the step's serial path, and one chain of dependent double adds cost ~1 µs per 1024.
typedef float F8 __attribute__((vector_size(32)));
typedef double D8 __attribute__((vector_size(64)));

// The sum of x[i]² (each square rounded to float, then widened), element i added into lane
// i mod 8 in index order, the lanes summed pairwise: a fixed order, so the result depends on the
// row alone. The tail's missing elements are zeros (adding +0 to a sum of squares changes no bit).
double sum_squares(const float* x, int64_t width) {
  D8 acc = {};
  int64_t i = 0;
  F8 v;
  for (; i + 8 <= width; i += 8) {
    __builtin_memcpy(&v, x + i, sizeof v);
    acc += __builtin_convertvector(v * v, D8);
  }
  if (i < width) {
    float lane[8] = {};
    for (int64_t j = 0; i + j < width; ++j) lane[j] = x[i + j];
    __builtin_memcpy(&v, lane, sizeof v);
    acc += __builtin_convertvector(v * v, D8);
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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

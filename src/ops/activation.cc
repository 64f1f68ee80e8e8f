// Elementwise ops (portable; memory-bound and tiny next to the matmuls).
#include "ops/activation.h"

#include <cmath>

namespace gb::ops {

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void silu_mul_ref(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void add_bias(float* x, const float* b, int64_t n_rows, int64_t width) {
  for (int64_t t = 0; t < n_rows; ++t) {
    for (int64_t i = 0; i < width; ++i) x[t * width + i] += b[i];
  }
}

}  // namespace gb::ops

// Rotary position embedding (portable).
#include "ops/rope.h"

#include <cmath>

namespace gb::ops {

void rope_tables(const int32_t* positions, int64_t n, const double* inv_freq, int64_t half, float* cos_out,
                 float* sin_out) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[t]) * inv_freq[i];
      cos_out[t * half + i] = static_cast<float>(std::cos(angle));
      sin_out[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope(float* x, int64_t n, int64_t stride, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
          const float* sin, RopeStyle style) {
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * stride + h * head_dim;
      if (style == RopeStyle::kNeox) {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = a * s[i] + b * c[i];
        }
      }
    }
  }
}

void rope_ref(float* x, const int32_t* positions, int64_t n, int64_t stride, int64_t n_heads, int64_t head_dim,
              int64_t n_rot, const double* inv_freq, RopeStyle style) {
  const int64_t half = n_rot / 2;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = positions[t] * inv_freq[i];
        const int64_t ia = style == RopeStyle::kNeox ? i : 2 * i;
        const int64_t ib = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
        const double a = v[ia], b = v[ib];
        v[ia] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
        v[ib] = static_cast<float>(a * std::sin(angle) + b * std::cos(angle));
      }
    }
  }
}

}  // namespace gb::ops

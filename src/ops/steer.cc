// Intervention row kernels and row statistics.
#include "ops/steer.h"

#include <algorithm>
#include <cmath>

namespace gb::ops {

namespace {

// Applies f to the selected elements of every row.
template <class F>
void for_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, F f) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * width;
    if (dims == nullptr) {
      for (int64_t i = 0; i < width; ++i) row[i] = f(row[i]);
    } else {
      for (int64_t j = 0; j < n_dims; ++j) row[dims[j]] = f(row[dims[j]]);
    }
  }
}

// Median of scratch[0..width) (reordered), as in observers' token_stats.
float median_of(float* scratch, int64_t width) {
  const int64_t mid = width / 2;
  std::nth_element(scratch, scratch + mid, scratch + width);
  const float upper = scratch[mid];
  if (width % 2 == 1) return upper;
  const float lower = *std::max_element(scratch, scratch + mid);
  return static_cast<float>((static_cast<double>(lower) + upper) / 2);
}

}  // namespace

void scale_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float s) {
  const float m = 1.0f + s;
  for_dims(x, n_rows, width, dims, n_dims, [m](float v) { return v * m; });
}

void add_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float s) {
  for_dims(x, n_rows, width, dims, n_dims, [s](float v) { return v + s; });
}

void set_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float s) {
  for_dims(x, n_rows, width, dims, n_dims, [s](float) { return s; });
}

void clamp_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float c) {
  // std::clamp keeps x itself (bitwise) when it is inside [-c, c], also for c = ∞.
  for_dims(x, n_rows, width, dims, n_dims, [c](float v) { return std::clamp(v, -c, c); });
}

void add_vector(float* x, int64_t n_rows, int64_t width, const float* v, float s) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * width;
    for (int64_t i = 0; i < width; ++i) row[i] += s * v[i];
  }
}

void ablate_direction(float* x, int64_t n_rows, int64_t width, const float* u, float s) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * width;
    double dot = 0;
    for (int64_t i = 0; i < width; ++i) dot += static_cast<double>(row[i]) * u[i];
    const float c = static_cast<float>(s * dot);
    for (int64_t i = 0; i < width; ++i) row[i] -= c * u[i];
  }
}

int64_t clip_massive(float* x, int64_t n_rows, int64_t width, float t, float factor, const float* mean, float* scratch) {
  int64_t changed = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * width;
    for (int64_t i = 0; i < width; ++i) scratch[i] = std::fabs(row[i]);
    const float limit = t * median_of(scratch, width);
    for (int64_t i = 0; i < width; ++i) {
      if (std::fabs(row[i]) > limit) {
        row[i] = mean != nullptr ? mean[i] : row[i] * factor;
        ++changed;
      }
    }
  }
  return changed;
}

RowStats row_max_median(const float* x, int64_t width, float* scratch) {
  RowStats s;
  for (int64_t i = 0; i < width; ++i) {
    const float a = std::fabs(x[i]);
    if (a > s.max_abs) {
      s.max_abs = a;
      s.max_dim = static_cast<int32_t>(i);
    }
    scratch[i] = a;
  }
  s.median_abs = median_of(scratch, width);
  return s;
}

RowStats row_stats(const float* x, int64_t width, float* scratch) {
  RowStats s;
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < width; ++i) {
    const float a = std::fabs(x[i]);
    if (a > s.max_abs) {
      s.max_abs = a;
      s.max_dim = static_cast<int32_t>(i);
    }
    sum += x[i];
    sum_sq += static_cast<double>(x[i]) * x[i];
    scratch[i] = a;
  }
  s.sum = sum;
  s.sum_sq = sum_sq;
  s.median_abs = median_of(scratch, width);
  return s;
}

int32_t row_top_k(const float* x, int64_t width, int32_t k, int32_t* dims, float* values) {
  k = static_cast<int32_t>(std::min<int64_t>(std::min(k, 32), width));
  int32_t n = 0;
  // Insertion into a short sorted list: one pass over the row, no sort of it.
  for (int64_t i = 0; i < width && k > 0; ++i) {
    const float a = std::fabs(x[i]);
    if (n == k && a <= values[n - 1]) continue;
    int32_t p = n < k ? n++ : n - 1;
    while (p > 0 && values[p - 1] < a) {
      values[p] = values[p - 1];
      dims[p] = dims[p - 1];
      --p;
    }
    values[p] = a;
    dims[p] = static_cast<int32_t>(i);
  }
  return n;
}

}  // namespace gb::ops

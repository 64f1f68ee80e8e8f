// Intervention row kernels and row statistics.
#include "ops/steer.h"

#include <algorithm>
#include <bit>
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

// The k-th smallest (0-based) of n non-negative floats given as their bit patterns (which order
// like the floats): radix select, 8 bits per pass from the top, compacting the candidates that
// share the chosen digit to the front of keys (reordered). Exact, and without the branch
// mispredictions of a comparison-based nth_element.
uint32_t select_kth(uint32_t* keys, int64_t n, int64_t k) {
  for (int shift = 24; shift >= 0 && n > 1; shift -= 8) {
    // Four interleaved histograms: the values of a row share a few exponents, so one histogram
    // would increment the same counter back to back, each waiting on the last (store forwarding).
    int32_t hist[4][256] = {};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      ++hist[0][(keys[i] >> shift) & 0xff];
      ++hist[1][(keys[i + 1] >> shift) & 0xff];
      ++hist[2][(keys[i + 2] >> shift) & 0xff];
      ++hist[3][(keys[i + 3] >> shift) & 0xff];
    }
    for (; i < n; ++i) ++hist[0][(keys[i] >> shift) & 0xff];
    int64_t count[256];
    for (int b = 0; b < 256; ++b) count[b] = int64_t{hist[0][b]} + hist[1][b] + hist[2][b] + hist[3][b];
    int d = 0;
    while (k >= count[d]) k -= count[d++];
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t key = keys[i];
      keys[m] = key;
      m += ((key >> shift) & 0xff) == static_cast<uint32_t>(d);
    }
    n = m;
  }
  return keys[k < n ? k : 0];
}

// The median of |x| over x[n] once its upper middle (the (n/2)-th smallest |x|, 0-based, as bits)
// is known: itself for an odd n, else its mean with the largest |x| below it — or with itself
// when it repeats there.
float median_from_upper(const float* x, int64_t n, uint32_t upper) {
  if (n % 2 == 1) return std::bit_cast<float>(upper);
  int64_t below = 0;
  uint32_t lower = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    if (key < upper) {
      ++below;
      lower = std::max(lower, key);
    }
  }
  if (below < n / 2) lower = upper;
  return static_cast<float>((static_cast<double>(std::bit_cast<float>(lower)) + std::bit_cast<float>(upper)) / 2);
}

// Median of |x| over x[width] (mean of the two middle values for an even width), exactly what
// sorting would give. scratch: [width] f32 workspace.
float median_abs_of(const float* x, int64_t width, float* scratch) {
  uint32_t* keys = reinterpret_cast<uint32_t*>(scratch);
  for (int64_t i = 0; i < width; ++i) keys[i] = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
  return median_from_upper(x, width, select_kth(keys, width, width / 2));
}

// The k-th smallest (0-based) |x_i| of x[n] as its bit pattern, without a workspace: radix
// select, 8 bits per pass from the top, each pass reading all of x and counting only the values
// whose higher digits are the ones chosen so far.
uint32_t select_kth_abs(const float* x, int64_t n, int64_t k) {
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    int64_t count[256] = {};
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t key = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
      if ((key & mask) == prefix) ++count[(key >> shift) & 0xff];
    }
    int d = 0;
    while (k >= count[d]) k -= count[d++];
    prefix |= static_cast<uint32_t>(d) << shift;
    mask |= 0xffu << shift;
  }
  return prefix;
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

int64_t clip_massive(float* x, int64_t n_rows, int64_t width, float t, float factor, const float* mean,
                     float* scratch) {
  int64_t changed = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * width;
    const float limit = t * median_abs_of(row, width, scratch);
    for (int64_t i = 0; i < width; ++i) {
      if (std::fabs(row[i]) > limit) {
        row[i] = mean != nullptr ? mean[i] : row[i] * factor;
        ++changed;
      }
    }
  }
  return changed;
}

float median_abs(const float* x, int64_t n) {
  if (n <= 0) return 0.0f;
  return median_from_upper(x, n, select_kth_abs(x, n, n / 2));
}

RowStats row_max_median(const float* x, int64_t width, float* scratch) {
  RowStats s;
  for (int64_t i = 0; i < width; ++i) {
    const float a = std::fabs(x[i]);
    if (a > s.max_abs) {
      s.max_abs = a;
      s.max_dim = static_cast<int32_t>(i);
    }
  }
  s.median_abs = median_abs_of(x, width, scratch);
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
  }
  s.sum = sum;
  s.sum_sq = sum_sq;
  s.median_abs = median_abs_of(x, width, scratch);
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

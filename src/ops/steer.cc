// Intervention row kernels and row statistics.
#include "ops/steer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

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

// |x| as its bit pattern, a non-negative int32 that orders like |x| (NaN above +inf).
// GCC vectors of 4 lanes (SSE2 on baseline x86-64, NEON on ARM); passes take 8 or 16 values a step.
typedef int32_t I4 __attribute__((vector_size(16)));
typedef float F4 __attribute__((vector_size(16)));
constexpr int32_t kAbsBits = 0x7fffffff;
inline I4 abs_keys(const float* p) {
  I4 v;
  std::memcpy(&v, p, sizeof(v));
  return v & kAbsBits;
}
inline int32_t abs_key(float v) { return std::bit_cast<int32_t>(v) & kAbsBits; }

// How many of x[n] have |x| (as bits) <= t: 16 keys a step, four vector counters (a true compare
// is -1 in each lane).
int64_t count_keys_le(const float* x, int64_t n, int32_t t) {
  // key <= t as t + 1 > key (t < 2^31 - 1 here): one signed compare, where <= is compare and invert.
  const I4 t1 = I4{} + (t + 1);
  I4 c0 = {}, c1 = {}, c2 = {}, c3 = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    c0 += t1 > abs_keys(x + i);
    c1 += t1 > abs_keys(x + i + 4);
    c2 += t1 > abs_keys(x + i + 8);
    c3 += t1 > abs_keys(x + i + 12);
  }
  for (; i + 4 <= n; i += 4) c0 += t1 > abs_keys(x + i);
  const I4 sum = (c0 + c1) + (c2 + c3);
  int64_t c = 0;
  for (int l = 0; l < 4; ++l) c -= sum[l];
  for (; i < n; ++i) c += abs_key(x[i]) <= t;
  return c;
}

// The k-th smallest (0-based, k < n) |x| over x[n] as its bits, exactly, without a workspace:
// a bracket on the bit pattern narrowed by pivots (below), each step one vector count over x (the
// row stays in L1), until at most kGather values lie in it, which are then gathered and selected
// directly. It replaced a radix select (8 bits a pass, scalar histograms and compaction): ~3.5×
// per 1024-wide row (docs/PERFORMANCE.md, eleventh and twelfth passes). *prev receives the (k-1)-th
// smallest when the bracket holds it too (k ≥ 1; most rows), else -1.
int32_t select_kth_abs(const float* x, int64_t n, int64_t k, int32_t* prev) {
  constexpr int64_t kGather = 32;
  *prev = -1;
  // Two minima and maxima (a compare and a select each, where SSE2 has no integer min / max)
  // keep two dependency chains apiece in flight.
  I4 vmin0 = I4{} + kAbsBits, vmin1 = vmin0, vmax0 = {}, vmax1 = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const I4 a = abs_keys(x + i), b = abs_keys(x + i + 4);
    vmin0 = a < vmin0 ? a : vmin0;
    vmax0 = a > vmax0 ? a : vmax0;
    vmin1 = b < vmin1 ? b : vmin1;
    vmax1 = b > vmax1 ? b : vmax1;
  }
  int32_t kmin = kAbsBits, kmax = 0;
  for (int l = 0; l < 4; ++l) {
    kmin = std::min({kmin, vmin0[l], vmin1[l]});
    kmax = std::max({kmax, vmax0[l], vmax1[l]});
  }
  for (; i < n; ++i) {
    kmin = std::min(kmin, abs_key(x[i]));
    kmax = std::max(kmax, abs_key(x[i]));
  }
  // Invariant: count(<= lo) = c_lo <= k < c_hi = count(<= hi); the answer is in (lo, hi].
  int64_t lo = int64_t{kmin} - 1, hi = kmax, c_lo = 0, c_hi = n;
  // Each step's pivot: interpolated, where the bracket's keys would put rank k ± kGather / 3
  // if they were spread evenly (on the side whose end is farther from k, so both ends close in),
  // or the midpoint after a step that did not halve the bracket (a skewed spread), which bounds
  // the passes by twice the bisection's.
  bool bisect = false;
  while (hi - lo > 1 && c_hi - c_lo > kGather) {
    int64_t mid = lo + (hi - lo) / 2;
    if (!bisect) {
      const double target = c_hi - 1 - k > k - c_lo ? k + kGather / 3 : k - kGather / 3;
      const double f = (target + 1 - c_lo) / static_cast<double>(c_hi - c_lo);
      mid = std::clamp(lo + static_cast<int64_t>(f * static_cast<double>(hi - lo)), lo + 1, hi - 1);
    }
    const int64_t c = count_keys_le(x, n, static_cast<int32_t>(mid)), before = c_hi - c_lo;
    if (c > k) {
      hi = mid;
      c_hi = c;
    } else {
      lo = mid;
      c_lo = c;
    }
    bisect = !bisect && 2 * (c_hi - c_lo) > before;
  }
  if (hi - lo == 1) {  // every value in the bracket is hi
    if (k - 1 >= c_lo) *prev = static_cast<int32_t>(hi);
    return static_cast<int32_t>(hi);
  }
  int32_t cand[kGather + 3];  // each lane is stored, then kept by advancing m (no branch per lane)
  int64_t m = 0;
  const int32_t lo32 = static_cast<int32_t>(lo), hi32 = static_cast<int32_t>(hi);
  for (i = 0; i + 4 <= n; i += 4) {
    const I4 v = abs_keys(x + i);
    const I4 in = (v > lo32) & (v <= hi32);
    if ((in[0] | in[1] | in[2] | in[3]) == 0) continue;
    for (int l = 0; l < 4; ++l) {
      cand[m] = v[l];
      m -= in[l];
    }
  }
  for (; i < n; ++i) {
    const int32_t v = abs_key(x[i]);
    if (v > lo32 && v <= hi32) cand[m++] = v;
  }
  const int64_t j = k - c_lo;
  std::nth_element(cand, cand + j, cand + m);
  if (j >= 1) *prev = *std::max_element(cand, cand + j);  // those before the k-th are not above it
  return cand[j];
}

// The median of |x| over x[n] once its upper middle (the (n/2)-th smallest |x|, 0-based, as bits)
// is known: itself for an odd n, else its mean with the lower middle, the largest |x| below it —
// or itself when it repeats there. lower: the lower middle when the select had it, else -1 (a
// pass over x finds it).
float median_from_upper(const float* x, int64_t n, int32_t upper, int32_t lower) {
  if (n % 2 == 1) return std::bit_cast<float>(upper);
  if (lower < 0) {
    I4 vlow = {}, vbelow = {};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const I4 v = abs_keys(x + i);
      const I4 is_below = v < upper;
      vbelow += is_below;
      vlow = (is_below & (v > vlow)) != 0 ? v : vlow;
    }
    int64_t below = 0;
    lower = 0;
    for (int l = 0; l < 4; ++l) {
      below -= vbelow[l];
      lower = std::max(lower, vlow[l]);
    }
    for (; i < n; ++i) {
      const int32_t v = abs_key(x[i]);
      if (v < upper) {
        ++below;
        lower = std::max(lower, v);
      }
    }
    if (below < n / 2) lower = upper;
  }
  return static_cast<float>((static_cast<double>(std::bit_cast<float>(lower)) + std::bit_cast<float>(upper)) / 2);
}

// max |x_i| over x[n] (NaN ignored; 0 when none is above 0) and its lowest i.
void max_abs_dim(const float* x, int64_t n, float* max_abs, int32_t* max_dim) {
  F4 vm0 = {}, vm1 = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F4 a, b;
    std::memcpy(&a, x + i, sizeof(a));
    std::memcpy(&b, x + i + 4, sizeof(b));
    a = reinterpret_cast<F4>(reinterpret_cast<I4>(a) & kAbsBits);
    b = reinterpret_cast<F4>(reinterpret_cast<I4>(b) & kAbsBits);
    vm0 = a > vm0 ? a : vm0;  // a NaN keeps the maximum
    vm1 = b > vm1 ? b : vm1;
  }
  float m = 0;
  for (int l = 0; l < 4; ++l) m = std::max({m, vm0[l], vm1[l]});
  for (int64_t j = i; j < n; ++j) m = std::fabs(x[j]) > m ? std::fabs(x[j]) : m;
  *max_abs = m;
  *max_dim = 0;
  if (m == 0) return;
  const int32_t mk = std::bit_cast<int32_t>(m);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {  // to the first block holding it
    const I4 hit = abs_keys(x + j) == mk;
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) break;
  }
  for (; j < n; ++j) {
    if (abs_key(x[j]) == mk) {
      *max_dim = static_cast<int32_t>(j);
      return;
    }
  }
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

int64_t clip_massive(float* x, int64_t n_rows, int64_t width, float t, float factor, const float* mean) {
  int64_t changed = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * width;
    const float limit = t * median_abs(row, width);
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
  int32_t lower = -1;
  const int32_t upper = select_kth_abs(x, n, n / 2, &lower);
  return median_from_upper(x, n, upper, lower);
}

RowStats row_max_median(const float* x, int64_t width) {
  RowStats s;
  max_abs_dim(x, width, &s.max_abs, &s.max_dim);
  s.median_abs = median_abs(x, width);
  return s;
}

RowStats row_stats(const float* x, int64_t width) {
  RowStats s = row_max_median(x, width);
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < width; ++i) {
    sum += x[i];
    sum_sq += static_cast<double>(x[i]) * x[i];
  }
  s.sum = sum;
  s.sum_sq = sum_sq;
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

// Elementwise ops (portable; memory-bound and tiny next to the matmuls).
#include "ops/activation.h"

#include <cmath>
#include <cstdint>

namespace gb::ops {
namespace {

// Four floats: the baseline's vector registers (SSE2, NEON); wider types would be lowered to
// scalar code in this portable file.
typedef float Vec __attribute__((vector_size(16)));
constexpr int64_t kVec = sizeof(Vec) / sizeof(float);
#include "ops/vexp_inl.h"

// Elements [i, i + m) of p as a vector, m <= kVec; missing lanes 0.
inline void load_part(Vec& v, const float* p, int64_t m) {
  if (m == kVec) {
    __builtin_memcpy(&v, p, sizeof v);
    return;
  }
  float lane[kVec] = {};
  for (int64_t j = 0; j < m; ++j) lane[j] = p[j];
  __builtin_memcpy(&v, lane, sizeof v);
}

inline void store_part(float* p, const Vec& v, int64_t m) {
  if (m == kVec) {
    __builtin_memcpy(p, &v, sizeof v);
    return;
  }
  float lane[kVec];
  __builtin_memcpy(lane, &v, sizeof v);
  for (int64_t j = 0; j < m; ++j) p[j] = lane[j];
}

}  // namespace

// Every element, the tail included, goes through the same vector lanes, so an element's result
// does not depend on n or on where a caller splits a row.
void exp_n(const float* x, int64_t n, float* out) {
  Vec v, e;
  for (int64_t i = 0; i < n; i += kVec) {
    const int64_t m = n - i < kVec ? n - i : kVec;
    load_part(v, x + i, m);
    vexp(e, v);
    store_part(out + i, e, m);
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  Vec g, u, e;
  for (int64_t i = 0; i < n; i += kVec) {
    const int64_t m = n - i < kVec ? n - i : kVec;
    load_part(g, gate + i, m);
    load_part(u, up + i, m);
    vexp(e, -g);
    g = g / (1.0f + e) * u;
    store_part(out + i, g, m);
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

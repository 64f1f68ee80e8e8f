// Elementwise ops: the portable vector loops, with AVX2 / AVX-512 copies of them (same bits).
#include "ops/activation.h"

#include <cmath>
#include <cstdint>

#include "ops/activation_kernels.h"
#include "ops/cpu_features.h"

namespace gb::ops {
namespace {

// Four floats: the baseline's vector registers (SSE2, NEON); wider types would be lowered to
// scalar code in this portable file. activation_avx2.cc / activation_avx512.cc run the same
// loops 8 and 16 lanes wide, with the same bits.
typedef float Vec __attribute__((vector_size(16)));
#include "ops/vexp_inl.h"
// (after vexp_inl.h, which it uses)
#include "ops/activation_simd_inl.h"

}  // namespace

// Every element, the tail included, goes through the same vector lanes, so an element's result
// does not depend on n, on where a caller splits a row, or on the ISA.
void exp_n(const float* x, int64_t n, float* out) {
#if defined(__x86_64__)
  switch (active_isa()) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return avx512::exp_n(x, n, out);
    case Isa::kAvx2: return avx2::exp_n(x, n, out);
    case Isa::kScalar: break;
  }
#endif
  exp_n_any(x, n, out);
}

// SwiGLU on the decode step's serial path: 3072 exponentials a layer for a 0.6B model, ~4 µs in
// four lanes (docs/PERFORMANCE.md, fourteenth pass).
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
#if defined(__x86_64__)
  switch (active_isa()) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return avx512::silu_mul(gate, up, n, out);
    case Isa::kAvx2: return avx2::silu_mul(gate, up, n, out);
    case Isa::kScalar: break;
  }
#endif
  silu_mul_any(gate, up, n, out);
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

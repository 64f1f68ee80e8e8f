// AVX512 copies of the elementwise loops of ops/activation.h (activation_simd_inl.h, 16 f32 lanes).
#if defined(__x86_64__)
#include <cstdint>

#include "ops/activation_kernels.h"

namespace gb::ops::avx512 {
namespace {

typedef float Vec __attribute__((vector_size(16 * sizeof(float))));
#include "ops/vexp_inl.h"
// (after vexp_inl.h, which it uses)
#include "ops/activation_simd_inl.h"

}  // namespace

void exp_n(const float* x, int64_t n, float* out) { exp_n_any(x, n, out); }
void silu_mul(const float* gate, const float* up, int64_t n, float* out) { silu_mul_any(gate, up, n, out); }

}  // namespace gb::ops::avx512
#endif

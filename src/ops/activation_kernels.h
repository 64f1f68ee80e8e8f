// Internal interface between ops/activation.cc's dispatch and its per-ISA copies
// (activation_avx2.cc, activation_avx512.cc), which include activation_simd_inl.h: bitwise the
// same results as the portable loops, 8 and 16 lanes at a time.
#pragma once

#include <cstdint>

namespace gb::ops {

#if defined(__x86_64__)
namespace avx2 {
void exp_n(const float* x, int64_t n, float* out);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
}  // namespace avx2
namespace avx512 {
void exp_n(const float* x, int64_t n, float* out);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
}  // namespace avx512
#endif

}  // namespace gb::ops

// Elementwise ops of the layer loop: SwiGLU activation, residual adds, bias adds.
#pragma once

#include <cstdint>

namespace gb::ops {

// out[n] = e^x[n] through the vector exp of ops/vexp_inl.h (≤ 1.01 ulp; x clamped to [−87.3,
// 88.3], NaN stays NaN). out may alias x.
void exp_n(const float* x, int64_t n, float* out);

// out[n] = silu(gate[n]) · up[n], silu(x) = x / (1 + e^-x) (as ggml computes it), e^-x as exp_n.
// out may alias gate.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// Scalar double-precision reference for tests.
void silu_mul_ref(const float* gate, const float* up, int64_t n, float* out);

// x[n] += y[n] (residual stream).
void add_inplace(float* x, const float* y, int64_t n);

// x[n_rows, width] += b[width] (Qwen2 q/k/v biases).
void add_bias(float* x, const float* b, int64_t n_rows, int64_t width);

}  // namespace gb::ops

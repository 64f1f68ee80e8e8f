// RMSNorm, the normalisation of every Llama-family layer: y = x / sqrt(mean(x²) + eps) · w.
#pragma once

#include <cstdint>

namespace gb::ops {

// out[n, width] = x[n, width] · rsqrt(mean(x²) + eps) · w[width]; all f32. The sum of squares
// is accumulated in double, as ggml does: hidden states of real models reach |x| ~ 1e3 (massive
// activations) and a float sum loses the small dims. It is summed in eight lanes in a fixed order,
// so a row's result depends on that row alone (not on n, the batch or the threads). out may
// alias x.
void rms_norm(const float* x, const float* w, int64_t n, int64_t width, float eps, float* out);

// Scalar double-precision reference for tests.
void rms_norm_ref(const float* x, const float* w, int64_t n, int64_t width, float eps, float* out);

}  // namespace gb::ops

// Gated DeltaNet ops: the references, the small ops, and run-time dispatch of the loops in
// linear_attention_inl.h (portable here, AVX2 + FMA in linear_attention_avx2.cc, AVX-512 in
// linear_attention_avx512.cc). The delta-rule loops run over dv contiguously; the state of one
// head (dk·dv floats, 64 KiB for 128×128) stays in L2.
#include "ops/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/activation.h"
#include "ops/cpu_features.h"

namespace gb::ops {

namespace portable {
#include "ops/linear_attention_inl.h"
}  // namespace portable

#if defined(__x86_64__)
// The ISA copies (linear_attention_avx2.cc, linear_attention_avx512.cc) declare the same three loops.
#define GB_DELTA_LOOPS                                                                                                 \
  void causal_conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t stride, const float* w, int64_t kernel, \
                          float* state, float* out);                                                                   \
  void gated_delta_recurrent(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state);                     \
  void gated_delta_chunked(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state, int64_t chunk,         \
                           float* scratch);
namespace avx2 {
GB_DELTA_LOOPS
}  // namespace avx2
namespace avx512 {
GB_DELTA_LOOPS
}  // namespace avx512
#undef GB_DELTA_LOOPS
#endif

#if defined(__x86_64__)
#define GB_BY_ISA(fn) (active_isa() >= Isa::kAvx512 ? avx512::fn : active_isa() >= Isa::kAvx2 ? avx2::fn : portable::fn)
#else
#define GB_BY_ISA(fn) portable::fn
#endif

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Run-time dispatch: the widest copy the CPU runs.
void causal_conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t stride, const float* w, int64_t kernel,
                        float* state, float* out) {
  GB_BY_ISA(causal_conv1d_silu)(x, n, channels, stride, w, kernel, state, out);
}

void gated_delta_recurrent(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state) {
  GB_BY_ISA(gated_delta_recurrent)(h, n, dk, dv, state);
}

void gated_delta_chunked(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state, int64_t chunk,
                         float* scratch) {
  GB_BY_ISA(gated_delta_chunked)(h, n, dk, dv, state, chunk, scratch);
}
#undef GB_BY_ISA

void causal_conv1d_silu_ref(const float* x, int64_t n, int64_t channels, const float* w, int64_t kernel, float* state,
                            float* out) {
  const int64_t hist = kernel - 1;
  std::vector<float> seq((hist + n) * channels);
  std::copy(state, state + hist * channels, seq.begin());
  std::copy(x, x + n * channels, seq.begin() + hist * channels);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < kernel; ++j) acc += double{w[c * kernel + j]} * seq[(t + j) * channels + c];
      out[t * channels + c] = static_cast<float>(acc / (1.0 + std::exp(-acc)));
    }
  }
  std::copy(seq.end() - hist * channels, seq.end(), state);
}

void l2_norm(float* x, int64_t n, int64_t width, float eps) {
  for (int64_t t = 0; t < n; ++t) {
    float* r = x + t * width;
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(r[i]) * r[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(sum) + eps);
    for (int64_t i = 0; i < width; ++i) r[i] *= inv;
  }
}

size_t gated_delta_chunk_scratch(int64_t chunk, int64_t dv) {
  // A and B [chunk²] each, G and Wd [chunk] each, U [chunk, dv], coef [kDeltaRowGroup, chunk].
  return static_cast<size_t>(2 * chunk * chunk + (2 + kDeltaRowGroup) * chunk + chunk * dv);
}

void gated_delta_ref(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state) {
  std::vector<double> S(state, state + dk * dv), u(dv);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  for (int64_t t = 0; t < n; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    const double decay = std::exp(static_cast<double>(h.g[t * h.gb_stride]));
    const double beta = h.beta[t * h.gb_stride];
    for (auto& s : S) s *= decay;
    for (int64_t j = 0; j < dv; ++j) {
      double kv = 0;
      for (int64_t r = 0; r < dk; ++r) kv += k[r] * S[r * dv + j];
      u[j] = beta * (v[j] - kv);
    }
    for (int64_t r = 0; r < dk; ++r) {
      for (int64_t j = 0; j < dv; ++j) S[r * dv + j] += k[r] * u[j];
    }
    for (int64_t j = 0; j < dv; ++j) {
      double o = 0;
      for (int64_t r = 0; r < dk; ++r) o += q[r] * scale * S[r * dv + j];
      h.out[t * h.out_stride + j] = static_cast<float>(o);
    }
  }
  for (int64_t i = 0; i < dk * dv; ++i) state[i] = static_cast<float>(S[i]);
}

namespace {

// f(i, 1 / (1 + e^-z[i])) for i in [0, n), e^-z through exp_n a slice at a time.
template <class F>
void for_sigmoid(const float* z, int64_t n, F&& f) {
  constexpr int64_t kSlice = 64;
  float e[kSlice];
  for (int64_t i0 = 0; i0 < n; i0 += kSlice) {
    const int64_t m = std::min(kSlice, n - i0);
    for (int64_t j = 0; j < m; ++j) e[j] = -z[i0 + j];
    exp_n(e, m, e);
    for (int64_t j = 0; j < m; ++j) f(i0 + j, 1.0f / (1.0f + e[j]));
  }
}

}  // namespace

void gated_rms_norm(const float* x, const float* z, const float* w, int64_t n, int64_t width, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * width;
    const float* zr = z + t * width;
    float* yr = out + t * width;
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(width)) + eps);
    // silu(z) = z · sigmoid(z)
    for_sigmoid(zr, width, [&](int64_t i, float sg) { yr[i] = (xr[i] * scale) * w[i] * (zr[i] * sg); });
  }
}

void gated_rms_norm_ref(const float* x, const float* z, const float* w, int64_t n, int64_t width, float eps,
                        float* out) {
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(x[t * width + i]) * x[t * width + i];
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(width) + eps);
    for (int64_t i = 0; i < width; ++i) {
      const double zi = z[t * width + i];
      out[t * width + i] = static_cast<float>(x[t * width + i] * scale * w[i] * (zi / (1.0 + std::exp(-zi))));
    }
  }
}

void sigmoid_mul(float* x, const float* gate, int64_t n) {
  for_sigmoid(gate, n, [&](int64_t i, float sg) { x[i] *= sg; });
}

}  // namespace gb::ops

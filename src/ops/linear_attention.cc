// Gated DeltaNet ops (portable). The delta-rule loops run over dv contiguously so the compiler
// vectorises them; the state of one head (dk·dv floats, 64 KiB for 128×128) stays in L2.
#include "ops/linear_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "ops/dot.h"

namespace gb::ops {

namespace {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

constexpr int64_t kMaxDv = 1024;  // ModelConfig::validate bounds linear_value_head_dim by this

}  // namespace

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void causal_conv1d_silu(const float* x, int64_t n, int64_t channels, const float* w, int64_t kernel, float* state,
                        float* out) {
  const int64_t hist = kernel - 1;
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * channels;
    for (int64_t c = 0; c < channels; ++c) o[c] = 0.0f;
    for (int64_t j = 0; j < kernel; ++j) {
      const int64_t tau = t - hist + j;
      const float* in = tau >= 0 ? x + tau * channels : state + (hist + tau) * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] += w[c * kernel + j] * in[c];
    }
    for (int64_t c = 0; c < channels; ++c) o[c] = silu(o[c]);
  }
  // New window: the last kernel-1 inputs. Row j reads old row n + j > j, so ascending j is safe.
  for (int64_t j = 0; j < hist; ++j) {
    const int64_t tau = n - hist + j;
    const float* src = tau >= 0 ? x + tau * channels : state + (hist + tau) * channels;
    std::copy(src, src + channels, state + j * channels);
  }
}

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

void gated_delta_recurrent(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state) {
  assert(dv <= kMaxDv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  float u[kMaxDv];
  for (int64_t t = 0; t < n; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    float* o = h.out + t * h.out_stride;
    const float decay = std::exp(h.g[t * h.gb_stride]);
    const float beta = h.beta[t * h.gb_stride];
    // Pass 1 (reads the state): the value the decayed state predicts for k, e^g·Sᵀk.
    for (int64_t j = 0; j < dv; ++j) u[j] = 0.0f;
    for (int64_t r = 0; r < dk; ++r) {
      const float* row = state + r * dv;
      const float kr = k[r];
      for (int64_t j = 0; j < dv; ++j) u[j] += kr * row[j];
    }
    for (int64_t j = 0; j < dv; ++j) u[j] = beta * (v[j] - decay * u[j]);
    // Pass 2 (the one write): S = e^g·S + k uᵀ, and the output read from the updated rows.
    for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
    for (int64_t r = 0; r < dk; ++r) {
      float* row = state + r * dv;
      const float kr = k[r], qr = q[r] * scale;
      for (int64_t j = 0; j < dv; ++j) {
        row[j] = decay * row[j] + kr * u[j];
        o[j] += qr * row[j];
      }
    }
  }
}

size_t gated_delta_chunk_scratch(int64_t chunk, int64_t dv) {
  return static_cast<size_t>(2 * chunk * chunk + chunk + chunk * dv);
}

void gated_delta_chunked(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state, int64_t chunk,
                         float* scratch) {
  const int64_t C = chunk;
  float* A = scratch;    // [C, C] β_i e^{G_i−G_s} k_i·k_s for s < i
  float* B = A + C * C;  // [C, C] e^{G_i−G_s} (q_i / sqrt(dk))·k_s for s <= i
  float* G = B + C * C;  // [C] cumulative log decay within the chunk
  float* U = G + C;      // [C, dv] the values each token writes (u_i)
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t c0 = 0; c0 < n; c0 += C) {
    const int64_t L = std::min(C, n - c0);
    auto q = [&](int64_t i) { return h.q + (c0 + i) * h.qk_stride; };
    auto k = [&](int64_t i) { return h.k + (c0 + i) * h.qk_stride; };
    auto beta = [&](int64_t i) { return h.beta[(c0 + i) * h.gb_stride]; };
    float acc = 0.0f;
    for (int64_t i = 0; i < L; ++i) G[i] = (acc += h.g[(c0 + i) * h.gb_stride]);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t s = 0; s <= i; ++s) {
        const float d = std::exp(G[i] - G[s]);
        if (s < i) A[i * C + s] = beta(i) * d * dot(k(i), k(s), dk);
        B[i * C + s] = scale * d * dot(q(i), k(s), dk);
      }
    }
    // Right-hand side β_i (v_i − e^{G_i} S0ᵀk_i) and the state's part of the output e^{G_i} S0ᵀq_i.
    for (int64_t i = 0; i < L; ++i) {
      float* u = U + i * dv;
      float* o = h.out + (c0 + i) * h.out_stride;
      const float* v = h.v + (c0 + i) * h.v_stride;
      const float* ki = k(i);
      const float* qi = q(i);
      for (int64_t j = 0; j < dv; ++j) u[j] = o[j] = 0.0f;
      for (int64_t r = 0; r < dk; ++r) {
        const float* row = state + r * dv;
        const float kr = ki[r], qr = qi[r];
        for (int64_t j = 0; j < dv; ++j) {
          u[j] += kr * row[j];
          o[j] += qr * row[j];
        }
      }
      const float eg = std::exp(G[i]), b = beta(i), oscale = eg * scale;
      for (int64_t j = 0; j < dv; ++j) {
        u[j] = b * (v[j] - eg * u[j]);
        o[j] *= oscale;
      }
    }
    // Forward substitution through the unit lower-triangular (I + A).
    for (int64_t i = 1; i < L; ++i) {
      float* ui = U + i * dv;
      for (int64_t s = 0; s < i; ++s) {
        const float a = A[i * C + s];
        const float* us = U + s * dv;
        for (int64_t j = 0; j < dv; ++j) ui[j] -= a * us[j];
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      float* o = h.out + (c0 + i) * h.out_stride;
      for (int64_t s = 0; s <= i; ++s) {
        const float b = B[i * C + s];
        const float* us = U + s * dv;
        for (int64_t j = 0; j < dv; ++j) o[j] += b * us[j];
      }
    }
    // State at the chunk end.
    const float e_last = std::exp(G[L - 1]);
    for (int64_t r = 0; r < dk; ++r) {
      float* row = state + r * dv;
      for (int64_t j = 0; j < dv; ++j) row[j] *= e_last;
    }
    for (int64_t s = 0; s < L; ++s) {
      const float w = std::exp(G[L - 1] - G[s]);
      const float* ks = k(s);
      const float* us = U + s * dv;
      for (int64_t r = 0; r < dk; ++r) {
        float* row = state + r * dv;
        const float coef = w * ks[r];
        for (int64_t j = 0; j < dv; ++j) row[j] += coef * us[j];
      }
    }
  }
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

void gated_rms_norm(const float* x, const float* z, const float* w, int64_t n, int64_t width, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * width;
    const float* zr = z + t * width;
    float* yr = out + t * width;
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(width)) + eps);
    for (int64_t i = 0; i < width; ++i) yr[i] = (xr[i] * scale) * w[i] * silu(zr[i]);
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
  for (int64_t i = 0; i < n; ++i) x[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

}  // namespace gb::ops

// The Gated DeltaNet loops (conv1d, the delta rule's recurrent and chunked forms), written once in
// plain loops over dv (contiguous) that the compiler vectorises, and compiled per ISA:
// linear_attention.cc includes this file inside its portable namespace and
// linear_attention_avx2.cc inside gb::ops::avx2 with -mavx2 -mfma, so each gets its own copies.
// Nothing here may instantiate a std template or call a shared inline function (the linker could
// merge an AVX2 copy into baseline code), hence dot8 and the __builtin math. A CPU's results do
// not depend on the batch or the thread count; between ISA levels they differ in the last bits
// (FMA contraction, wider lanes), within the tolerances the tests state. No include guard on purpose.

// a·b with eight independent partial sums (the same order at every ISA: vectorisable without
// -ffast-math).
inline float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline constexpr int64_t kMaxDv = 1024;  // ModelConfig::validate bounds linear_value_head_dim by this

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
    for (int64_t c = 0; c < channels; ++c) o[c] = o[c] / (1.0f + __builtin_expf(-o[c]));
  }
  // New window: the last kernel-1 inputs. Row j reads old row n + j > j, so ascending j is safe.
  for (int64_t j = 0; j < hist; ++j) {
    const int64_t tau = n - hist + j;
    const float* src = tau >= 0 ? x + tau * channels : state + (hist + tau) * channels;
    for (int64_t c = 0; c < channels; ++c) state[j * channels + c] = src[c];
  }
}

void gated_delta_recurrent(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state) {
  assert(dv <= kMaxDv);
  const float scale = 1.0f / __builtin_sqrtf(static_cast<float>(dk));
  float u[kMaxDv];
  for (int64_t t = 0; t < n; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    float* o = h.out + t * h.out_stride;
    const float decay = __builtin_expf(h.g[t * h.gb_stride]);
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

inline constexpr int kLaneBlock = 16;  // output lanes kept in registers (two AVX2 vectors)

// For T consecutive tokens from t0: u_t = S0ᵀk_t into U rows and S0ᵀq_t into their output rows,
// summed over the state rows in order; each state row block is loaded once for the T tokens.
template <int T>
inline void state_reads(const DeltaHead& h, int64_t t0, float* U, const float* state, int64_t dk, int64_t dv) {
  const float* kt[T];
  const float* qt[T];
  float* ot[T];
  for (int t = 0; t < T; ++t) {
    kt[t] = h.k + (t0 + t) * h.qk_stride;
    qt[t] = h.q + (t0 + t) * h.qk_stride;
    ot[t] = h.out + (t0 + t) * h.out_stride;
  }
  int64_t j = 0;
  for (; j + kLaneBlock <= dv; j += kLaneBlock) {
    float au[T][kLaneBlock] = {}, ao[T][kLaneBlock] = {};
    for (int64_t r = 0; r < dk; ++r) {
      const float* row = state + r * dv + j;
      for (int t = 0; t < T; ++t) {
        const float kr = kt[t][r], qr = qt[t][r];
        for (int l = 0; l < kLaneBlock; ++l) {
          au[t][l] += kr * row[l];
          ao[t][l] += qr * row[l];
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int l = 0; l < kLaneBlock; ++l) {
        U[t * dv + j + l] = au[t][l];
        ot[t][j + l] = ao[t][l];
      }
    }
  }
  for (; j < dv; ++j) {
    for (int t = 0; t < T; ++t) {
      float au = 0.0f, ao = 0.0f;
      for (int64_t r = 0; r < dk; ++r) {
        au += kt[t][r] * state[r * dv + j];
        ao += qt[t][r] * state[r * dv + j];
      }
      U[t * dv + j] = au;
      ot[t][j] = ao;
    }
  }
}

// y[dv] += sign · Σ_{s<n} c[s]·X[s, :] (X rows dv apart), s in order, 16 lanes in registers.
inline void blocked_axpys(float* y, const float* c, const float* X, int64_t n, int64_t dv, float sign) {
  int64_t j = 0;
  for (; j + kLaneBlock <= dv; j += kLaneBlock) {
    float acc[kLaneBlock];
    for (int l = 0; l < kLaneBlock; ++l) acc[l] = y[j + l];
    for (int64_t s = 0; s < n; ++s) {
      const float a = sign * c[s];
      const float* xs = X + s * dv + j;
      for (int l = 0; l < kLaneBlock; ++l) acc[l] += a * xs[l];
    }
    for (int l = 0; l < kLaneBlock; ++l) y[j + l] = acc[l];
  }
  for (; j < dv; ++j) {
    float acc = y[j];
    for (int64_t s = 0; s < n; ++s) acc += (sign * c[s]) * X[s * dv + j];
    y[j] = acc;
  }
}

// W lanes of one state row: row = e_last·row + Σ_s coef[s]·U[s, :], s in order.
template <int W>
inline void state_row_update(float* row, float e_last, const float* coef, const float* U, int64_t L, int64_t dv) {
  float acc[W];
  for (int l = 0; l < W; ++l) acc[l] = row[l] * e_last;
  for (int64_t s = 0; s < L; ++s) {
    const float cs = coef[s];
    for (int l = 0; l < W; ++l) acc[l] += cs * U[s * dv + l];
  }
  for (int l = 0; l < W; ++l) row[l] = acc[l];
}

void gated_delta_chunked(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state, int64_t chunk,
                         float* scratch) {
  const int64_t C = chunk;
  float* A = scratch;      // [C, C] β_i e^{G_i−G_s} k_i·k_s for s < i
  float* B = A + C * C;    // [C, C] e^{G_i−G_s} (q_i / sqrt(dk))·k_s for s <= i
  float* G = B + C * C;    // [C] cumulative log decay within the chunk
  float* U = G + C;        // [C, dv] the values each token writes (u_i)
  float* Wd = U + C * dv;  // [C] e^{G_L−G_s}: the decay from token s to the chunk end
  float* coef = Wd + C;    // [C] e^{G_L−G_s}·k_s[r] for the state row r being updated
  const float scale = 1.0f / __builtin_sqrtf(static_cast<float>(dk));
  for (int64_t c0 = 0; c0 < n; c0 += C) {
    const int64_t L = (n - c0 < C ? n - c0 : C);
    auto q = [&](int64_t i) { return h.q + (c0 + i) * h.qk_stride; };
    auto k = [&](int64_t i) { return h.k + (c0 + i) * h.qk_stride; };
    auto beta = [&](int64_t i) { return h.beta[(c0 + i) * h.gb_stride]; };
    float acc = 0.0f;
    for (int64_t i = 0; i < L; ++i) G[i] = (acc += h.g[(c0 + i) * h.gb_stride]);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t s = 0; s <= i; ++s) {
        const float d = __builtin_expf(G[i] - G[s]);
        if (s < i) A[i * C + s] = beta(i) * d * dot8(k(i), k(s), dk);
        B[i * C + s] = scale * d * dot8(q(i), k(s), dk);
      }
    }
    // Right-hand side β_i (v_i − e^{G_i} S0ᵀk_i) and the state's part of the output e^{G_i} S0ᵀq_i,
    // two tokens at a time (each state row loaded once for both).
    int64_t i = 0;
    for (; i + 2 <= L; i += 2) state_reads<2>(h, c0 + i, U + i * dv, state, dk, dv);
    if (i < L) state_reads<1>(h, c0 + i, U + i * dv, state, dk, dv);
    for (int64_t t = 0; t < L; ++t) {
      float* u = U + t * dv;
      float* o = h.out + (c0 + t) * h.out_stride;
      const float* v = h.v + (c0 + t) * h.v_stride;
      const float eg = __builtin_expf(G[t]), b = beta(t), oscale = eg * scale;
      for (int64_t j = 0; j < dv; ++j) {
        u[j] = b * (v[j] - eg * u[j]);
        o[j] *= oscale;
      }
    }
    // Forward substitution through the unit lower-triangular (I + A), then the intra-chunk
    // output o_i += Σ_{s<=i} B_is u_s: both accumulate a block of 16 lanes in registers over s.
    for (int64_t t = 1; t < L; ++t) blocked_axpys(U + t * dv, A + t * C, U, t, dv, -1.0f);
    for (int64_t t = 0; t < L; ++t) blocked_axpys(h.out + (c0 + t) * h.out_stride, B + t * C, U, t + 1, dv, 1.0f);
    // State at the chunk end: S = e^{G_L}·S0 + Σ_s e^{G_L−G_s} k_s u_sᵀ, row by row, each state
    // row block loaded and stored once.
    const float e_last = __builtin_expf(G[L - 1]);
    for (int64_t t = 0; t < L; ++t) Wd[t] = __builtin_expf(G[L - 1] - G[t]);
    for (int64_t r = 0; r < dk; ++r) {
      float* row = state + r * dv;
      for (int64_t t = 0; t < L; ++t) coef[t] = Wd[t] * k(t)[r];
      int64_t j = 0;
      for (; j + kLaneBlock <= dv; j += kLaneBlock) state_row_update<kLaneBlock>(row + j, e_last, coef, U + j, L, dv);
      for (; j < dv; ++j) state_row_update<1>(row + j, e_last, coef, U + j, L, dv);
    }
  }
}

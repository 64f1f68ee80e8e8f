// The Gated DeltaNet loops (conv1d, the delta rule's recurrent and chunked forms), written once and
// compiled per ISA: linear_attention.cc includes this file inside its portable namespace,
// linear_attention_avx2.cc inside gb::ops::avx2 with -mavx2 -mfma, linear_attention_avx512.cc
// inside gb::ops::avx512 with AVX-512, each with its vector width (GB_DELTA_VEC) and tokens per
// state read (GB_DELTA_TOKENS), so each gets its own copies. The delta rule's products are
// register tiles of GCC/Clang vector types (Vec: kVec floats in the copy's vector registers; the
// tile loops unrolled completely): accumulators the compiler otherwise kept in memory (measured:
// loads and stores around every FMA), and enough independent FMA chains to hide the latency.
// Nothing here may instantiate a std template or call a shared inline function (the linker could
// merge an AVX2 copy into baseline code), hence the __builtin math and vexp; Vec is passed by
// reference only (by value it changes the ABI between the copies, -Wpsabi). A CPU's results do not
// depend on the batch or the thread count; between ISA levels they differ in the last bits (FMA
// contraction, the lanes of the k·k and q·k sums), within the tolerances the tests state.
// No include guard on purpose.

// Vector width and the tokens per state read of this copy (defaults: the portable copy, 16-byte
// vectors as SSE2 and NEON have; wider ones it would lower to scalar code).
#ifndef GB_DELTA_VEC
#define GB_DELTA_VEC 4
#endif
#ifndef GB_DELTA_TOKENS
#define GB_DELTA_TOKENS 2
#endif
inline constexpr int kVec = GB_DELTA_VEC;         // floats per vector
inline constexpr int kTokTile = GB_DELTA_TOKENS;  // tokens per pass over the state (state_reads)
inline constexpr int kLaneBlock = 2 * kVec;       // output lanes of the state tiles
typedef float Vec __attribute__((vector_size(GB_DELTA_VEC * 4)));
#undef GB_DELTA_VEC
#undef GB_DELTA_TOKENS

// Loops over register tiles unrolled completely, so that the tiles stay in registers.
#define GB_UNROLL _Pragma("GCC unroll 16")

inline void vload(Vec& v, const float* p) { __builtin_memcpy(&v, p, sizeof v); }
inline void vstore(float* p, const Vec& v) { __builtin_memcpy(p, &v, sizeof v); }
inline void vsplat(Vec& v, float x) { v = Vec{} + x; }
inline float hsum(const Vec& v) {
  float l[kVec];
  vstore(l, v);
  float s = 0.0f;
  GB_UNROLL
  for (int i = 0; i < kVec; ++i) s += l[i];
  return s;
}

#include "ops/vexp_inl.h"

// kVec channels [c0, c0 + kVec) of a kernel-K conv: the K taps in registers, SiLU per lane.
template <int K>
inline void conv_channels(const float* x, int64_t n, int64_t c0, int64_t stride, const float* w, const float* state,
                          float* out) {
  Vec taps[K], in, acc, e;
  float lane[kVec];
  GB_UNROLL
  for (int j = 0; j < K; ++j) {
    for (int l = 0; l < kVec; ++l) lane[l] = w[(c0 + l) * K + j];
    vload(taps[j], lane);
  }
  for (int64_t t = 0; t < n; ++t) {
    acc = Vec{};
    GB_UNROLL
    for (int j = 0; j < K; ++j) {
      const int64_t tau = t - (K - 1) + j;
      vload(in, (tau >= 0 ? x + tau * stride : state + (K - 1 + tau) * stride) + c0);
      acc += taps[j] * in;
    }
    vexp(e, -acc);
    vstore(out + t * stride + c0, acc / (1.0f + e));
  }
}

// Kernel 4 (Qwen3.5's) a vector of channels at a time; other kernels and the last channels lane
// by lane. Per channel the taps are summed in order either way.
void causal_conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t stride, const float* w, int64_t kernel,
                        float* state, float* out) {
  const int64_t hist = kernel - 1;
  int64_t c0 = 0;
  if (kernel == 4) {
    for (; c0 + kVec <= channels; c0 += kVec) conv_channels<4>(x, n, c0, stride, w, state, out);
  }
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * stride;
    for (int64_t c = c0; c < channels; ++c) o[c] = 0.0f;
    for (int64_t j = 0; j < kernel; ++j) {
      const int64_t tau = t - hist + j;
      const float* in = tau >= 0 ? x + tau * stride : state + (hist + tau) * stride;
      for (int64_t c = c0; c < channels; ++c) o[c] += w[c * kernel + j] * in[c];
    }
    for (int64_t c = c0; c < channels; ++c) o[c] = o[c] / (1.0f + __builtin_expf(-o[c]));
  }
  // New window: the last kernel-1 inputs. Row j reads old row n + j > j, so ascending j is safe.
  for (int64_t j = 0; j < hist; ++j) {
    const int64_t tau = n - hist + j;
    const float* src = tau >= 0 ? x + tau * stride : state + (hist + tau) * stride;
    for (int64_t c = 0; c < channels; ++c) state[j * stride + c] = src[c];
  }
}

// One token of the recurrence on the state columns [j, j + NV·kVec): pass 1 reads the strip for
// u = β(v − e^g·Sᵀk), pass 2 updates it (still in L1) and reads the output from the new rows.
// Per element the sums run over the state rows in order, as in the scalar column below.
template <int NV>
inline void recurrent_strip(float* state, int64_t dk, int64_t dv, int64_t j, const float* q, const float* k,
                            const float* v, float scale, float decay, float beta, float* o) {
  Vec u[NV], acc[NV], s[NV], c;
  GB_UNROLL
  for (int i = 0; i < NV; ++i) u[i] = Vec{};
  for (int64_t r = 0; r < dk; ++r) {
    vsplat(c, k[r]);
    GB_UNROLL
    for (int i = 0; i < NV; ++i) {
      vload(s[i], state + r * dv + j + i * kVec);
      u[i] += c * s[i];
    }
  }
  GB_UNROLL
  for (int i = 0; i < NV; ++i) {
    vload(s[i], v + j + i * kVec);
    u[i] = beta * (s[i] - decay * u[i]);
    acc[i] = Vec{};
  }
  Vec cq;
  for (int64_t r = 0; r < dk; ++r) {
    float* row = state + r * dv + j;
    vsplat(c, k[r]);
    vsplat(cq, q[r] * scale);
    GB_UNROLL
    for (int i = 0; i < NV; ++i) {
      vload(s[i], row + i * kVec);
      s[i] = decay * s[i] + c * u[i];
      vstore(row + i * kVec, s[i]);
      acc[i] += cq * s[i];
    }
  }
  GB_UNROLL
  for (int i = 0; i < NV; ++i) vstore(o + j + i * kVec, acc[i]);
}

inline void recurrent_column(float* state, int64_t dk, int64_t dv, int64_t j, const float* q, const float* k,
                             const float* v, float scale, float decay, float beta, float* o) {
  float u = 0.0f, acc = 0.0f;
  for (int64_t r = 0; r < dk; ++r) u += k[r] * state[r * dv + j];
  u = beta * (v[j] - decay * u);
  for (int64_t r = 0; r < dk; ++r) {
    float& s = state[r * dv + j];
    s = decay * s + k[r] * u;
    acc += (q[r] * scale) * s;
  }
  o[j] = acc;
}

void gated_delta_recurrent(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state) {
  const float scale = 1.0f / __builtin_sqrtf(static_cast<float>(dk));
  for (int64_t t = 0; t < n; ++t) {
    const float* q = h.q + t * h.qk_stride;
    const float* k = h.k + t * h.qk_stride;
    const float* v = h.v + t * h.v_stride;
    float* o = h.out + t * h.out_stride;
    const float decay = __builtin_expf(h.g[t * h.gb_stride]);
    const float beta = h.beta[t * h.gb_stride];
    int64_t j = 0;
    for (; j + 4 * kVec <= dv; j += 4 * kVec) recurrent_strip<4>(state, dk, dv, j, q, k, v, scale, decay, beta, o);
    for (; j + kVec <= dv; j += kVec) recurrent_strip<1>(state, dk, dv, j, q, k, v, scale, decay, beta, o);
    for (; j < dv; ++j) recurrent_column(state, dk, dv, j, q, k, v, scale, decay, beta, o);
  }
}

// For T consecutive tokens from t0: u_t = S0ᵀk_t into U rows and S0ᵀq_t into their output rows,
// summed over the state rows in order; each state row block is loaded once for the T tokens
// (4·T accumulators: 8 AVX2 registers at T = 2, 16 AVX-512 registers at T = 4).
template <int T>
inline void state_reads(const DeltaHead& h, int64_t t0, float* U, const float* state, int64_t dk, int64_t dv) {
  const float* kt[T];
  const float* qt[T];
  float* ot[T];
  GB_UNROLL
  for (int t = 0; t < T; ++t) {
    kt[t] = h.k + (t0 + t) * h.qk_stride;
    qt[t] = h.q + (t0 + t) * h.qk_stride;
    ot[t] = h.out + (t0 + t) * h.out_stride;
  }
  int64_t j = 0;
  for (; j + kLaneBlock <= dv; j += kLaneBlock) {
    Vec au[T][2], ao[T][2], s0, s1, ck, cq;
    GB_UNROLL
    for (int t = 0; t < T; ++t) au[t][0] = au[t][1] = ao[t][0] = ao[t][1] = Vec{};
    for (int64_t r = 0; r < dk; ++r) {
      vload(s0, state + r * dv + j);
      vload(s1, state + r * dv + j + kVec);
      GB_UNROLL
      for (int t = 0; t < T; ++t) {
        vsplat(ck, kt[t][r]);
        vsplat(cq, qt[t][r]);
        au[t][0] += ck * s0;
        au[t][1] += ck * s1;
        ao[t][0] += cq * s0;
        ao[t][1] += cq * s1;
      }
    }
    GB_UNROLL
    for (int t = 0; t < T; ++t) {
      vstore(U + t * dv + j, au[t][0]);
      vstore(U + t * dv + j + kVec, au[t][1]);
      vstore(ot[t] + j, ao[t][0]);
      vstore(ot[t] + j + kVec, ao[t][1]);
    }
  }
  for (; j < dv; ++j) {
    GB_UNROLL
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

// a·c_m and b·c_m for the M rows c_m = c + m·ld (n floats each): kVec partial sums per product
// (2·M independent chains), then across the lanes.
template <int M>
inline void dot_pairs(const float* a, const float* b, const float* c, int64_t ld, int64_t n, float* ra, float* rb) {
  Vec xa[M], xb[M], va, vb, vc;
  GB_UNROLL
  for (int m = 0; m < M; ++m) xa[m] = xb[m] = Vec{};
  int64_t i = 0;
  for (; i + kVec <= n; i += kVec) {
    vload(va, a + i);
    vload(vb, b + i);
    GB_UNROLL
    for (int m = 0; m < M; ++m) {
      vload(vc, c + m * ld + i);
      xa[m] += va * vc;
      xb[m] += vb * vc;
    }
  }
  GB_UNROLL
  for (int m = 0; m < M; ++m) {
    float sa = hsum(xa[m]), sb = hsum(xb[m]);
    for (int64_t e = i; e < n; ++e) {
      sa += a[e] * c[m * ld + e];
      sb += b[e] * c[m * ld + e];
    }
    ra[m] = sa;
    rb[m] = sb;
  }
}

// y[dv] += sign · Σ_{s<n} c[s]·X[s, :] (X rows dv apart), s in order per element; four vectors of
// y in registers (four chains), then one, then single lanes.
inline void blocked_axpys(float* y, const float* c, const float* X, int64_t n, int64_t dv, float sign) {
  int64_t j = 0;
  Vec a, x;
  for (; j + 4 * kVec <= dv; j += 4 * kVec) {
    Vec acc[4];
    GB_UNROLL
    for (int i = 0; i < 4; ++i) vload(acc[i], y + j + i * kVec);
    for (int64_t s = 0; s < n; ++s) {
      vsplat(a, sign * c[s]);
      GB_UNROLL
      for (int i = 0; i < 4; ++i) {
        vload(x, X + s * dv + j + i * kVec);
        acc[i] += a * x;
      }
    }
    GB_UNROLL
    for (int i = 0; i < 4; ++i) vstore(y + j + i * kVec, acc[i]);
  }
  for (; j + kVec <= dv; j += kVec) {
    Vec acc;
    vload(acc, y + j);
    for (int64_t s = 0; s < n; ++s) {
      vsplat(a, sign * c[s]);
      vload(x, X + s * dv + j);
      acc += a * x;
    }
    vstore(y + j, acc);
  }
  for (; j < dv; ++j) {
    float acc = y[j];
    for (int64_t s = 0; s < n; ++s) acc += (sign * c[s]) * X[s * dv + j];
    y[j] = acc;
  }
}

// R state rows (dv apart), lanes [j, j + kLaneBlock): row = e_last·row + Σ_s coef[r·C + s]·U[s, :],
// s in order per element; each U row block loaded once for the R rows (2·R chains).
template <int R>
inline void state_rows_update(float* S, int64_t dv, float e_last, const float* coef, int64_t C, const float* U,
                              int64_t L) {
  Vec acc[R][2], u0, u1, c;
  GB_UNROLL
  for (int r = 0; r < R; ++r) {
    vload(acc[r][0], S + r * dv);
    vload(acc[r][1], S + r * dv + kVec);
    acc[r][0] *= e_last;
    acc[r][1] *= e_last;
  }
  for (int64_t s = 0; s < L; ++s) {
    vload(u0, U + s * dv);
    vload(u1, U + s * dv + kVec);
    GB_UNROLL
    for (int r = 0; r < R; ++r) {
      vsplat(c, coef[r * C + s]);
      acc[r][0] += c * u0;
      acc[r][1] += c * u1;
    }
  }
  GB_UNROLL
  for (int r = 0; r < R; ++r) {
    vstore(S + r * dv, acc[r][0]);
    vstore(S + r * dv + kVec, acc[r][1]);
  }
}

// State rows [r0, r0 + R) at the chunk end, all lanes.
template <int R>
inline void state_rows_end(float* state, int64_t r0, int64_t dv, float e_last, const float* coef, int64_t C,
                           const float* U, int64_t L) {
  int64_t j = 0;
  for (; j + kLaneBlock <= dv; j += kLaneBlock)
    state_rows_update<R>(state + r0 * dv + j, dv, e_last, coef, C, U + j, L);
  for (; j < dv; ++j) {
    GB_UNROLL
    for (int r = 0; r < R; ++r) {
      float acc = state[(r0 + r) * dv + j] * e_last;
      for (int64_t s = 0; s < L; ++s) acc += coef[r * C + s] * U[s * dv + j];
      state[(r0 + r) * dv + j] = acc;
    }
  }
}

void gated_delta_chunked(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state, int64_t chunk,
                         float* scratch) {
  constexpr int R = kDeltaRowGroup;
  const int64_t C = chunk;
  float* A = scratch;      // [C, C] β_i e^{G_i−G_s} k_i·k_s for s < i
  float* B = A + C * C;    // [C, C] e^{G_i−G_s} (q_i / sqrt(dk))·k_s for s <= i
  float* G = B + C * C;    // [C] cumulative log decay within the chunk
  float* U = G + C;        // [C, dv] the values each token writes (u_i)
  float* Wd = U + C * dv;  // [C] e^{G_L−G_s}: the decay from token s to the chunk end
  float* coef = Wd + C;    // [R, C] e^{G_L−G_s}·k_s[r] for the R state rows being updated
  const float scale = 1.0f / __builtin_sqrtf(static_cast<float>(dk));
  for (int64_t c0 = 0; c0 < n; c0 += C) {
    const int64_t L = (n - c0 < C ? n - c0 : C);
    auto q = [&](int64_t i) { return h.q + (c0 + i) * h.qk_stride; };
    auto k = [&](int64_t i) { return h.k + (c0 + i) * h.qk_stride; };
    auto beta = [&](int64_t i) { return h.beta[(c0 + i) * h.gb_stride]; };
    float acc = 0.0f;
    for (int64_t i = 0; i < L; ++i) G[i] = (acc += h.g[(c0 + i) * h.gb_stride]);
    // k_i·k_s and q_i·k_s for s <= i, four s at a time (A's diagonal is written but never read).
    for (int64_t i = 0; i < L; ++i) {
      float* Ai = A + i * C;
      float* Bi = B + i * C;
      int64_t s = 0;
      for (; s + 4 <= i + 1; s += 4) dot_pairs<4>(k(i), q(i), k(s), h.qk_stride, dk, Ai + s, Bi + s);
      for (; s <= i; ++s) dot_pairs<1>(k(i), q(i), k(s), h.qk_stride, dk, Ai + s, Bi + s);
      for (s = 0; s <= i; ++s) {
        const float d = __builtin_expf(G[i] - G[s]);
        Ai[s] *= beta(i) * d;
        Bi[s] *= scale * d;
      }
    }
    // Right-hand side β_i (v_i − e^{G_i} S0ᵀk_i) and the state's part of the output e^{G_i} S0ᵀq_i,
    // kTokTile tokens at a time (each state row loaded once for them).
    int64_t i = 0;
    for (; i + kTokTile <= L; i += kTokTile) state_reads<kTokTile>(h, c0 + i, U + i * dv, state, dk, dv);
    for (; i < L; ++i) state_reads<1>(h, c0 + i, U + i * dv, state, dk, dv);
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
    // output o_i += Σ_{s<=i} B_is u_s: both accumulate blocks of lanes in registers over s.
    for (int64_t t = 1; t < L; ++t) blocked_axpys(U + t * dv, A + t * C, U, t, dv, -1.0f);
    for (int64_t t = 0; t < L; ++t) blocked_axpys(h.out + (c0 + t) * h.out_stride, B + t * C, U, t + 1, dv, 1.0f);
    // State at the chunk end: S = e^{G_L}·S0 + Σ_s e^{G_L−G_s} k_s u_sᵀ, R rows at a time, each
    // state row block loaded and stored once.
    const float e_last = __builtin_expf(G[L - 1]);
    for (int64_t t = 0; t < L; ++t) Wd[t] = __builtin_expf(G[L - 1] - G[t]);
    int64_t r0 = 0;
    for (; r0 + R <= dk; r0 += R) {
      GB_UNROLL
      for (int r = 0; r < R; ++r) {
        for (int64_t t = 0; t < L; ++t) coef[r * C + t] = Wd[t] * k(t)[r0 + r];
      }
      state_rows_end<R>(state, r0, dv, e_last, coef, C, U, L);
    }
    for (; r0 < dk; ++r0) {
      for (int64_t t = 0; t < L; ++t) coef[t] = Wd[t] * k(t)[r0];
      state_rows_end<1>(state, r0, dv, e_last, coef, C, U, L);
    }
  }
}
#undef GB_UNROLL

// The ops of a Gated DeltaNet token mixer (Qwen3.5 / Qwen3-Next linear-attention layers): causal
// depthwise conv1d with a carried window, L2 norm, the gated delta rule (token-by-token recurrence
// for decode, chunked form for prefill), the gated RMSNorm on its output, and the sigmoid output
// gate of Qwen3.5's full-attention layers. Every op has a plain scalar reference for tests.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gb::ops {

// One sequence's causal depthwise conv over time followed by SiLU, for n consecutive tokens:
//   out[t, c] = silu(Σ_j w[c, j] · in(t - (kernel-1) + j, c)),  in(τ) = x[τ, c] for τ >= 0,
//   state[kernel-1 + τ, c] for τ < 0 (the inputs of the sequence's previous tokens; zeros at the start).
// Afterwards state holds the last kernel-1 inputs. x[n, channels] f32, w[channels, kernel] f32,
// state[kernel-1, channels] f32 in/out, out[n, channels] f32 (not aliasing x); the rows of x, state
// and out are `stride` floats apart (>= channels), so a range of channels is one call on offset
// pointers (channels are independent: the engine splits them over threads).
void causal_conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t stride, const float* w, int64_t kernel,
                        float* state, float* out);

// Double-precision reference of causal_conv1d_silu (rows `channels` apart).
void causal_conv1d_silu_ref(const float* x, int64_t n, int64_t channels, const float* w, int64_t kernel, float* state,
                            float* out);

// x[n, width] *= 1 / sqrt(Σ x² + eps) per row, in place (Hugging Face's l2norm; llama.cpp divides
// by max(‖x‖, eps) instead — the fixture README measures the difference, far below tolerance).
void l2_norm(float* x, int64_t n, int64_t width, float eps);

// One head of the gated delta rule over one sequence's n consecutive tokens, state S[dk, dv]:
//   S ← exp(g_t)·S;  u_t = β_t·(v_t − Sᵀk_t);  S ← S + k_t u_tᵀ;  o_t = Sᵀ(q_t / sqrt(dk)).
// q, k: rows of dk f32 (already L2-normalised) with row stride qk_stride; v: rows of dv f32, stride
// v_stride; g (log decay, <= 0) and beta: one f32 per token with stride gb_stride; out: rows of dv
// f32, stride out_stride; state[dk, dv] f32 in/out (row i = key dim i).
struct DeltaHead {
  const float* q;
  const float* k;
  int64_t qk_stride;
  const float* v;
  int64_t v_stride;
  const float* g;
  const float* beta;
  int64_t gb_stride;
  float* out;
  int64_t out_stride;
};

// Token-by-token recurrence, updating state in place (decode; also the numerics every other form
// is tested against).
void gated_delta_recurrent(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state);

// Chunked form (prefill): tokens in chunks of `chunk`; within a chunk, with cumulative log decay G
// and the state S0 at the chunk start, the written values U solve the unit lower-triangular system
//   u_i + β_i Σ_{s<i} e^{G_i−G_s}(k_i·k_s) u_s = β_i (v_i − e^{G_i} S0ᵀk_i)
// (the WY / UT-transform form of the reference implementations, solved by forward substitution),
// then o_i = e^{G_i} S0ᵀq_i + Σ_{s<=i} e^{G_i−G_s}(q_i·k_s) u_s and S = e^{G_L}S0 + Σ_s e^{G_L−G_s} k_s u_sᵀ.
// Only decay differences within a chunk are exponentiated (all <= 1), so nothing overflows.
// scratch: gated_delta_chunk_scratch(chunk, dv) floats.
void gated_delta_chunked(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state, int64_t chunk,
                         float* scratch);
size_t gated_delta_chunk_scratch(int64_t chunk, int64_t dv);
// State rows updated together at a chunk's end (their coefficients share the scratch).
inline constexpr int kDeltaRowGroup = 4;

// Double-precision scalar recurrence (state read and written as f32) for tests.
void gated_delta_ref(const DeltaHead& h, int64_t n, int64_t dk, int64_t dv, float* state);

// out[n, width] = rms_norm(x)·w·silu(z) per row (Qwen3.5's RMSNormGated on the delta-rule output;
// w is used as stored, not 1 + w). Sum of squares in double like rms_norm. out may alias x.
void gated_rms_norm(const float* x, const float* z, const float* w, int64_t n, int64_t width, float eps, float* out);
void gated_rms_norm_ref(const float* x, const float* z, const float* w, int64_t n, int64_t width, float eps,
                        float* out);

// x[n] *= sigmoid(gate[n]) (Qwen3.5 full attention: heads gated before o_proj).
void sigmoid_mul(float* x, const float* gate, int64_t n);

// softplus(x) = log(1 + e^x), linear above 20 like torch.
float softplus(float x);

}  // namespace gb::ops

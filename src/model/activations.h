// Activations: every per-step buffer of the forward pass, allocated once for the largest batch.
// Nothing in the layer loop allocates; rows beyond the step's n_tokens are unused.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace gb {

struct VariantStep;

struct Activations {
  Activations(const ModelConfig& c, int32_t max_tokens, int32_t n_threads);

  int32_t max_tokens;
  std::vector<float> x;           // [max_tokens, n_embd] f32 residual stream (resid_pre/mid/post in place)
  std::vector<float> xn;          // [max_tokens, n_embd] f32 RMSNorm output feeding attention / MLP
  std::vector<float> q;           // [max_tokens, n_heads · head_dim] f32
  std::vector<float> k;           // [max_tokens, n_kv_heads · head_dim] f32 (copied into the KV cache)
  std::vector<float> v;           // [max_tokens, n_kv_heads · head_dim] f32
  std::vector<float> attn;        // [max_tokens, n_heads · head_dim] f32 attention heads, o_proj input
  std::vector<float> sink_mass;   // [max_tokens, n_heads] f32 attention mass on the first key positions (attention
                                  // sinks: written only for the rows the step table asks for, StepTable::sink_rows)
  std::vector<float> attn_out;    // [max_tokens, n_embd] f32 o_proj output (hook attn_out)
  std::vector<float> gate;        // [max_tokens, n_ff] f32 gate_proj output, then act(gate)·up (hook mlp_act)
  std::vector<float> up;          // [max_tokens, n_ff] f32 up_proj output
  std::vector<float> mlp_out;     // [max_tokens, n_embd] f32 down_proj output (hook mlp_out)
  std::vector<float> rope_cos;    // [max_tokens, rope_dims / 2] f32 for this step's positions
  std::vector<float> rope_sin;    // [max_tokens, rope_dims / 2] f32
  std::vector<float> out_norm;    // [max_tokens, n_embd] f32 final norm of the output rows (hook final_norm)
  std::vector<float> scores;      // [n_threads, KvCache::attend_scratch_floats] f32 attention tile scratch (sized on
                                  // first use per cache geometry)
  std::vector<int32_t> all_rows;  // [max_tokens] 0, 1, 2, ...: the row ids of per-layer hook tensors
  std::vector<double> inv_freq;   // [rope_dims / 2] RoPE frequencies incl. scaling

  // Hybrid models only (empty otherwise). nk/nv/dk/dv: linear-attention heads and head dims;
  // conv_dim = 2·nk·dk + nv·dv.
  std::vector<float> q_gate;     // [max_tokens, n_heads · 2 · head_dim] f32 q_proj output (query | gate per head)
  std::vector<float> attn_gate;  // [max_tokens, n_heads · head_dim] f32 gate of the attention heads
  std::vector<float> lin_qkv;    // [max_tokens, conv_dim] f32 in_proj_qkv output (conv input)
  std::vector<float> lin_conv;   // [max_tokens, conv_dim] f32 conv output: q | k (L2-normalised in place) | v
  std::vector<float> lin_z;      // [max_tokens, nv · dv] f32 in_proj_z output (norm gate)
  std::vector<float> lin_beta;   // [max_tokens, nv] f32 in_proj_b, then sigmoid
  std::vector<float> lin_g;      // [max_tokens, nv] f32 in_proj_a, then log decay −exp(A_log)·softplus(a + dt_bias)
  std::vector<float> lin_core;   // [max_tokens, nv · dv] f32 delta-rule output, then gated norm (out_proj input)
  std::vector<float> delta_scratch;  // [n_threads, ops::gated_delta_chunk_scratch(kDeltaChunk, dv)] f32
  std::vector<int32_t> seq_first;    // [max_tokens] first batch row of each batch sequence
  std::vector<int32_t> seq_count;    // [max_tokens] its number of rows in the batch

  // This step's weight variants (Model::prepare_variants): null when no row runs on a variant.
  const VariantStep* variants = nullptr;
};

// Chunk length of the delta rule's chunked (prefill) form, as in the reference implementations.
inline constexpr int64_t kDeltaChunk = 64;

}  // namespace gb

// ModelWeights: every tensor the layer loop reads, as views into the memory-mapped files
// (matrices in their storage dtype) or small f32 copies (norm weights and biases).
#pragma once

#include <vector>

#include "ops/matmul.h"

namespace gb {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd] f32, input_layernorm / attn_norm
  // Attention layers (LayerKind::kAttention).
  ops::Weight wq;             // [n_heads · head_dim, n_embd]; attn_output_gate: [n_heads · 2 · head_dim, n_embd],
                              // per head head_dim query rows then head_dim gate rows
  ops::Weight wk;             // [n_kv_heads · head_dim, n_embd]
  ops::Weight wv;             // [n_kv_heads · head_dim, n_embd]
  ops::Weight wo;             // [n_embd, n_heads · head_dim]
  const float* bq = nullptr;  // [n_heads · head_dim] f32 or null (Qwen2 / attention_bias)
  const float* bk = nullptr;  // [n_kv_heads · head_dim] f32 or null
  const float* bv = nullptr;  // [n_kv_heads · head_dim] f32 or null
  const float* bo = nullptr;  // [n_embd] f32 or null (Llama attention_bias)
  const float* q_norm = nullptr;  // [head_dim] f32 or null (Qwen3)
  const float* k_norm = nullptr;  // [head_dim] f32 or null (Qwen3)
  // Gated DeltaNet layers (LayerKind::kLinearAttention; Qwen3.5). Value heads in the file's order
  // (ModelConfig::lin_v_tiled), consistently across every tensor below.
  ops::Weight lin_qkv;                 // [2 · nk · dk + nv · dv, n_embd] in_proj_qkv / attn_qkv
  ops::Weight lin_z;                   // [nv · dv, n_embd] in_proj_z / attn_gate (output gate of the norm)
  ops::Weight lin_b;                   // [nv, n_embd] in_proj_b / ssm_beta (β = sigmoid)
  ops::Weight lin_a;                   // [nv, n_embd] in_proj_a / ssm_alpha (decay input)
  ops::Weight lin_out;                 // [n_embd, nv · dv] out_proj / ssm_out
  const float* lin_conv = nullptr;     // [2 · nk · dk + nv · dv, conv_kernel] f32 depthwise conv1d taps
  const float* lin_dt_bias = nullptr;  // [nv] f32
  const float* lin_a_neg = nullptr;    // [nv] f32 −exp(A_log) (GGUF ssm_a stores it so)
  const float* lin_norm = nullptr;     // [dv] f32 gated RMSNorm weight (used as stored, not 1 + w)
  const float* ffn_norm =
      nullptr;         // [n_embd] f32, post_attention_layernorm / ffn_norm (Qwen3.5: 1 + w, as GGUF stores it)
  ops::Weight w_gate;  // [n_ff, n_embd]
  ops::Weight w_up;    // [n_ff, n_embd]
  ops::Weight w_down;  // [n_embd, n_ff]
};

struct ModelWeights {
  ops::Weight token_embd;              // [vocab, n_embd] (rows read with dequantize_row)
  std::vector<LayerWeights> layers;    // [n_layers]
  const float* output_norm = nullptr;  // [n_embd] f32
  ops::Weight output;                  // [vocab, n_embd]; = token_embd when tied
};

// The dtype a model summary names: the first layer's q projection's (its MLP's up projection's when
// it has none, as a hybrid model's linear-attention layer); f32 for a model without layers.
DType representative_dtype(const ModelWeights& w);

}  // namespace gb

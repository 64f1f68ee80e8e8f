// ModelWeights: every tensor the layer loop reads, as views into the memory-mapped files
// (matrices in their storage dtype) or small f32 copies (norm weights and biases).
#pragma once

#include <vector>

#include "ops/matmul.h"

namespace gb {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd] f32, input_layernorm / attn_norm
  ops::Weight wq;                    // [n_heads · head_dim, n_embd]
  ops::Weight wk;                    // [n_kv_heads · head_dim, n_embd]
  ops::Weight wv;                    // [n_kv_heads · head_dim, n_embd]
  ops::Weight wo;                    // [n_embd, n_heads · head_dim]
  const float* bq = nullptr;         // [n_heads · head_dim] f32 or null (Qwen2 / attention_bias)
  const float* bk = nullptr;         // [n_kv_heads · head_dim] f32 or null
  const float* bv = nullptr;         // [n_kv_heads · head_dim] f32 or null
  const float* bo = nullptr;         // [n_embd] f32 or null (Llama attention_bias)
  const float* q_norm = nullptr;     // [head_dim] f32 or null (Qwen3)
  const float* k_norm = nullptr;     // [head_dim] f32 or null (Qwen3)
  const float* ffn_norm = nullptr;   // [n_embd] f32, post_attention_layernorm / ffn_norm
  ops::Weight w_gate;                // [n_ff, n_embd]
  ops::Weight w_up;                  // [n_ff, n_embd]
  ops::Weight w_down;                // [n_embd, n_ff]
};

struct ModelWeights {
  ops::Weight token_embd;             // [vocab, n_embd] (rows read with dequantize_row)
  std::vector<LayerWeights> layers;   // [n_layers]
  const float* output_norm = nullptr;  // [n_embd] f32
  ops::Weight output;                 // [vocab, n_embd]; = token_embd when tied
};

}  // namespace gb

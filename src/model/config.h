// ModelConfig: the shape and variant switches of a model, parsed in one place from a Hugging Face
// config.json (+ generation_config.json) or from GGUF metadata.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/rope.h"

namespace gb {

// The layer loop a model runs. Llama, Qwen2 (q/k/v bias) and Qwen3 (per-head q/k RMSNorm) share
// one loop in model/llama.cc; the differences are the switches below, not subclasses. Qwen3.5
// (hybrid: Gated DeltaNet + gated full attention) has its own loop in model/qwen35.cc.
enum class Arch : uint8_t { kLlama, kQwen2, kQwen3, kQwen35 };

// The token mixer of one layer. The KV cache allocates paged K/V only for kAttention layers;
// kLinearAttention layers (Gated DeltaNet) keep a fixed-size recurrent state per sequence instead.
enum class LayerKind : uint8_t { kAttention, kLinearAttention };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string arch_name;  // as the file says it: "LlamaForCausalLM", "qwen2", ...
  int32_t n_layers = 0;
  int32_t n_embd = 0;      // hidden size
  int32_t n_heads = 0;     // query heads
  int32_t n_kv_heads = 0;  // key/value heads (GQA: query head h reads kv head h / (n_heads / n_kv_heads))
  int32_t head_dim = 0;    // may differ from n_embd / n_heads (Qwen3)
  int32_t n_ff = 0;        // MLP intermediate size
  int32_t vocab = 0;       // rows of the embedding / lm_head (may exceed the tokenizer's vocabulary)
  int32_t max_pos = 0;     // max_position_embeddings / context_length
  float rms_eps = 1e-5f;

  double rope_theta = 10000.0;
  ops::RopeStyle rope_style = ops::RopeStyle::kNeox;
  int32_t rope_dims = 0;                  // rotated dims per head (head_dim here)
  std::vector<float> rope_freq_divisors;  // [rope_dims / 2]: llama3 / linear scaling; empty = none

  bool tied_embeddings = false;       // lm_head = token embedding matrix
  bool tied_embeddings_known = true;  // false: config.json did not say; tied iff lm_head.weight is absent
  bool qkv_bias = false;              // Qwen2, or Llama with attention_bias
  bool o_bias = false;                // Llama with attention_bias
  bool qk_norm = false;               // Qwen3: RMSNorm over each head of q and k before RoPE

  int32_t bos_id = -1;           // -1: none
  std::vector<int32_t> eos_ids;  // generation stops on any of these

  std::vector<LayerKind> layer_kinds;  // [n_layers]

  // Qwen3.5 full attention: q_proj yields [query | gate] per head, heads · sigmoid(gate) before o_proj.
  bool attn_output_gate = false;
  // Gated DeltaNet (kLinearAttention layers): nk key heads of dk dims, nv value heads of dv dims,
  // a depthwise causal conv of lin_conv_kernel taps over the q|k|v channels.
  int32_t lin_k_heads = 0;
  int32_t lin_v_heads = 0;
  int32_t lin_k_dim = 0;
  int32_t lin_v_dim = 0;
  int32_t lin_conv_kernel = 0;
  // Value head j reads key head j % nk (GGUF: the converter reorders value heads to this tiled
  // order) instead of Hugging Face's grouped j / (nv / nk).
  bool lin_v_tiled = false;

  int64_t q_dim() const { return int64_t{n_heads} * head_dim; }
  int64_t kv_dim() const { return int64_t{n_kv_heads} * head_dim; }
  int64_t lin_key_dim() const { return int64_t{lin_k_heads} * lin_k_dim; }
  int64_t lin_value_dim() const { return int64_t{lin_v_heads} * lin_v_dim; }
  int64_t lin_conv_dim() const { return 2 * lin_key_dim() + lin_value_dim(); }  // q | k | v channels
  int32_t n_layers_of(LayerKind k) const;
  bool hybrid() const { return n_layers_of(LayerKind::kLinearAttention) > 0; }
  // Floats of one sequence's recurrent state in one linear-attention layer: conv window
  // [kernel-1, conv_dim] then delta state [nv, dk, dv].
  int64_t lin_conv_state_floats() const { return int64_t{lin_conv_kernel - 1} * lin_conv_dim(); }
  int64_t lin_delta_state_floats() const { return int64_t{lin_v_heads} * lin_k_dim * lin_v_dim; }

  // inv_freq[rope_dims / 2] = theta^(-2i / rope_dims) / divisor[i], in double.
  std::vector<double> rope_inv_freq() const;

  // Checks the shape is consistent (positive sizes, heads divide, even rotary dims...).
  Status validate() const;
};

// From a Hugging Face model directory's config.json and (optional) generation_config.json text.
// Errors name the key and what was expected.
Result<ModelConfig> parse_hf_config(const nlohmann::json& config, const nlohmann::json* generation_config);

// From GGUF metadata (general.architecture = llama | qwen2 | qwen3 | qwen35 and "<arch>.*" keys).
// vocab_rows: rows of token_embd (used when <arch>.vocab_size is absent); rope_freqs: the
// optional llama3 per-frequency divisors tensor (rope_freqs.weight) already read as f32.
Result<ModelConfig> parse_gguf_config(const std::map<std::string, nlohmann::json>& metadata, int64_t vocab_rows,
                                      const std::vector<float>* rope_freqs);

}  // namespace gb

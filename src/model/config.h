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
// one loop in model/llama.cc; the differences are the switches below, not subclasses.
enum class Arch : uint8_t { kLlama, kQwen2, kQwen3 };

// The token mixer of one layer. Hybrid models (Qwen3.5: Gated DeltaNet layers with recurrent
// state beside the KV cache) will add kinds here; the KV cache only allocates kAttention layers.
enum class LayerKind : uint8_t { kAttention };

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
  int32_t rope_dims = 0;                    // rotated dims per head (head_dim here)
  std::vector<float> rope_freq_divisors;    // [rope_dims / 2]: llama3 / linear scaling; empty = none

  bool tied_embeddings = false;  // lm_head = token embedding matrix
  bool tied_embeddings_known = true;  // false: config.json did not say; tied iff lm_head.weight is absent
  bool qkv_bias = false;         // Qwen2, or Llama with attention_bias
  bool o_bias = false;           // Llama with attention_bias
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k before RoPE

  int32_t bos_id = -1;           // -1: none
  std::vector<int32_t> eos_ids;  // generation stops on any of these

  std::vector<LayerKind> layer_kinds;  // [n_layers]

  int64_t q_dim() const { return int64_t{n_heads} * head_dim; }
  int64_t kv_dim() const { return int64_t{n_kv_heads} * head_dim; }

  // inv_freq[rope_dims / 2] = theta^(-2i / rope_dims) / divisor[i], in double.
  std::vector<double> rope_inv_freq() const;

  // Checks the shape is consistent (positive sizes, heads divide, even rotary dims...).
  Status validate() const;
};

// From a Hugging Face model directory's config.json and (optional) generation_config.json text.
// Errors name the key and what was expected.
Result<ModelConfig> parse_hf_config(const nlohmann::json& config, const nlohmann::json* generation_config);

// From GGUF metadata (general.architecture = llama | qwen2 | qwen3 and "<arch>.*" keys).
// vocab_rows: rows of token_embd (used when <arch>.vocab_size is absent); rope_freqs: the
// optional llama3 per-frequency divisors tensor (rope_freqs.weight) already read as f32.
Result<ModelConfig> parse_gguf_config(const std::map<std::string, nlohmann::json>& metadata, int64_t vocab_rows,
                                      const std::vector<float>* rope_freqs);

}  // namespace gb

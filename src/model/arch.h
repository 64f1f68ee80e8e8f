// The layer loops, one per architecture family (internal to gb_model). Each is a straight loop
// over layers built from the ops in src/ops, calling the hook points where tensors are produced.
#pragma once

#include "core/thread_pool.h"
#include "model/activations.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/hooks.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace gb {

// Shared by the loops (blocks.cc). embed_tokens: token embeddings into acts.x, then the embed hook.
// residual_and_mlp: from attn_out (the token mixer's output in acts.attn_out) through the residual
// add and the SwiGLU MLP to resid_post, with those five hook points. output_head: the final norm
// of the output rows, lm_head, and the final_norm / logits hooks.
void embed_tokens(const ModelConfig& c, const ModelWeights& w, Activations& a, const Batch& batch, const Hooks* hooks);
// prepare_qk: per token of acts.q / acts.k (and acts.v), the q/k/v biases (Qwen2), each head's
// q/k RMSNorm (Qwen3, Qwen3.5), then RoPE over the first rope_dims of each head with the step's
// acts.rope_cos / rope_sin.
void prepare_qk(const ModelConfig& c, const LayerWeights& L, Activations& a, ThreadPool& pool, int64_t n);
// paged_attention: stores this step's k/v (acts.k, acts.v) into layer il's cache slots, then
// attends every (token, query head) over its own sequence: acts.q -> acts.attn. When the step
// table asks for attention sinks at il (StepTable::sink_rows), those rows' heads also write their
// mass on the first key positions into acts.sink_mass, handed to StepTable::apply_sinks.
void paged_attention(const ModelConfig& c, int32_t il, Activations& a, ThreadPool& pool, const Batch& batch,
                     KvCache& cache, const Hooks* hooks);
// Query rows of paged_attention's tiles (the GQA group × ops::attend_tile_positions): acts.scores
// holds cache.attend_scratch_floats(attention_tile_rows(c)) floats per thread.
inline int64_t attention_tile_rows(const ModelConfig& c) {
  const int64_t group = c.n_heads / c.n_kv_heads;
  return ops::attend_tile_positions(group) * group;
}
void residual_and_mlp(const ModelConfig& c, const LayerWeights& L, int32_t il, Activations& a, ThreadPool& pool,
                      const Batch& batch, const Hooks* hooks);
void output_head(const ModelConfig& c, const ModelWeights& w, Activations& a, ThreadPool& pool, const Batch& batch,
                 const Hooks* hooks, float* logits);

// Llama, Mistral, Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm). The batch is already validated.
// logits: [batch.n_out(), vocab] f32.
void forward_llama(const ModelConfig& c, const ModelWeights& w, Activations& a, ThreadPool& pool, const Batch& batch,
                   KvCache& cache, const Hooks* hooks, float* logits);

// Qwen3.5 hybrid: Gated DeltaNet layers (recurrent state per sequence in the cache) and gated
// full-attention layers. Also needs acts.seq_first / seq_count filled by Model::prepare_recurrent.
void forward_qwen35(const ModelConfig& c, const ModelWeights& w, Activations& a, ThreadPool& pool, const Batch& batch,
                    KvCache& cache, const Hooks* hooks, float* logits);

}  // namespace gb

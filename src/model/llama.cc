// The Llama-family layer loop: Llama 2/3, Mistral, TinyLlama, SmolLM, Qwen2 (q/k/v bias) and
// Qwen3 (per-head q/k RMSNorm before RoPE). Pre-norm blocks: x += attn(norm(x)); x += mlp(norm(x)).
#include <cmath>

#include "model/arch.h"
#include "model/parallel.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"

namespace gb {

void forward_llama(const ModelConfig& c, const ModelWeights& w, Activations& a, ThreadPool& pool, const Batch& batch,
                   KvCache& cache, const Hooks* hooks, float* logits) {
  const int64_t n = batch.n_tokens();
  const int64_t n_out = batch.n_out();
  const int64_t n_embd = c.n_embd, n_ff = c.n_ff, hd = c.head_dim;
  const int64_t n_heads = c.n_heads, n_kv = c.n_kv_heads, group = n_heads / n_kv;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), half = c.rope_dims / 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float eps = c.rms_eps;
  float* x = a.x.data();  // [n, n_embd] the residual stream

  const uint32_t global_mask = hooks != nullptr ? hooks->global_mask() : 0;
  const int32_t* all_rows = a.all_rows.data();

  for (int64_t t = 0; t < n; ++t) ops::dequantize_row(w.token_embd, batch.tokens[t], x + t * n_embd);
  hook_point(hooks, global_mask, HookPoint::kEmbed, -1, x, n, n_embd, all_rows, batch);

  // cos/sin of this step's positions, shared by every layer.
  ops::rope_tables(batch.positions.data(), n, a.inv_freq.data(), half, a.rope_cos.data(), a.rope_sin.data());

  for (int32_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& L = w.layers[il];
    const uint32_t mask = hooks != nullptr ? hooks->layer_mask(il) : 0;
    hook_point(hooks, mask, HookPoint::kResidPre, il, x, n, n_embd, all_rows, batch);

    // ---- attention ----
    parallel_for(pool, n, n * n_embd, [&](int64_t b, int64_t e, int) {
      ops::rms_norm(x + b * n_embd, L.attn_norm, e - b, n_embd, eps, a.xn.data() + b * n_embd);
    });
    ops::matmul(pool, a.xn.data(), n, L.wq, a.q.data());
    ops::matmul(pool, a.xn.data(), n, L.wk, a.k.data());
    ops::matmul(pool, a.xn.data(), n, L.wv, a.v.data());
    if (L.bq != nullptr) {
      ops::add_bias(a.q.data(), L.bq, n, qd);
      ops::add_bias(a.k.data(), L.bk, n, kvd);
      ops::add_bias(a.v.data(), L.bv, n, kvd);
    }
    if (L.q_norm != nullptr) {  // Qwen3: each head's q and k normalised on their own
      ops::rms_norm(a.q.data(), L.q_norm, n * n_heads, hd, eps, a.q.data());
      ops::rms_norm(a.k.data(), L.k_norm, n * n_kv, hd, eps, a.k.data());
    }
    ops::rope(a.q.data(), n, qd, n_heads, hd, c.rope_dims, a.rope_cos.data(), a.rope_sin.data(), c.rope_style);
    ops::rope(a.k.data(), n, kvd, n_kv, hd, c.rope_dims, a.rope_cos.data(), a.rope_sin.data(), c.rope_style);

    // Every token's k/v go into the cache before any token attends, so a prompt's tokens see
    // each other (causally) within this step.
    const ops::PagedKv kv = cache.layer(il);
    for (int64_t t = 0; t < n; ++t) ops::kv_store(kv, batch.slots[t], a.k.data() + t * kvd, a.v.data() + t * kvd);

    // One work item per (token, query head): each attends over its own sequence up to its position.
    parallel_for(pool, n * n_heads, n * n_heads * (batch.positions[n - 1] + 1) * hd, [&](int64_t b, int64_t e, int ti) {
      float* scores = a.scores.data() + static_cast<size_t>(ti) * cache.block_size();
      for (int64_t item = b; item < e; ++item) {
        const int64_t t = item / n_heads, h = item % n_heads;
        const BatchSeq& seq = batch.seqs[batch.seq_index[t]];
        ops::attend_head(a.q.data() + t * qd + h * hd, kv, h / group, seq.block_table.data(), batch.positions[t] + 1,
                         scale, a.attn.data() + t * qd + h * hd, scores);
      }
    });
    ops::matmul(pool, a.attn.data(), n, L.wo, a.attn_out.data());
    if (L.bo != nullptr) ops::add_bias(a.attn_out.data(), L.bo, n, n_embd);
    hook_point(hooks, mask, HookPoint::kAttnOut, il, a.attn_out.data(), n, n_embd, all_rows, batch);
    ops::add_inplace(x, a.attn_out.data(), n * n_embd);
    hook_point(hooks, mask, HookPoint::kResidMid, il, x, n, n_embd, all_rows, batch);

    // ---- MLP (SwiGLU) ----
    parallel_for(pool, n, n * n_embd, [&](int64_t b, int64_t e, int) {
      ops::rms_norm(x + b * n_embd, L.ffn_norm, e - b, n_embd, eps, a.xn.data() + b * n_embd);
    });
    ops::matmul(pool, a.xn.data(), n, L.w_gate, a.gate.data());
    ops::matmul(pool, a.xn.data(), n, L.w_up, a.up.data());
    parallel_for(pool, n * n_ff, n * n_ff * 8, [&](int64_t b, int64_t e, int) {
      ops::silu_mul(a.gate.data() + b, a.up.data() + b, e - b, a.gate.data() + b);
    });
    hook_point(hooks, mask, HookPoint::kMlpAct, il, a.gate.data(), n, n_ff, all_rows, batch);
    ops::matmul(pool, a.gate.data(), n, L.w_down, a.mlp_out.data());
    hook_point(hooks, mask, HookPoint::kMlpOut, il, a.mlp_out.data(), n, n_embd, all_rows, batch);
    ops::add_inplace(x, a.mlp_out.data(), n * n_embd);
    hook_point(hooks, mask, HookPoint::kResidPost, il, x, n, n_embd, all_rows, batch);
  }

  // Only the requested rows go through the final norm and lm_head (a prefill wants one).
  if (n_out == 0) return;
  for (int64_t i = 0; i < n_out; ++i) {
    ops::rms_norm(x + int64_t{batch.output_rows[i]} * n_embd, w.output_norm, 1, n_embd, eps, a.out_norm.data() + i * n_embd);
  }
  hook_point(hooks, global_mask, HookPoint::kFinalNorm, -1, a.out_norm.data(), n_out, n_embd, batch.output_rows.data(),
             batch);
  ops::matmul(pool, a.out_norm.data(), n_out, w.output, logits);
  hook_point(hooks, global_mask, HookPoint::kLogits, -1, logits, n_out, c.vocab, batch.output_rows.data(), batch);
}

}  // namespace gb

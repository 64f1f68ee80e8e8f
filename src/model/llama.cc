// The Llama-family layer loop: Llama 2/3, Mistral, TinyLlama, SmolLM, Qwen2 (q/k/v bias) and
// Qwen3 (per-head q/k RMSNorm before RoPE). Pre-norm blocks: x += attn(norm(x)); x += mlp(norm(x)).
#include "model/arch.h"
#include "model/parallel.h"
#include "model/variants.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"

namespace gb {

void forward_llama(const ModelConfig& c, const ModelWeights& w, Activations& a, ThreadPool& pool, const Batch& batch,
                   KvCache& cache, const Hooks* hooks, float* logits) {
  const int64_t n = batch.n_tokens();
  const int64_t n_embd = c.n_embd, half = c.rope_dims / 2;
  const float eps = c.rms_eps;
  float* x = a.x.data();  // [n, n_embd] the residual stream

  const int32_t* all_rows = a.all_rows.data();

  embed_tokens(c, w, a, batch, hooks);

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
    hook_point(hooks, mask, HookPoint::kAttnIn, il, a.xn.data(), n, n_embd, all_rows, batch);
    ops::matmul_multi(pool, a.xn.data(), n, {{&L.wq, a.q.data()}, {&L.wk, a.k.data()}, {&L.wv, a.v.data()}});
    apply_variant_deltas(a.variants, il, patch::Proj::kQ, a.xn.data(), a.q.data(), pool);
    apply_variant_deltas(a.variants, il, patch::Proj::kK, a.xn.data(), a.k.data(), pool);
    apply_variant_deltas(a.variants, il, patch::Proj::kV, a.xn.data(), a.v.data(), pool);
    prepare_qk(c, L, a, pool, n);
    paged_attention(c, il, a, pool, batch, cache, hooks);
    ops::matmul(pool, a.attn.data(), n, L.wo, a.attn_out.data());
    apply_variant_deltas(a.variants, il, patch::Proj::kO, a.attn.data(), a.attn_out.data(), pool);
    if (L.bo != nullptr) ops::add_bias(a.attn_out.data(), L.bo, n, n_embd);
    residual_and_mlp(c, L, il, a, pool, batch, hooks);
  }

  output_head(c, w, a, pool, batch, hooks, logits);
}

}  // namespace gb

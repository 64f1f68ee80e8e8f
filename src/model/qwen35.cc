// The Qwen3.5 hybrid layer loop (text part of Qwen3_5ForCausalLM / ...ForConditionalGeneration):
// pre-norm blocks x += mixer(norm(x)); x += mlp(norm(x)), where the token mixer is either a Gated
// DeltaNet (linear attention with a recurrent state per sequence) or gated full attention over
// the paged KV cache (q_proj also yields a per-head sigmoid gate; q/k RMSNorm; partial rotary).
#include <algorithm>
#include <cmath>

#include "model/arch.h"
#include "model/parallel.h"
#include "model/variants.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/linear_attention.h"
#include "ops/matmul.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"

namespace gb {

namespace {

// Gated full attention of layer il: a.xn [n, n_embd] → a.attn_out [n, n_embd].
void gated_attention(const ModelConfig& c, const LayerWeights& L, int32_t il, Activations& a, ThreadPool& pool,
                     const Batch& batch, KvCache& cache, const Hooks* hooks) {
  const int64_t n = batch.n_tokens();
  const int64_t hd = c.head_dim, n_heads = c.n_heads;
  const int64_t qd = c.q_dim();
  if (c.attn_output_gate) {
    // q_proj rows per head: head_dim query rows, then head_dim gate rows.
    ops::matmul(pool, a.xn.data(), n, L.wq, a.q_gate.data());
    apply_variant_deltas(a.variants, il, patch::Proj::kQ, a.xn.data(), a.q_gate.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* src = a.q_gate.data() + t * 2 * qd + h * 2 * hd;
        std::copy(src, src + hd, a.q.data() + t * qd + h * hd);
        std::copy(src + hd, src + 2 * hd, a.attn_gate.data() + t * qd + h * hd);
      }
    }
  } else {
    ops::matmul(pool, a.xn.data(), n, L.wq, a.q.data());
    apply_variant_deltas(a.variants, il, patch::Proj::kQ, a.xn.data(), a.q.data(), pool);
  }
  ops::matmul_multi(pool, a.xn.data(), n, {{&L.wk, a.k.data()}, {&L.wv, a.v.data()}});
  apply_variant_deltas(a.variants, il, patch::Proj::kK, a.xn.data(), a.k.data(), pool);
  apply_variant_deltas(a.variants, il, patch::Proj::kV, a.xn.data(), a.v.data(), pool);
  // Partial rotary: the first rope_dims of each head (text positions: M-RoPE = plain RoPE).
  prepare_qk(c, L, a, pool, n);
  paged_attention(c, il, a, pool, batch, cache, hooks);
  if (c.attn_output_gate) ops::sigmoid_mul(a.attn.data(), a.attn_gate.data(), n * qd);
  ops::matmul(pool, a.attn.data(), n, L.wo, a.attn_out.data());
  apply_variant_deltas(a.variants, il, patch::Proj::kO, a.attn.data(), a.attn_out.data(), pool);
}

// Gated DeltaNet of layer il: a.xn [n, n_embd] → a.attn_out [n, n_embd] (out_proj output), reading
// and updating every batch sequence's recurrent state (conv window, delta state) in place.
void gated_delta_net(const ModelConfig& c, const LayerWeights& L, int32_t il, Activations& a, ThreadPool& pool,
                     const Batch& batch, KvCache& cache) {
  const int64_t n = batch.n_tokens(), n_seqs = static_cast<int64_t>(batch.seqs.size());
  const int64_t nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_k_dim, dv = c.lin_v_dim;
  const int64_t key_dim = c.lin_key_dim(), vd = c.lin_value_dim(), conv_dim = c.lin_conv_dim();
  const int64_t kernel = c.lin_conv_kernel, ratio = nv / nk;
  ops::matmul_multi(pool, a.xn.data(), n,
                    {{&L.lin_qkv, a.lin_qkv.data()},
                     {&L.lin_z, a.lin_z.data()},
                     {&L.lin_b, a.lin_beta.data()},
                     {&L.lin_a, a.lin_g.data()}});
  apply_variant_deltas(a.variants, il, patch::Proj::kLinQkv, a.xn.data(), a.lin_qkv.data(), pool);
  apply_variant_deltas(a.variants, il, patch::Proj::kLinZ, a.xn.data(), a.lin_z.data(), pool);
  apply_variant_deltas(a.variants, il, patch::Proj::kLinB, a.xn.data(), a.lin_beta.data(), pool);
  apply_variant_deltas(a.variants, il, patch::Proj::kLinA, a.xn.data(), a.lin_g.data(), pool);
  for (int64_t t = 0; t < n; ++t) {
    float* beta = a.lin_beta.data() + t * nv;
    float* g = a.lin_g.data() + t * nv;
    for (int64_t h = 0; h < nv; ++h) {
      beta[h] = 1.0f / (1.0f + std::exp(-beta[h]));
      g[h] = L.lin_a_neg[h] * ops::softplus(g[h] + L.lin_dt_bias[h]);
    }
  }
  // Causal conv over each sequence's tokens, continuing from its window; one work item per
  // (sequence, block of channels), so that a single prefill uses every thread.
  constexpr int64_t kConvBlock = 256;
  const int64_t conv_blocks = (conv_dim + kConvBlock - 1) / kConvBlock;
  parallel_for(pool, n_seqs * conv_blocks, n * conv_dim * kernel, [&](int64_t b, int64_t e, int) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / conv_blocks, c0 = item % conv_blocks * kConvBlock;
      const int64_t first = a.seq_first[s], count = a.seq_count[s], width = std::min(kConvBlock, conv_dim - c0);
      if (count == 0) continue;
      ops::causal_conv1d_silu(a.lin_qkv.data() + first * conv_dim + c0, count, width, conv_dim,
                              L.lin_conv + c0 * kernel, kernel, cache.conv_state(il, batch.seqs[s].state_slot) + c0,
                              a.lin_conv.data() + first * conv_dim + c0);
    }
  });
  // q and k heads (the first 2·nk·dk channels of each row) L2-normalised in place.
  for (int64_t t = 0; t < n; ++t) ops::l2_norm(a.lin_conv.data() + t * conv_dim, 2 * nk, dk, 1e-6f);

  // One work item per (sequence, value head): chunked form for a prefill, the recurrence for a
  // decode token; both update the head's state in place.
  const size_t scratch_floats = ops::gated_delta_chunk_scratch(kDeltaChunk, dv);
  parallel_for(pool, n_seqs * nv, n * nv * dk * dv * 4, [&](int64_t b, int64_t e, int ti) {
    float* scratch = a.delta_scratch.data() + static_cast<size_t>(ti) * scratch_floats;
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / nv, h = item % nv;
      const int64_t first = a.seq_first[s], count = a.seq_count[s];
      if (count == 0) continue;
      const int64_t kh = c.lin_v_tiled ? h % nk : h / ratio;
      const float* row = a.lin_conv.data() + first * conv_dim;
      const ops::DeltaHead head{row + kh * dk,
                                row + key_dim + kh * dk,
                                conv_dim,
                                row + 2 * key_dim + h * dv,
                                conv_dim,
                                a.lin_g.data() + first * nv + h,
                                a.lin_beta.data() + first * nv + h,
                                nv,
                                a.lin_core.data() + first * vd + h * dv,
                                vd};
      float* state = cache.delta_state(il, batch.seqs[s].state_slot) + h * dk * dv;
      if (count == 1) {
        ops::gated_delta_recurrent(head, count, dk, dv, state);
      } else {
        ops::gated_delta_chunked(head, count, dk, dv, state, kDeltaChunk, scratch);
      }
    }
  });
  parallel_for(pool, n * nv, n * vd * 4, [&](int64_t b, int64_t e, int) {
    ops::gated_rms_norm(a.lin_core.data() + b * dv, a.lin_z.data() + b * dv, L.lin_norm, e - b, dv, c.rms_eps,
                        a.lin_core.data() + b * dv);
  });
  ops::matmul(pool, a.lin_core.data(), n, L.lin_out, a.attn_out.data());
  apply_variant_deltas(a.variants, il, patch::Proj::kLinOut, a.lin_core.data(), a.attn_out.data(), pool);
}

}  // namespace

void forward_qwen35(const ModelConfig& c, const ModelWeights& w, Activations& a, ThreadPool& pool, const Batch& batch,
                    KvCache& cache, const Hooks* hooks, float* logits) {
  const int64_t n = batch.n_tokens();
  const int64_t n_embd = c.n_embd, half = c.rope_dims / 2;
  const int64_t n_seqs = static_cast<int64_t>(batch.seqs.size());
  const float eps = c.rms_eps;
  float* x = a.x.data();  // [n, n_embd] the residual stream

  const int32_t* all_rows = a.all_rows.data();

  // A sequence starting at position 0 (new, or recomputed after preemption) starts from a zero state.
  for (int64_t s = 0; s < n_seqs; ++s) {
    if (a.seq_count[s] > 0 && batch.positions[a.seq_first[s]] == 0) cache.reset_state(batch.seqs[s].state_slot);
  }

  embed_tokens(c, w, a, batch, hooks);

  ops::rope_tables(batch.positions.data(), n, a.inv_freq.data(), half, a.rope_cos.data(), a.rope_sin.data());

  for (int32_t il = 0; il < c.n_layers; ++il) {
    const LayerWeights& L = w.layers[il];
    const uint32_t mask = hooks != nullptr ? hooks->layer_mask(il) : 0;
    hook_point(hooks, mask, HookPoint::kResidPre, il, x, n, n_embd, all_rows, batch);

    // ---- token mixer ----
    parallel_for(pool, n, n * n_embd, [&](int64_t b, int64_t e, int) {
      ops::rms_norm(x + b * n_embd, L.attn_norm, e - b, n_embd, eps, a.xn.data() + b * n_embd);
    });
    hook_point(hooks, mask, HookPoint::kAttnIn, il, a.xn.data(), n, n_embd, all_rows, batch);
    if (c.layer_kinds[il] == LayerKind::kLinearAttention) {
      gated_delta_net(c, L, il, a, pool, batch, cache);
    } else {
      gated_attention(c, L, il, a, pool, batch, cache, hooks);
    }
    residual_and_mlp(c, L, il, a, pool, batch, hooks);
  }

  for (int64_t s = 0; s < n_seqs; ++s) {
    if (a.seq_count[s] == 0) continue;
    cache.set_state_len(batch.seqs[s].state_slot, batch.positions[a.seq_first[s] + a.seq_count[s] - 1] + 1);
  }

  output_head(c, w, a, pool, batch, hooks, logits);
}

}  // namespace gb

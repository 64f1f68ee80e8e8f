// Allocation of the forward pass's buffers.
#include "model/activations.h"

#include "ops/linear_attention.h"

#include <numeric>

namespace gb {

Activations::Activations(const ModelConfig& c, int32_t max_t, int32_t n_threads)
    : max_tokens(max_t),
      x(size_t(max_t) * c.n_embd),
      xn(size_t(max_t) * c.n_embd),
      q(size_t(max_t) * c.q_dim()),
      k(size_t(max_t) * c.kv_dim()),
      v(size_t(max_t) * c.kv_dim()),
      attn(size_t(max_t) * c.q_dim()),
      sink_mass(size_t(max_t) * c.n_heads),
      attn_out(size_t(max_t) * c.n_embd),
      gate(size_t(max_t) * c.n_ff),
      up(size_t(max_t) * c.n_ff),
      mlp_out(size_t(max_t) * c.n_embd),
      rope_cos(size_t(max_t) * (c.rope_dims / 2)),
      rope_sin(size_t(max_t) * (c.rope_dims / 2)),
      out_norm(size_t(max_t) * c.n_embd),
      scores(size_t(n_threads) * 16),
      all_rows(max_t),
      inv_freq(c.rope_inv_freq()) {
  std::iota(all_rows.begin(), all_rows.end(), 0);
  if (!c.hybrid()) return;
  const size_t t = static_cast<size_t>(max_t);
  if (c.attn_output_gate) {
    q_gate.resize(t * 2 * c.q_dim());
    attn_gate.resize(t * c.q_dim());
  }
  lin_qkv.resize(t * c.lin_conv_dim());
  lin_conv.resize(t * c.lin_conv_dim());
  lin_z.resize(t * c.lin_value_dim());
  lin_beta.resize(t * c.lin_v_heads);
  lin_g.resize(t * c.lin_v_heads);
  lin_core.resize(t * c.lin_value_dim());
  delta_scratch.resize(static_cast<size_t>(n_threads) * ops::gated_delta_chunk_scratch(kDeltaChunk, c.lin_v_dim));
  seq_first.resize(t);
  seq_count.resize(t);
}

}  // namespace gb

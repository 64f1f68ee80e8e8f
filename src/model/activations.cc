// Allocation of the forward pass's buffers.
#include "model/activations.h"

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
}

}  // namespace gb

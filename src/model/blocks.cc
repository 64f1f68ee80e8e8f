// The parts every layer loop shares: the embedding, the residual add of a token mixer's output
// followed by the SwiGLU MLP, and the output head — with their hook points, in one place so each
// architecture's loop emits them the same way.
#include <algorithm>
#include <cmath>

#include "model/arch.h"
#include "model/parallel.h"
#include "model/variants.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/rms_norm.h"

namespace gb {

void embed_tokens(const ModelConfig& c, const ModelWeights& w, Activations& a, const Batch& batch, const Hooks* hooks) {
  const int64_t n = batch.n_tokens(), n_embd = c.n_embd;
  float* x = a.x.data();
  for (int64_t t = 0; t < n; ++t) ops::dequantize_row(w.token_embd, batch.tokens[t], x + t * n_embd);
  const uint32_t global_mask = hooks != nullptr ? hooks->global_mask() : 0;
  hook_point(hooks, global_mask, HookPoint::kEmbed, -1, x, n, n_embd, a.all_rows.data(), batch);
}

void paged_attention(const ModelConfig& c, int32_t il, Activations& a, ThreadPool& pool, const Batch& batch,
                     KvCache& cache, const Hooks* hooks) {
  const int64_t n = batch.n_tokens(), hd = c.head_dim, n_heads = c.n_heads, group = n_heads / c.n_kv_heads;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const ops::PagedKv kv = cache.layer(il);
  // Attention sinks: the rows that want their mass on the first key positions (null: none).
  const StepTable* table = hooks != nullptr ? hooks->glass() : nullptr;
  const uint8_t* sink_rows = table != nullptr ? table->sink_rows(il) : nullptr;
  const int64_t n_sink_rows = sink_rows != nullptr ? table->rows_needed() : 0;
  // One work item per (KV head, chunk of tile_positions tokens): each run of consecutive positions
  // of one sequence inside the chunk is one tile — the GQA group's query heads × those positions
  // against the sequence's keys, each KV block loaded once for all of them. KV-head-major with the
  // chunks in zig-zag order (first, last, second, ...), so that contiguous ranges of items carry
  // about equal causal work and a step claimed item by item ends on average-sized ones. A row's
  // result does not depend on its tile, so neither chunking nor threads nor the other sequences in
  // the batch change it.
  const int64_t n_kv = c.n_kv_heads, tile_pos = ops::attend_tile_positions(group);
  const int64_t n_chunks = (n + tile_pos - 1) / tile_pos;
  const int64_t scratch_floats = cache.attend_scratch_floats(attention_tile_rows(c));
  // Every token's k/v go into the cache before any token attends, so a prompt's tokens see each
  // other (causally) within this step. When every sequence's rows lie in one chunk (a decode-only
  // step: one row per sequence; or a step of at most one chunk), the item of (KV head h, chunk)
  // is the only reader of what its rows store for head h, so it stores them itself, in parallel
  // and off the step's serial path; otherwise (prompts spanning chunks) all stores come first.
  const bool decode_only = n <= static_cast<int64_t>(batch.seqs.size());
  const bool store_in_items = n_chunks == 1 || decode_only;
  if (!store_in_items) {
    parallel_for(pool, n, n * kvd * 2, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) ops::kv_store(kv, batch.slots[t], a.k.data() + t * kvd, a.v.data() + t * kvd);
    });
  }
  auto run_item = [&](int64_t item, int ti) {
    float* scratch = a.scores.data() + static_cast<size_t>(ti) * scratch_floats;
    const int64_t h = item / n_chunks, k = item % n_chunks;
    const int64_t chunk = k % 2 == 0 ? k / 2 : n_chunks - 1 - k / 2;
    const int64_t t_end = std::min(n, (chunk + 1) * tile_pos);
    if (store_in_items) {
      for (int64_t t = chunk * tile_pos; t < t_end; ++t)
        ops::kv_store(kv, batch.slots[t], a.k.data() + t * kvd, a.v.data() + t * kvd, h, h + 1);
    }
    for (int64_t t0 = chunk * tile_pos; t0 < t_end;) {
      int64_t t1 = t0 + 1;
      while (t1 < t_end && batch.seq_index[t1] == batch.seq_index[t0] &&
             batch.positions[t1] == batch.positions[t1 - 1] + 1) {
        ++t1;
      }
      ops::AttendTile tile;
      tile.q = a.q.data() + t0 * qd + h * group * hd;
      tile.q_stride = qd;
      tile.out = a.attn.data() + t0 * qd + h * group * hd;
      tile.out_stride = qd;
      tile.n_pos = t1 - t0;
      tile.n_q = group;
      tile.pos0 = batch.positions[t0];
      tile.kv_head = h;
      tile.block_table = batch.seqs[batch.seq_index[t0]].block_table.data();
      tile.scale = scale;
      if (t0 < n_sink_rows) {
        tile.n_sink = sink_rows + t0;
        tile.n_sink_pos = n_sink_rows - t0;
        tile.sink_mass = a.sink_mass.data() + t0 * n_heads + h * group;
        tile.sink_stride = n_heads;
      }
      ops::attend_tile(tile, kv, scratch);
      t0 = t1;
    }
  };
  // Steps with prompt rows (compute-bound tiles, several chunks per KV head) hand the items out
  // in order to whichever thread is free; a decode-only step (one row per sequence: each item a
  // stream of KV slices) keeps contiguous heads per thread, which the hardware prefetcher
  // follows: dynamic claiming measured 5-19% faster for prefill and up to 20% slower for decode
  // at 4096 tokens of context (docs/PERFORMANCE.md, twelfth pass).
  const int64_t work = n * n_heads * (batch.positions[n - 1] + 1) * hd;
  if (!store_in_items) {
    parallel_items(pool, n_kv * n_chunks, work, run_item);
  } else {
    parallel_for(pool, n_kv * n_chunks, work, [&](int64_t b, int64_t e, int ti) {
      for (int64_t item = b; item < e; ++item) run_item(item, ti);
    });
  }
  if (sink_rows != nullptr) table->apply_sinks(il, a.sink_mass.data(), n, n_heads, batch);
}

namespace {

// x += y over n rows of `width`, split over the pool when the step has many tokens.
void add_rows(ThreadPool& pool, float* x, const float* y, int64_t n, int64_t width) {
  parallel_for(pool, n, n * width,
               [&](int64_t b, int64_t e, int) { ops::add_inplace(x + b * width, y + b * width, (e - b) * width); });
}

}  // namespace

void prepare_qk(const ModelConfig& c, const LayerWeights& L, Activations& a, ThreadPool& pool, int64_t n) {
  const int64_t hd = c.head_dim, n_heads = c.n_heads, n_kv = c.n_kv_heads;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), half = c.rope_dims / 2;
  // Split over the pool when a step has many tokens (on one thread: ~4% of a 512-token prefill);
  // work counted per float as for the norms, so a decode batch of a few sequences stays inline
  // (Qwen3-0.6B: from 8 tokens on) rather than paying a fork/join for microseconds of work.
  parallel_for(pool, n, n * (qd + 2 * kvd), [&](int64_t b, int64_t e, int) {
    float *q = a.q.data() + b * qd, *k = a.k.data() + b * kvd, *v = a.v.data() + b * kvd;
    const float *cos = a.rope_cos.data() + b * half, *sin = a.rope_sin.data() + b * half;
    if (L.bq != nullptr) {
      ops::add_bias(q, L.bq, e - b, qd);
      ops::add_bias(k, L.bk, e - b, kvd);
      ops::add_bias(v, L.bv, e - b, kvd);
    }
    if (L.q_norm != nullptr) {
      ops::rms_norm(q, L.q_norm, (e - b) * n_heads, hd, c.rms_eps, q);
      ops::rms_norm(k, L.k_norm, (e - b) * n_kv, hd, c.rms_eps, k);
    }
    ops::rope(q, e - b, qd, n_heads, hd, c.rope_dims, cos, sin, c.rope_style);
    ops::rope(k, e - b, kvd, n_kv, hd, c.rope_dims, cos, sin, c.rope_style);
  });
}

void residual_and_mlp(const ModelConfig& c, const LayerWeights& L, int32_t il, Activations& a, ThreadPool& pool,
                      const Batch& batch, const Hooks* hooks) {
  const int64_t n = batch.n_tokens(), n_embd = c.n_embd, n_ff = c.n_ff;
  const uint32_t mask = hooks != nullptr ? hooks->layer_mask(il) : 0;
  const int32_t* all_rows = a.all_rows.data();
  float* x = a.x.data();
  hook_point(hooks, mask, HookPoint::kAttnOut, il, a.attn_out.data(), n, n_embd, all_rows, batch);
  add_rows(pool, x, a.attn_out.data(), n, n_embd);
  hook_point(hooks, mask, HookPoint::kResidMid, il, x, n, n_embd, all_rows, batch);

  parallel_for(pool, n, n * n_embd, [&](int64_t b, int64_t e, int) {
    ops::rms_norm(x + b * n_embd, L.ffn_norm, e - b, n_embd, c.rms_eps, a.xn.data() + b * n_embd);
  });
  ops::matmul_multi(pool, a.xn.data(), n, {{&L.w_gate, a.gate.data()}, {&L.w_up, a.up.data()}});
  apply_variant_deltas(a.variants, il, patch::Proj::kGate, a.xn.data(), a.gate.data(), pool);
  apply_variant_deltas(a.variants, il, patch::Proj::kUp, a.xn.data(), a.up.data(), pool);
  parallel_for(pool, n * n_ff, n * n_ff * 8, [&](int64_t b, int64_t e, int) {
    ops::silu_mul(a.gate.data() + b, a.up.data() + b, e - b, a.gate.data() + b);
  });
  hook_point(hooks, mask, HookPoint::kMlpAct, il, a.gate.data(), n, n_ff, all_rows, batch);
  ops::matmul(pool, a.gate.data(), n, L.w_down, a.mlp_out.data());
  apply_variant_deltas(a.variants, il, patch::Proj::kDown, a.gate.data(), a.mlp_out.data(), pool);
  hook_point(hooks, mask, HookPoint::kMlpOut, il, a.mlp_out.data(), n, n_embd, all_rows, batch);
  add_rows(pool, x, a.mlp_out.data(), n, n_embd);
  hook_point(hooks, mask, HookPoint::kResidPost, il, x, n, n_embd, all_rows, batch);
}

void output_head(const ModelConfig& c, const ModelWeights& w, Activations& a, ThreadPool& pool, const Batch& batch,
                 const Hooks* hooks, float* logits) {
  // Only the requested rows go through the final norm and lm_head (a prefill wants one).
  const int64_t n_out = batch.n_out(), n_embd = c.n_embd;
  if (n_out == 0) return;
  const float* x = a.x.data();
  for (int64_t i = 0; i < n_out; ++i) {
    ops::rms_norm(x + int64_t{batch.output_rows[i]} * n_embd, w.output_norm, 1, n_embd, c.rms_eps,
                  a.out_norm.data() + i * n_embd);
  }
  const uint32_t global_mask = hooks != nullptr ? hooks->global_mask() : 0;
  hook_point(hooks, global_mask, HookPoint::kFinalNorm, -1, a.out_norm.data(), n_out, n_embd, batch.output_rows.data(),
             batch);
  ops::matmul(pool, a.out_norm.data(), n_out, w.output, logits);
  hook_point(hooks, global_mask, HookPoint::kLogits, -1, logits, n_out, c.vocab, batch.output_rows.data(), batch);
}

}  // namespace gb

// Model: batch validation and dispatch to the architecture's layer loop.
#include "model/model.h"

#include "model/arch.h"
#include "ops/matmul.h"
#include "ops/rms_norm.h"

namespace gb {

DType representative_dtype(const ModelWeights& w) {
  if (w.layers.empty()) return DType::kF32;
  return w.layers[0].wq.data != nullptr ? w.layers[0].wq.dtype : w.layers[0].w_up.dtype;
}

std::string Model::describe() const {
  const ModelConfig& c = config_;
  // The dtype of the first layer's q_proj (of its MLP when it has none: a hybrid model's linear
  // layer) in the file, and what it runs as when converted at load.
  const DType dt = representative_dtype(weights_);
  const std::string dts =
      std::string(dtype_name(file_dtype_)) + (dt != file_dtype_ ? " as " + std::string(dtype_name(dt)) : "");
  return c.arch_name + " (" + format_ + ", " + dts + "): " + std::to_string(c.n_layers) + " layers, hidden " +
         std::to_string(c.n_embd) + ", " + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
         " heads x " + std::to_string(c.head_dim) + ", ffn " + std::to_string(c.n_ff) + ", vocab " +
         std::to_string(c.vocab) + (c.tied_embeddings ? ", tied embeddings" : "") +
         (c.hybrid() ? ", " + std::to_string(c.n_layers_of(LayerKind::kLinearAttention)) + " Gated DeltaNet layers (" +
                           std::to_string(c.lin_k_heads) + "/" + std::to_string(c.lin_v_heads) + " heads x " +
                           std::to_string(c.lin_k_dim) + ")"
                     : "");
}

Status Model::prepare_recurrent(const Batch& b, const KvCache& cache) {
  auto bad = [](const std::string& m) { return Status::error("invalid batch: " + m); };
  const size_t n_seqs = b.seqs.size();
  if (static_cast<int64_t>(n_seqs) > acts_.max_tokens) return bad("more sequences than max_batch_tokens");
  for (size_t s = 0; s < n_seqs; ++s) {
    const int32_t slot = b.seqs[s].state_slot;
    if (slot < 0 || slot >= cache.n_state_slots()) {
      return bad("sequence " + std::to_string(s) + " has recurrent state slot " + std::to_string(slot) +
                 "; this hybrid model needs one in [0, " + std::to_string(cache.n_state_slots()) + ")");
    }
    for (size_t r = 0; r < s; ++r) {
      if (b.seqs[r].state_slot == slot)
        return bad("sequences " + std::to_string(r) + " and " + std::to_string(s) + " share state slot " +
                   std::to_string(slot));
    }
    acts_.seq_count[s] = 0;
  }
  // The recurrence runs over each sequence's tokens in order: they must be contiguous rows with
  // consecutive positions (Batch::add_sequence builds them so).
  for (int64_t t = 0; t < b.n_tokens(); ++t) {
    const int32_t s = b.seq_index[t];
    if (acts_.seq_count[s] == 0) {
      acts_.seq_first[s] = static_cast<int32_t>(t);
    } else if (acts_.seq_first[s] + acts_.seq_count[s] != t || b.positions[t] != b.positions[t - 1] + 1) {
      return bad("token " + std::to_string(t) +
                 ": a hybrid model needs each sequence's tokens contiguous in the batch with consecutive positions");
    }
    ++acts_.seq_count[s];
  }
  for (size_t s = 0; s < n_seqs; ++s) {
    if (acts_.seq_count[s] == 0) continue;
    const int32_t start = b.positions[acts_.seq_first[s]];
    const int32_t have = cache.state_len(b.seqs[s].state_slot);
    if (start != 0 && start != have) {
      return bad("sequence " + std::to_string(s) + " starts at position " + std::to_string(start) +
                 " but its recurrent state holds " + std::to_string(have) +
                 " tokens (a hybrid model's state cannot skip or rewind; restart at 0)");
    }
  }
  return Status::ok();
}

Status Model::validate_batch(const Batch& b, const KvCache& cache) const {
  const int64_t n = b.n_tokens();
  auto bad = [](const std::string& m) { return Status::error("invalid batch: " + m); };
  if (n == 0) return bad("no tokens");
  if (n > acts_.max_tokens) {
    return bad(std::to_string(n) + " tokens exceed max_batch_tokens " + std::to_string(acts_.max_tokens));
  }
  if (b.positions.size() != b.tokens.size() || b.seq_index.size() != b.tokens.size() ||
      b.slots.size() != b.tokens.size()) {
    return bad("tokens, positions, seq_index and slots differ in length");
  }
  const int64_t bs = cache.block_size();
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const BatchSeq& q = b.seqs[s];
    if (q.variant != 0 && !variant_active(q.variant)) {
      return bad("sequence " + std::to_string(s) + " names variant " + std::to_string(q.variant) +
                 ", which is not loaded (0 is the base)");
    }
    if (q.context_len < 1 || q.context_len > config_.max_pos) {
      return bad("sequence " + std::to_string(s) + " context length " + std::to_string(q.context_len) +
                 " is outside [1, " + std::to_string(config_.max_pos) + "]");
    }
    if (static_cast<int64_t>(q.block_table.size()) * bs < q.context_len) {
      return bad("sequence " + std::to_string(s) + " has " + std::to_string(q.block_table.size()) +
                 " blocks, too few for " + std::to_string(q.context_len) + " tokens");
    }
    for (int64_t i = 0; i < (q.context_len + bs - 1) / bs; ++i) {
      if (q.block_table[i] < 0 || q.block_table[i] >= cache.n_blocks()) {
        return bad("sequence " + std::to_string(s) + " block " + std::to_string(q.block_table[i]) +
                   " is outside the cache's " + std::to_string(cache.n_blocks()) + " blocks");
      }
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    const std::string tok = "token " + std::to_string(t);
    if (b.tokens[t] < 0 || b.tokens[t] >= config_.vocab) {
      return bad(tok + " id " + std::to_string(b.tokens[t]) + " is outside the vocabulary of " +
                 std::to_string(config_.vocab));
    }
    const int32_t s = b.seq_index[t];
    if (s < 0 || static_cast<size_t>(s) >= b.seqs.size()) return bad(tok + " has sequence index " + std::to_string(s));
    const BatchSeq& q = b.seqs[s];
    const int32_t pos = b.positions[t];
    if (pos < 0 || pos >= q.context_len) {
      return bad(tok + " position " + std::to_string(pos) + " is outside its sequence's context of " +
                 std::to_string(q.context_len));
    }
    // Attention finds keys through the block table; the slot must be the same place.
    const int64_t expect = int64_t{q.block_table[pos / bs]} * bs + pos % bs;
    if (b.slots[t] != expect) {
      return bad(tok + " slot " + std::to_string(b.slots[t]) + " is not where its block table puts position " +
                 std::to_string(pos) + " (" + std::to_string(expect) + ")");
    }
  }
  for (size_t i = 0; i < b.output_rows.size(); ++i) {
    const int32_t r = b.output_rows[i];
    if (r < 0 || r >= n || (i > 0 && r <= b.output_rows[i - 1])) {
      return bad("output rows must be ascending token rows in [0, " + std::to_string(n) + ")");
    }
  }
  return Status::ok();
}

void Model::output_head(const float* x, int64_t n, float* logits, ThreadPool* pool) const {
  const int64_t n_embd = config_.n_embd;
  std::vector<float> normed(static_cast<size_t>(n * n_embd));
  for (int64_t i = 0; i < n; ++i) {
    ops::rms_norm(x + i * n_embd, weights_.output_norm, 1, n_embd, config_.rms_eps, normed.data() + i * n_embd);
  }
  ops::matmul(pool != nullptr ? *pool : *pool_, normed.data(), n, weights_.output, logits);
}

Status Model::forward(const Batch& batch, KvCache& cache, const Hooks* hooks, float* logits) {
  GB_RETURN_IF_ERROR(validate_batch(batch, cache));
  if (hooks != nullptr && hooks->n_layers() != config_.n_layers) {
    return Status::error("forward: hooks were made for " + std::to_string(hooks->n_layers()) +
                         " layers, the model has " + std::to_string(config_.n_layers));
  }
  if (hooks != nullptr && hooks->glass() != nullptr) {
    const StepTable& g = *hooks->glass();
    if (g.n_layers() != config_.n_layers || g.rows_needed() > batch.n_tokens()) {
      return Status::error("forward: the glass table was made for another model or batch (" +
                           std::to_string(g.n_layers()) + " layers, " + std::to_string(g.rows_needed()) + " rows)");
    }
  }
  if (batch.n_out() > 0 && logits == nullptr)
    return Status::error("forward: output rows requested but no logits buffer");
  if (config_.hybrid()) GB_RETURN_IF_ERROR(prepare_recurrent(batch, cache));
  // Attention scratch grows with the cache's block size, once, outside the layer loop.
  const size_t need = static_cast<size_t>(pool_->size()) * cache.attend_scratch_floats(attention_tile_rows(config_));
  if (acts_.scores.size() < need) acts_.scores.resize(need);
  acts_.variants = prepare_variants(batch);
  switch (config_.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
    case Arch::kQwen3:
      forward_llama(config_, weights_, acts_, *pool_, batch, cache, hooks, logits);
      return Status::ok();
    case Arch::kQwen35:
      forward_qwen35(config_, weights_, acts_, *pool_, batch, cache, hooks, logits);
      return Status::ok();
  }
  return Status::error("forward: unknown architecture");
}

}  // namespace gb

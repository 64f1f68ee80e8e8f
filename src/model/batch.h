// Batch: one forward step's flat list of tokens from many sequences (the shape continuous
// batching needs, as in nano-vllm's ModelRunner): prefill chunks and decode tokens side by side.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gb {

// One sequence taking part in a step.
struct BatchSeq {
  // Physical KV blocks of the sequence in position order: position p lives in block
  // block_table[p / block_size] at offset p % block_size. Owned by the caller (the sequence /
  // block manager), at least ceil(context_len / block_size) entries. Blocks may be shared
  // between sequences (prefix caching) as long as nobody writes into a shared block.
  std::span<const int32_t> block_table;
  // Tokens of this sequence in the cache once this step's tokens are written (= last position + 1).
  int32_t context_len = 0;
  // Hybrid models: the sequence's recurrent-state slot in the KvCache (-1: none; required when the
  // model has linear-attention layers). Its tokens must then be contiguous in the batch with
  // consecutive positions, starting at 0 (the state is reset) or where the state left off.
  int32_t state_slot = -1;
  // The weight variant this sequence runs on: 0 = the base, else an id from Model::add_variant.
  int32_t variant = 0;
};

struct Batch {
  std::vector<int32_t> tokens;     // [n_tokens] token ids
  std::vector<int32_t> positions;  // [n_tokens] position of each token in its sequence
  std::vector<int32_t> seq_index;  // [n_tokens] index into seqs: per-sequence data (KV, hooks, later interventions)
  std::vector<int64_t> slots;      // [n_tokens] KV slot (block · block_size + offset) each token's k/v are written to
  std::vector<int32_t> output_rows;  // [n_out] ascending token rows whose logits the step returns
  std::vector<BatchSeq> seqs;        // [n_seqs]

  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_out() const { return static_cast<int64_t>(output_rows.size()); }

  // Empties the batch, keeping capacity (no allocation in a steady-state server loop).
  void clear();

  // Appends `ids` of one sequence at positions start_pos.. and returns its index in seqs. Slots come
  // from block_table; logits are requested for every token (all_logits) or only the last one.
  // The sequence's context_len becomes start_pos + ids.size(); state_slot: see BatchSeq.
  int32_t add_sequence(std::span<const int32_t> ids, int32_t start_pos, std::span<const int32_t> block_table,
                       int32_t block_size, bool all_logits, int32_t state_slot = -1);
};

}  // namespace gb

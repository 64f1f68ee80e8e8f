// Building a Batch from sequences.
#include "model/batch.h"

namespace gb {

void Batch::clear() {
  tokens.clear();
  positions.clear();
  seq_index.clear();
  slots.clear();
  output_rows.clear();
  seqs.clear();
}

int32_t Batch::add_sequence(std::span<const int32_t> ids, int32_t start_pos, std::span<const int32_t> block_table,
                            int32_t block_size, bool all_logits, int32_t state_slot) {
  const int32_t s = static_cast<int32_t>(seqs.size());
  const int32_t n = static_cast<int32_t>(ids.size());
  seqs.push_back({block_table, start_pos + n, state_slot});
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = start_pos + i;
    const size_t b = static_cast<size_t>(pos / block_size);
    // An out-of-range block is caught by Model::forward's validation; -1 marks it.
    const int64_t slot = b < block_table.size() ? int64_t{block_table[b]} * block_size + pos % block_size : -1;
    if (all_logits || i == n - 1) output_rows.push_back(static_cast<int32_t>(tokens.size()));
    tokens.push_back(ids[i]);
    positions.push_back(pos);
    seq_index.push_back(s);
    slots.push_back(slot);
  }
  return s;
}

}  // namespace gb

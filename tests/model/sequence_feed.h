// Test scaffolding below the engine: feeds one sequence to Model::forward directly — blocks
// 0, 1, 2, ... of the cache in position order, prompts in forwards of at most the model's
// max_batch_tokens — and keeps the logits. The product has one driver, the engine's step; the
// model tests check the forward pass itself (against references, batch invariance, chunking), so
// they call it without a scheduler in between.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace gb::test {

class SequenceFeed {
 public:
  // state_slot: the recurrent-state slot used for hybrid models (ignored by the others).
  SequenceFeed(Model& model, KvCache& cache, int32_t state_slot = 0)
      : model_(model), cache_(cache), state_slot_(state_slot) {}

  // Appends ids at positions n_past().. . Afterwards logits() holds the logits of the last token,
  // or of every fed token with all_logits. Past the cache's blocks or the context: an error, and
  // nothing is appended.
  Status feed(std::span<const int32_t> ids, const Hooks* hooks = nullptr, bool all_logits = false) {
    const int64_t total = int64_t{n_past_} + static_cast<int64_t>(ids.size());
    if (total > model_.config().max_pos) return Status::error("past the model's context");
    const int32_t bs = cache_.block_size();
    if ((total + bs - 1) / bs > cache_.n_blocks()) return Status::error("the KV cache is out of blocks");
    while (static_cast<int64_t>(table_.size()) * bs < total) table_.push_back(static_cast<int32_t>(table_.size()));
    const int64_t vocab = model_.config().vocab;
    logits_.assign(static_cast<size_t>((all_logits ? ids.size() : 1) * vocab), 0.0f);
    const size_t chunk = static_cast<size_t>(model_.max_batch_tokens());
    for (size_t start = 0; start < ids.size(); start += chunk) {
      const size_t len = std::min(chunk, ids.size() - start);
      batch_.clear();
      batch_.add_sequence(ids.subspan(start, len), n_past_, table_, bs, all_logits, state_slot_);
      if (!all_logits && start + len < ids.size()) batch_.output_rows.clear();
      GB_RETURN_IF_ERROR(model_.forward(batch_, cache_, hooks, logits_.data() + (all_logits ? start * vocab : 0)));
      n_past_ += static_cast<int32_t>(len);
    }
    return Status::ok();
  }

  // [n_rows, vocab] f32 from the last feed; last_logits(): the last row.
  std::span<const float> logits() const { return logits_; }
  std::span<const float> last_logits() const {
    return std::span<const float>(logits_).subspan(logits_.size() - static_cast<size_t>(model_.config().vocab));
  }
  int32_t n_past() const { return n_past_; }

 private:
  Model& model_;
  KvCache& cache_;
  int32_t state_slot_;
  int32_t n_past_ = 0;
  std::vector<int32_t> table_;
  Batch batch_;
  std::vector<float> logits_;
};

}  // namespace gb::test

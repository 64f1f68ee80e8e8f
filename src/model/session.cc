// Single-sequence prefill / decode on top of Model::forward.
#include "model/session.h"

#include <algorithm>

namespace gb {

Session::Session(Model& model, KvCache& cache) : model_(model), cache_(cache) {}

Session::~Session() { reset(); }

void Session::reset() {
  for (int32_t b : blocks_) cache_.allocator().release(b);
  blocks_.clear();
  if (state_slot_ >= 0) cache_.state_allocator().release(state_slot_);
  state_slot_ = -1;
  n_past_ = 0;
  logits_.clear();
}

std::span<const float> Session::last_logits() const {
  const size_t vocab = static_cast<size_t>(model_.config().vocab);
  if (logits_.size() < vocab) return {};
  return std::span<const float>(logits_).subspan(logits_.size() - vocab);
}

Status Session::feed(std::span<const int32_t> ids, const Hooks* hooks, bool all_logits) {
  if (ids.empty()) return Status::error("Session::feed: no tokens");
  const int64_t total = int64_t{n_past_} + static_cast<int64_t>(ids.size());
  if (total > model_.config().max_pos) {
    return Status::error("Session::feed: " + std::to_string(total) + " tokens exceed the model's context of " +
                         std::to_string(model_.config().max_pos));
  }
  if (model_.config().hybrid() && state_slot_ < 0) {
    state_slot_ = cache_.state_allocator().allocate();
    if (state_slot_ < 0) {
      return Status::error("Session::feed: all " + std::to_string(cache_.n_state_slots()) +
                           " recurrent state slots of the cache are in use");
    }
  }
  const int32_t bs = cache_.block_size();
  const size_t old_blocks = blocks_.size();
  while (static_cast<int64_t>(blocks_.size()) * bs < total) {
    const int32_t b = cache_.allocator().allocate();
    if (b < 0) {
      for (size_t i = old_blocks; i < blocks_.size(); ++i) cache_.allocator().release(blocks_[i]);
      blocks_.resize(old_blocks);
      return Status::error("Session::feed: the KV cache is out of blocks (" + std::to_string(cache_.n_blocks()) +
                           " blocks of " + std::to_string(bs) + " tokens)");
    }
    blocks_.push_back(b);
  }
  const int64_t vocab = model_.config().vocab;
  logits_.assign(static_cast<size_t>((all_logits ? ids.size() : 1) * vocab), 0.0f);
  const size_t chunk = static_cast<size_t>(model_.max_batch_tokens());
  for (size_t start = 0; start < ids.size(); start += chunk) {
    const size_t len = std::min(chunk, ids.size() - start);
    const bool last = start + len == ids.size();
    batch_.clear();
    batch_.add_sequence(ids.subspan(start, len), n_past_, blocks_, bs, all_logits, state_slot_);
    if (!all_logits && !last) batch_.output_rows.clear();
    float* out = logits_.data() + (all_logits ? start * vocab : 0);
    GB_RETURN_IF_ERROR(model_.forward(batch_, cache_, hooks, out));
    n_past_ += static_cast<int32_t>(len);
  }
  return Status::ok();
}

}  // namespace gb

// The n-gram repetition rate.
#include "glass/repetition.h"

#include <algorithm>

namespace gb {

RepetitionTracker::RepetitionTracker(int32_t n, int32_t window) : n_(std::max(1, n)), window_(std::max(1, window)) {
  recent_.assign(static_cast<size_t>(window_), 0);
}

void RepetitionTracker::push(int32_t token) {
  last_.push_back(token);
  if (static_cast<int32_t>(last_.size()) > n_) last_.erase(last_.begin());
  if (static_cast<int32_t>(last_.size()) < n_) return;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int32_t t : last_) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ULL;
  }
  const bool repeated = !seen_.insert(h).second;
  const size_t slot = static_cast<size_t>(total_ % window_);
  recent_sum_ += static_cast<int64_t>(repeated) - recent_[slot];
  recent_[slot] = repeated;
  ++total_;
  repeated_ += repeated;
}

double RepetitionTracker::window_rate() const {
  const int64_t n = std::min<int64_t>(total_, window_);
  return n > 0 ? static_cast<double>(recent_sum_) / static_cast<double>(n) : 0.0;
}

}  // namespace gb

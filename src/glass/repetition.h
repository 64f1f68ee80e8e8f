// The n-gram repetition stop of the `glassbox` extension (`stop_on_repetition`): a request whose
// generated text loops is stopped.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

namespace gb {

// Stop a sequence whose generated text loops: over the last `window` n-grams, the fraction that
// already occurred earlier in the output.
struct RepetitionStop {
  int32_t ngram = 4;
  int32_t window = 64;
  double max_rate = 0.6;
};

// The n-gram repetition rate of a token sequence, incrementally: the fraction of its n-grams that
// already occurred earlier in it, overall and over the last `window` n-grams.
class RepetitionTracker {
 public:
  explicit RepetitionTracker(int32_t n, int32_t window = 64);
  void push(int32_t token);
  double rate() const { return total_ > 0 ? static_cast<double>(repeated_) / static_cast<double>(total_) : 0.0; }
  double window_rate() const;
  int64_t ngrams() const { return total_; }
  int32_t window() const { return window_; }
  // True when stop says this sequence should end now (a full window over max_rate).
  bool should_stop(const RepetitionStop& stop) const { return total_ >= window_ && window_rate() > stop.max_rate; }

 private:
  int32_t n_, window_;
  std::vector<int32_t> last_;          // the last n tokens
  std::unordered_set<uint64_t> seen_;  // hashes of the n-grams so far
  std::vector<uint8_t> recent_;        // ring of the last `window` n-grams: 1 = repeated
  int64_t recent_sum_ = 0;
  int64_t total_ = 0, repeated_ = 0;
};

}  // namespace gb

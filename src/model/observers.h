// Observers of hook tensors: per-token statistics (the glass-box monitor's raw material) and a
// capture of whole tensors (glassbox dump, reference comparisons).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/hooks.h"

namespace gb {

// "layers.{l}.{point}" for per-layer points, "{point}" for embed / final_norm / logits: the keys
// of `glassbox dump` files and of the reference fixtures.
std::string hook_key(HookPoint p, int32_t layer);

struct TokenStats {
  float max_abs = 0;     // max_i |x_i|
  int32_t max_dim = 0;   // the i of max_abs (lowest on ties)
  float median_abs = 0;  // median of |x_i| (mean of the two middle values for an even width)
  float rms = 0;         // sqrt(mean x_i²), accumulated in double
};

// Statistics of one row x[width]; scratch[width] is caller workspace for the median.
TokenStats token_stats(const float* x, int64_t width, float* scratch);

// Records TokenStats for every row of every tensor it is given.
class StatsObserver : public Observer {
 public:
  struct Record {
    HookPoint point;
    int32_t layer;     // -1 for global points
    int32_t seq;       // batch.seq_index of the row
    int32_t position;  // batch.positions of the row
    TokenStats stats;
  };
  void observe(const HookTensor& t) override;
  const std::vector<Record>& records() const { return records_; }
  void clear() { records_.clear(); }

 private:
  std::vector<Record> records_;
  std::vector<float> scratch_;  // [width] grows to the widest tensor seen
};

// Copies hook tensors, per batch sequence index, each row stored at its token position, so a
// sequence fed in several steps (chunked prefill, then decode) assembles into one
// [n_positions, width] array per key. Positions never observed stay zero.
class CaptureObserver : public Observer {
 public:
  struct Tensor {
    int64_t width = 0;
    int64_t n_rows = 0;       // highest observed position + 1
    std::vector<float> data;  // [n_rows, width] f32
  };
  void observe(const HookTensor& t) override;
  // nullptr if nothing was captured for (seq, key).
  const Tensor* find(int32_t seq, const std::string& key) const;
  const std::map<std::pair<int32_t, std::string>, Tensor>& tensors() const { return tensors_; }
  void clear() { tensors_.clear(); }

 private:
  std::map<std::pair<int32_t, std::string>, Tensor> tensors_;
};

}  // namespace gb

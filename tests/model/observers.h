// Test-only observers of hook tensors (the product observes through the glass box): a thin
// adapter that copies whole tensors per sequence for comparisons against reference fixtures, and
// per-token statistics computed by ops::row_stats, the glass box's own row statistics.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/hooks.h"
#include "ops/steer.h"

namespace gb {

struct TokenStats {
  float max_abs = 0;     // max_i |x_i|
  int32_t max_dim = 0;   // the i of max_abs (lowest on ties)
  float median_abs = 0;  // median of |x_i| (mean of the two middle values for an even width)
  float rms = 0;         // sqrt(mean x_i²), accumulated in double
};

// Statistics of one row x[width] by ops::row_stats.
inline TokenStats token_stats(const float* x, int64_t width) {
  const ops::RowStats r = ops::row_stats(x, width);
  return {r.max_abs, r.max_dim, r.median_abs, static_cast<float>(std::sqrt(r.sum_sq / static_cast<double>(width)))};
}

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
  void observe(const HookTensor& t) override {
    for (int64_t r = 0; r < t.n_rows; ++r) {
      const int32_t row = t.rows[r];
      records_.push_back({t.point, t.layer, t.batch->seq_index[row], t.batch->positions[row],
                          token_stats(t.data + r * t.width, t.width)});
    }
  }
  const std::vector<Record>& records() const { return records_; }

 private:
  std::vector<Record> records_;
};

// Copies hook tensors, per batch sequence index, each row stored at its token position, so a
// sequence fed in several steps assembles into one [n_positions, width] array per key.
class CaptureObserver : public Observer {
 public:
  struct Tensor {
    int64_t width = 0;
    int64_t n_rows = 0;       // highest observed position + 1
    std::vector<float> data;  // [n_rows, width] f32
  };
  void observe(const HookTensor& t) override {
    const std::string key = hook_key(t.point, t.layer);
    for (int64_t r = 0; r < t.n_rows; ++r) {
      const int32_t row = t.rows[r];
      Tensor& dst = tensors_[{t.batch->seq_index[row], key}];
      dst.width = t.width;
      const int64_t pos = t.batch->positions[row];
      if (pos >= dst.n_rows) {
        dst.n_rows = pos + 1;
        dst.data.resize(static_cast<size_t>(dst.n_rows * t.width), 0.0f);
      }
      std::memcpy(dst.data.data() + pos * t.width, t.data + r * t.width, static_cast<size_t>(t.width) * sizeof(float));
    }
  }
  // nullptr if nothing was captured for (seq, key).
  const Tensor* find(int32_t seq, const std::string& key) const {
    auto it = tensors_.find({seq, key});
    return it == tensors_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::pair<int32_t, std::string>, Tensor> tensors_;
};

}  // namespace gb

// Token statistics and tensor capture.
#include "model/observers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gb {

std::string hook_key(HookPoint p, int32_t layer) {
  const std::string name(hook_point_name(p));
  return is_layer_point(p) ? "layers." + std::to_string(layer) + "." + name : name;
}

TokenStats token_stats(const float* x, int64_t width, float* scratch) {
  TokenStats s;
  double sum_sq = 0;
  for (int64_t i = 0; i < width; ++i) {
    const float a = std::fabs(x[i]);
    if (a > s.max_abs) {
      s.max_abs = a;
      s.max_dim = static_cast<int32_t>(i);
    }
    sum_sq += static_cast<double>(x[i]) * x[i];
    scratch[i] = a;
  }
  s.rms = static_cast<float>(std::sqrt(sum_sq / static_cast<double>(width)));
  const int64_t mid = width / 2;
  std::nth_element(scratch, scratch + mid, scratch + width);
  const float upper = scratch[mid];
  if (width % 2 == 1) {
    s.median_abs = upper;
  } else {
    // The lower middle is the largest of the elements nth_element put before mid.
    const float lower = *std::max_element(scratch, scratch + mid);
    s.median_abs = static_cast<float>((static_cast<double>(lower) + upper) / 2);
  }
  return s;
}

void StatsObserver::observe(const HookTensor& t) {
  if (static_cast<int64_t>(scratch_.size()) < t.width) scratch_.resize(t.width);
  for (int64_t r = 0; r < t.n_rows; ++r) {
    const int32_t row = t.rows[r];
    records_.push_back({t.point, t.layer, t.batch->seq_index[row], t.batch->positions[row],
                        token_stats(t.data + r * t.width, t.width, scratch_.data())});
  }
}

void CaptureObserver::observe(const HookTensor& t) {
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

const CaptureObserver::Tensor* CaptureObserver::find(int32_t seq, const std::string& key) const {
  auto it = tensors_.find({seq, key});
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace gb

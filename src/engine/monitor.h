// The engine-wide massive-activation monitor as the server reads it: counters, per-layer ratio
// histograms and the most recent events, folded from each sampled step's MonitorStep.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "glass/glass.h"

namespace gb {

struct MonitorSnapshot {
  MonitorConfig config;  // as configured (enabled = false: everything below stays 0)
  int64_t steps_sampled = 0;
  int64_t rows_checked = 0;  // token rows × layers × points examined
  int64_t events_total = 0;
  int64_t events_dropped = 0;             // events beyond MonitorStep::kMaxEvents in one step (counted, not listed)
  std::vector<int64_t> events_per_layer;  // [n_layers]
  std::vector<float> last_max_ratio;      // [n_layers] max over the last sampled step's rows of max|x| / median|x|
  std::vector<float> last_max_abs;        // [n_layers] max |x| of the last sampled step
  std::vector<float> peak_max_ratio;      // [n_layers] the largest last_max_ratio ever seen
  // Per layer, a histogram of each sampled step's max ratio (per-bucket counts, the last +Inf).
  static constexpr std::array<double, 10> kRatioBounds = {2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000};
  std::vector<std::array<uint64_t, kRatioBounds.size() + 1>> ratio_buckets;  // [n_layers]
  std::vector<uint64_t> ratio_count;                                         // [n_layers]
  std::vector<double> ratio_sum;                                             // [n_layers]
  struct Event {
    uint64_t index = 0;  // 1, 2, 3, ... over the engine's life (new ones: index > last seen)
    std::string request_id;
    MassiveEvent event;
  };
  std::vector<Event> recent;  // the last kRecent events, oldest first
  static constexpr size_t kRecent = 256;

  // Sizes the per-layer arrays (zeroed) for a model of n_layers.
  void reset(int32_t n_layers, const MonitorConfig& config);
  // Folds one sampled step in; request_id(seq_index) names the request of a batch sequence.
  void record(const MonitorStep& step, const std::function<const std::string&(int32_t)>& request_id);
};

}  // namespace gb

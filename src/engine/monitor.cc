#include "engine/monitor.h"

#include <algorithm>

namespace gb {

void MonitorSnapshot::reset(int32_t n_layers_in, const MonitorConfig& c) {
  const size_t n_layers = static_cast<size_t>(n_layers_in);
  events_per_layer.assign(n_layers, 0);
  last_max_ratio.assign(n_layers, 0.0f);
  last_max_abs.assign(n_layers, 0.0f);
  peak_max_ratio.assign(n_layers, 0.0f);
  ratio_buckets.assign(n_layers, {});
  ratio_count.assign(n_layers, 0);
  ratio_sum.assign(n_layers, 0.0);
  config = c;
}

void MonitorSnapshot::record(const MonitorStep& step, const std::function<const std::string&(int32_t)>& request_id) {
  ++steps_sampled;
  rows_checked += step.rows;
  events_dropped += step.events_dropped;
  for (size_t l = 0; l < last_max_ratio.size(); ++l) {
    last_max_ratio[l] = step.max_ratio[l];
    last_max_abs[l] = step.max_abs[l];
    peak_max_ratio[l] = std::max(peak_max_ratio[l], step.max_ratio[l]);
    const double r = step.max_ratio[l];
    size_t b = 0;
    while (b < kRatioBounds.size() && r > kRatioBounds[b]) ++b;
    ++ratio_buckets[l][b];
    ++ratio_count[l];
    ratio_sum[l] += r;
  }
  for (const MonitorEvent& e : step.events) {
    ++events_total;
    ++events_per_layer[static_cast<size_t>(e.event.layer)];
    if (recent.size() == kRecent) recent.erase(recent.begin());
    recent.push_back({static_cast<uint64_t>(events_total), request_id(e.seq_index), e.event});
  }
  events_total += step.events_dropped;
}

}  // namespace gb

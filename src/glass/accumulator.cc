// The per-sequence glass-box accumulator: storage on first use, the report.
#include "glass/accumulator.h"

#include <algorithm>
#include <cmath>

namespace gb {

GlassAccumulator::GlassAccumulator(std::shared_ptr<const GlassSpec> spec, const ModelConfig& c)
    : spec_(std::move(spec)),
      n_layers_(c.n_layers),
      n_embd_(c.n_embd),
      n_ff_(c.n_ff),
      vocab_(c.vocab),
      n_heads_(c.n_heads) {}

int64_t GlassAccumulator::storage_bytes(const GlassSpec& spec, const ModelConfig& c) {
  int64_t bytes = static_cast<int64_t>(spec.interventions.size()) * static_cast<int64_t>(sizeof(int64_t));
  const ObserveSpec& ob = spec.observe;
  if (!ob.enabled) return bytes;
  const int64_t n_slots = int64_t{c.n_layers} * kNumLayerPoints;
  bytes += n_slots * static_cast<int64_t>(sizeof(uint8_t) + sizeof(Acc));
  if (ob.detect_massive) bytes += kMaxEventsPerRequest * static_cast<int64_t>(sizeof(MassiveEvent));
  if (ob.layer_time) bytes += (int64_t{c.n_layers} + 1) * static_cast<int64_t>(sizeof(int64_t));
  bytes += static_cast<int64_t>(ob.captures.size()) * static_cast<int64_t>(sizeof(Capture));
  for (const CaptureRequest& cr : ob.captures) bytes += point_width(cr.point, c) * static_cast<int64_t>(sizeof(float));
  if (ob.sink_tokens > 0) {
    const auto n_sink = static_cast<int64_t>(ob.sink_layers.size());
    bytes +=
        n_sink * static_cast<int64_t>(sizeof(SinkLayer)) + n_sink * c.n_heads * static_cast<int64_t>(sizeof(SinkHead));
  }
  return bytes;
}

int64_t observation_bytes(const GlassSpec& spec, const ModelConfig& c) {
  return GlassAccumulator::storage_bytes(spec, c);
}

void GlassAccumulator::ensure_storage() {
  if (storage_) return;
  storage_ = true;
  applied_rows_.assign(spec_->interventions.size(), 0);
  const ObserveSpec& ob = spec_->observe;
  if (!ob.enabled) return;
  const size_t n_slots = static_cast<size_t>(n_layers_) * kNumLayerPoints;
  observed_.assign(n_slots, 0);
  acc_.resize(n_slots);
  for (int32_t l : ob.layers) {
    for (HookPoint p : ob.points) observed_[static_cast<size_t>(l) * kNumLayerPoints + static_cast<int>(p)] = 1;
  }
  captures_.reserve(ob.captures.size());
  for (const CaptureRequest& cr : ob.captures) {
    Capture cap;
    cap.point = cr.point;
    cap.layer = cr.layer;
    cap.position = cr.position;
    cap.data.assign(static_cast<size_t>(cr.point == HookPoint::kMlpAct   ? n_ff_
                                        : cr.point == HookPoint::kLogits ? vocab_
                                                                         : n_embd_),
                    0.0f);
    captures_.push_back(std::move(cap));
  }
  if (ob.detect_massive) events_.reserve(kMaxEventsPerRequest);
  if (ob.layer_time) layer_ns_.assign(static_cast<size_t>(n_layers_) + 1, 0);
  if (ob.sink_tokens > 0) {
    sink_layers_.resize(ob.sink_layers.size());
    sink_heads_.resize(ob.sink_layers.size() * static_cast<size_t>(n_heads_));
  }
}

GlassReport GlassAccumulator::report() const {
  GlassReport r;
  const ObserveSpec& ob = spec_->observe;
  if (ob.enabled) {
    // Before the first step nothing was observed: every observed pair reports zero tokens.
    std::vector<uint8_t> observed = observed_;
    if (!storage_) {
      observed.assign(static_cast<size_t>(n_layers_) * kNumLayerPoints, 0);
      for (int32_t l : ob.layers) {
        for (HookPoint p : ob.points) observed[static_cast<size_t>(l) * kNumLayerPoints + static_cast<int>(p)] = 1;
      }
    }
    const Acc empty;
    for (int32_t l = 0; l < n_layers_; ++l) {
      for (int p = 0; p < kNumLayerPoints; ++p) {
        const size_t i = static_cast<size_t>(l) * kNumLayerPoints + p;
        if (!observed[i]) continue;
        const Acc& a = storage_ ? acc_[i] : empty;
        PointStats s;
        s.point = static_cast<HookPoint>(p);
        s.layer = l;
        s.n_tokens = a.n_tokens;
        s.max_abs = a.max_abs;
        s.max_dim = a.max_dim;
        s.max_position = a.max_position;
        s.median_abs = a.n_tokens > 0 ? static_cast<float>(a.sum_median / static_cast<double>(a.n_tokens)) : 0.0f;
        s.max_ratio = a.max_ratio;
        s.max_ratio_position = a.max_ratio_position;
        if (a.n_values > 0) {
          s.rms = static_cast<float>(std::sqrt(a.sum_sq / static_cast<double>(a.n_values)));
          s.mean = static_cast<float>(a.sum / static_cast<double>(a.n_values));
        }
        s.top.assign(a.top, a.top + a.n_top);
        r.stats.push_back(std::move(s));
      }
    }
  }
  if (ob.enabled && ob.layer_time) {
    LayerTime& t = r.layer_time;
    t.enabled = true;
    t.steps = timed_steps_;
    t.layer_ms.assign(static_cast<size_t>(n_layers_), 0.0);
    if (storage_) {
      for (int32_t l = 0; l < n_layers_; ++l)
        t.layer_ms[static_cast<size_t>(l)] = static_cast<double>(layer_ns_[static_cast<size_t>(l)]) * 1e-6;
      t.head_ms = static_cast<double>(layer_ns_.back()) * 1e-6;
    }
  }
  if (ob.enabled && ob.sink_tokens > 0) {
    r.sink_tokens = ob.sink_tokens;
    for (size_t k = 0; k < ob.sink_layers.size(); ++k) {
      SinkStats s;
      s.layer = ob.sink_layers[k];
      s.n_tokens = storage_ ? sink_layers_[k].n_tokens : 0;
      for (int32_t h = 0; h < n_heads_; ++h) {
        const SinkHead a =
            storage_ ? sink_heads_[k * static_cast<size_t>(n_heads_) + static_cast<size_t>(h)] : SinkHead{};
        s.mean.push_back(s.n_tokens > 0 ? static_cast<float>(a.sum / static_cast<double>(s.n_tokens)) : 0.0f);
        s.max.push_back(a.max);
        s.max_position.push_back(a.max_position);
      }
      r.sinks.push_back(std::move(s));
    }
  }
  r.events = events_;
  r.events_dropped = events_dropped_;
  if (storage_) {
    r.captures = captures_;
  } else {
    for (const CaptureRequest& cr : ob.captures) r.captures.push_back({cr.point, cr.layer, cr.position, false, {}});
  }
  for (size_t k = 0; k < spec_->interventions.size(); ++k) {
    AppliedIntervention a = applied_intervention(spec_->interventions[k]);
    a.rows = storage_ ? applied_rows_[k] : 0;
    r.applied.push_back(std::move(a));
  }
  return r;
}

void GlassAccumulator::output_positions(int32_t first_pos, int32_t n, std::vector<int32_t>* positions) const {
  const auto begin = static_cast<std::ptrdiff_t>(positions->size());
  for (const CaptureRequest& cr : spec_->observe.captures) {
    if (is_output_point(cr.point) && cr.position >= first_pos && cr.position < first_pos + n) {
      positions->push_back(cr.position);
    }
  }
  std::sort(positions->begin() + begin, positions->end());
  positions->erase(std::unique(positions->begin() + begin, positions->end()), positions->end());
}

}  // namespace gb

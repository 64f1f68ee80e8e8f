// What a glass-box request gets back: statistics per observed (layer, point), massive-activation
// events, raw captures and the interventions as they were applied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "glass/spec.h"

namespace gb {

struct TopDim {
  int32_t dim = 0;
  float abs = 0;          // largest |x_dim| seen
  int32_t position = -1;  // the token position where it was seen
};

// Statistics of one (layer, point) over the observed tokens of a request (accumulated across
// steps: chunked prefill, then one decode token per step; a recomputed token counts once).
struct PointStats {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;
  int64_t n_tokens = 0;
  float max_abs = 0;          // max |x| over every observed value
  int32_t max_dim = 0;        // its dim
  int32_t max_position = -1;  // its token position
  float median_abs = 0;       // mean over tokens of each token's median |x|
  float max_ratio = 0;        // max over tokens of max|x| / median|x| (0 when a median is 0)
  int32_t max_ratio_position = -1;
  float rms = 0;            // sqrt(mean x²) over every observed value
  float mean = 0;           // mean x over every observed value
  std::vector<TopDim> top;  // up to top_k dims by their largest |x|, largest first
};

// Attention sinks of one full-attention layer over the observed tokens of a request: per query
// head, the softmax mass each token's query put on key positions [0, sink_tokens) of its sequence
// (a recomputed token counts once).
struct SinkStats {
  int32_t layer = 0;
  int64_t n_tokens = 0;
  std::vector<float> mean;            // [n_heads] mean mass over the tokens
  std::vector<float> max;             // [n_heads] largest mass
  std::vector<int32_t> max_position;  // [n_heads] the token position of the largest (-1: no token)
};

struct MassiveEvent {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;
  int32_t position = 0;  // token position in its sequence
  int32_t dim = 0;
  float value = 0;                               // x (signed)
  float median_abs = 0;                          // the median |x| the rule compared with (see `median`)
  MassiveMedian median = MassiveMedian::kToken;  // layer: the sequence's layer median (MassiveRule); token: the row's
  float ratio = 0;                               // |x| / median_abs (∞ when the median is 0)
  bool abs_test = false;                         // |x| > min_abs
  bool ratio_test = false;                       // |x| > min_ratio · median_abs
};

// The event of a row that passed is_massive(): its largest value x[max_dim] at (p, layer, position),
// compared with median_abs (of kind `median`).
MassiveEvent massive_event(HookPoint p, int32_t layer, int32_t position, const float* x, int32_t max_dim, float max_abs,
                           float median_abs, MassiveMedian median, const MassiveTest& test);

struct Capture {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;
  int32_t position = 0;
  bool filled = false;      // false: the position was never computed (served from a cache, or not reached)
  std::vector<float> data;  // [width] f32 (empty until the sequence first ran)
};

// An intervention as it was resolved and applied.
struct AppliedIntervention {
  InterventionOp op = InterventionOp::kScale;
  HookPoint point = HookPoint::kResidPost;
  int32_t layer_first = 0, layer_last = 0;
  std::vector<int32_t> dims;
  float strength = 0;
  float threshold = 0;
  int64_t vector_size = 0;  // 0: no vector
  float vector_norm = 0;    // L2 norm of the resolved vector (ablate: of the normalised direction, 1)
  TokenSelector tokens;
  std::string label;
  int64_t rows = 0;  // (token, layer) rows it was applied to
};

// An intervention as resolved (rows = 0: the caller counts them).
AppliedIntervention applied_intervention(const Intervention& iv);

// observe.layer_time: the wall time (steady clock) the forward passes of the sequence's steps
// spent in each layer — from the previous layer's resid_post (layer 0: the embed hook) to this
// layer's, the glass box's own work at the layer's points included — and in the output head (the
// rest of the step after the last layer's resid_post: final norm, lm_head), summed over the
// steps. A step's time counts whole for each sequence of its batch.
struct LayerTime {
  bool enabled = false;
  int64_t steps = 0;             // forward passes summed
  std::vector<double> layer_ms;  // [n_layers]
  double head_ms = 0;
};

struct GlassReport {
  std::vector<PointStats> stats;     // observed (layer, point) pairs, layer-major
  std::vector<MassiveEvent> events;  // in the order seen, at most kMaxEventsPerRequest
  int64_t events_dropped = 0;
  std::vector<Capture> captures;             // in ObserveSpec::captures order
  std::vector<AppliedIntervention> applied;  // in GlassSpec::interventions order
  LayerTime layer_time;                      // with observe.layer_time
  int32_t sink_tokens = 0;                   // ObserveSpec::sink_tokens (0: sinks not observed)
  std::vector<SinkStats> sinks;              // observed full-attention layers, ascending
};

}  // namespace gb

// Per-sequence state the forward passes write into: what one sequence of a glass-box request
// observed, and how many rows each of its interventions touched.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "glass/report.h"
#include "glass/spec.h"

namespace gb {

// Owned by the engine's sequence. Holds nothing but the spec until the sequence first enters a
// step (GlassStep::add_sequence calls ensure_storage): a queued request reserves no memory. The
// storage is then sized once for the whole spec (observation_bytes), so every later step of the
// sequence allocates nothing.
class GlassAccumulator {
 public:
  GlassAccumulator(std::shared_ptr<const GlassSpec> spec, const ModelConfig& c);
  const GlassSpec& spec() const { return *spec_; }
  GlassReport report() const;
  // Appends to *positions those in [first_pos, first_pos + n) that a final_norm or logits capture
  // needs as output rows of the forward pass (ascending, once each).
  void output_positions(int32_t first_pos, int32_t n, std::vector<int32_t>* positions) const;

  // Allocates the storage (once; later calls do nothing).
  void ensure_storage();
  bool has_storage() const { return storage_; }
  // What ensure_storage allocates for spec (observation_bytes).
  static int64_t storage_bytes(const GlassSpec& spec, const ModelConfig& c);

 private:
  friend class GlassStep;
  struct Acc {
    int64_t n_tokens = 0;
    float max_abs = 0;
    int32_t max_dim = 0, max_position = -1;
    double sum_median = 0;
    float max_ratio = 0;
    int32_t max_ratio_position = -1;
    double sum = 0, sum_sq = 0;
    int64_t n_values = 0;
    int32_t last_position = -1;  // rows at or below this were already counted (recompute after preemption)
    float layer_median = -1;     // median |x| of the sequence's last multi-row step here (-1: none yet)
    int32_t n_top = 0;
    TopDim top[kMaxTopK];
  };
  // Attention sinks of one observed full-attention layer (ObserveSpec::sink_layers[k]).
  struct SinkLayer {
    int64_t n_tokens = 0;
    int32_t last_position = -1;  // as Acc::last_position
  };
  struct SinkHead {
    double sum = 0;  // Σ mass over the tokens
    float max = 0;
    int32_t max_position = -1;
  };

  std::shared_ptr<const GlassSpec> spec_;
  int32_t n_layers_;
  int32_t n_embd_, n_ff_, vocab_, n_heads_;
  bool storage_ = false;
  std::vector<uint8_t> observed_;     // [n_layers · kNumLayerPoints] 1 where observed (observing specs only)
  std::vector<Acc> acc_;              // [n_layers · kNumLayerPoints] (observing specs only)
  std::vector<MassiveEvent> events_;  // capacity kMaxEventsPerRequest (with detect_massive)
  int64_t events_dropped_ = 0;
  std::vector<int64_t> applied_rows_;  // [interventions]
  std::vector<Capture> captures_;      // data sized by ensure_storage
  std::vector<int64_t> layer_ns_;      // [n_layers + 1] with observe.layer_time: ns per layer, then the output head
  int64_t timed_steps_ = 0;
  std::vector<SinkLayer> sink_layers_;  // [sink_layers] (with sink_tokens)
  std::vector<SinkHead> sink_heads_;    // [sink_layers · n_heads] (with sink_tokens)
};

// The most heap bytes one sequence's GlassAccumulator holds for a resolved spec (statistics
// slots, the event list, captures, applied-row counters). The server budgets observation with it.
int64_t observation_bytes(const GlassSpec& spec, const ModelConfig& c);

}  // namespace gb

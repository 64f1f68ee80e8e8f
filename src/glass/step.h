// One step's glass-box table (the model's StepTable): per (point, layer), the row ranges of the
// flat batch and what to do on them — the running requests' interventions, their observation and
// captures — plus the engine-wide massive-activation monitor.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "glass/accumulator.h"
#include "glass/report.h"
#include "glass/spec.h"
#include "model/batch.h"
#include "model/hooks.h"

namespace gb {

// ---- The engine-wide monitor ----

struct MonitorConfig {
  bool enabled = false;
  uint32_t points = hook_bit(HookPoint::kResidPost);  // hook_bit()s of per-layer points
  int32_t every_steps = 1;                            // sample one step in this many
  MassiveRule rule;
};

struct MonitorEvent {
  MassiveEvent event;
  int32_t seq_index = 0;  // the batch sequence of the row
};

// What a monitored step saw, per layer over all monitored points and rows. Sized once.
struct MonitorStep {
  static constexpr int32_t kMaxEvents = 256;
  void reset(int32_t n_layers);      // clears, keeping capacity
  std::vector<float> max_abs;        // [n_layers] max |x| over the step's rows
  std::vector<float> max_ratio;      // [n_layers] max over rows of max|x| / median|x|
  std::vector<MonitorEvent> events;  // at most kMaxEvents
  int64_t events_dropped = 0;
  int64_t rows = 0;  // rows checked (summed over layers and points)
};

// Built by the engine (or a test) from the batch's sequences, then handed to Hooks::set_glass;
// the forward pass applies it through Hooks::emit. Grow-only buffers: after the largest step has
// been seen once, building and applying allocate nothing.
class GlassStep final : public StepTable {
 public:
  explicit GlassStep(const ModelConfig& c);

  void clear();
  // One sequence of the batch: rows [row_begin, row_begin + n_rows) hold its positions
  // first_pos, first_pos + 1, ...; n_prompt is its prompt length (token scopes). acc receives its
  // observation and must stay alive until the forward pass returns. The first call for an
  // accumulator allocates its storage (GlassAccumulator::ensure_storage).
  void add_sequence(int32_t row_begin, int32_t n_rows, int32_t first_pos, int32_t n_prompt, GlassAccumulator* acc);
  // Monitors every row of this step at config.points of every layer into *out.
  void set_monitor(const MonitorConfig& config, MonitorStep* out);
  // The threads the monitor's rows are spread over: the forward pass's pool (idle while hooks
  // run). Sizes one buffer set per task, so call it once (it allocates), not per step; null (the
  // default) keeps the monitor on the forward pass's thread. The result is the same either way:
  // rows are split at sequence boundaries and the shares merged in row order.
  void set_pool(ThreadPool* pool);
  // Sorts the table by (point, layer); call after the last add_sequence / set_monitor.
  void finalize();
  // The forward pass that used this table returned: adds its per-layer times to the sequences
  // that observe layer_time (nothing else to do otherwise). Call once per forward.
  void finish_forward();

  bool empty() const;
  int32_t rows_needed() const override { return rows_needed_; }
  uint32_t layer_mask(int32_t layer) const override { return masks_[layer]; }
  uint32_t global_mask() const override { return global_mask_; }
  int32_t n_layers() const override { return n_layers_; }

  // Interventions for (p, layer) on data[n_rows, width] (rows = batch rows 0..n_rows-1), then the
  // observations and the monitor, which see the edited values.
  void apply(HookPoint p, int32_t layer, float* data, int64_t n_rows, int64_t width, const Batch& batch) const override;
  // The captures at a global point from data[n_rows, width], whose row i is batch row row_ids[i].
  void apply_global(HookPoint p, const float* data, int64_t n_rows, int64_t width,
                    const int32_t* row_ids) const override;
  // Attention sinks: the observing sequences' rows (their sink_tokens) at an observed
  // full-attention layer; the masses folded into their accumulators (the token selector and
  // the recompute rule as for the statistics). A row of a sequence that observes other layers
  // than l only is computed at l too when another sequence observes l, and then ignored.
  const uint8_t* sink_rows(int32_t layer) const override;
  void apply_sinks(int32_t layer, const float* mass, int64_t n_rows, int64_t n_heads,
                   const Batch& batch) const override;

 private:
  struct OpEntry {
    int32_t slot, row_begin, row_end;
    const Intervention* op;
    int64_t* rows;  // the accumulator's applied counter
  };
  // Rows [row_begin, row_end) observed of the sequence whose rows in this step are
  // [seq_begin, seq_end) (the layer median's rows; row_begin == row_end: only the median).
  struct ObsEntry {
    int32_t slot, row_begin, row_end, seq_begin, seq_end;
    GlassAccumulator* acc;
  };
  struct CapEntry {
    int32_t slot, row;
    Capture* dst;
  };
  // A skip of rows [row_begin, row_end) at layer `slot`: saved at resid_pre, restored at resid_post.
  struct SkipEntry {
    int32_t slot, row_begin, row_end;
    int64_t* rows;  // the accumulator's applied counter
  };
  // Attention sinks of rows [row_begin, row_end) at layer `slot`, into the accumulator's
  // index-th sink layer.
  struct SinkEntry {
    int32_t slot, row_begin, row_end, index;
    GlassAccumulator* acc;
  };
  // Per-layer points: layer · kNumLayerPoints + point; the global points (captures only) follow.
  int32_t slot(HookPoint p, int32_t layer) const {
    return is_layer_point(p) ? layer * kNumLayerPoints + static_cast<int>(p)
                             : n_layers_ * kNumLayerPoints + (static_cast<int>(p) - kNumLayerPoints);
  }
  template <class E>
  static void sort_by_slot(std::vector<E>& staged, std::vector<E>& sorted, std::vector<int32_t>& offsets,
                           int32_t n_slots);
  // layer_median: the median the rule compares this sequence's rows with (< 0: each row's own).
  void observe_rows(const ObsEntry& e, int32_t s, HookPoint p, int32_t layer, const float* data, int64_t width,
                    const Batch& batch, float layer_median) const;
  // The layer median for e's sequence at slot s (MassiveRule::median), storing a multi-row one in
  // the accumulator; < 0 when the rows compare with their own medians.
  float sequence_median(const ObsEntry& e, int32_t s, const float* data, int64_t width) const;
  // One task's share of the monitor: rows [r0, r1) (whole sequences) into `share`.
  struct MonitorShare {
    std::vector<MonitorEvent> events;  // capacity MonitorStep::kMaxEvents
    int64_t dropped = 0;
    float max_abs = 0, max_ratio = 0;
  };
  void monitor_range(HookPoint p, int32_t layer, const float* data, int64_t r0, int64_t r1, int64_t n_rows,
                     int64_t width, const Batch& batch, MonitorShare& share) const;
  void monitor_rows(HookPoint p, int32_t layer, const float* data, int64_t n_rows, int64_t width,
                    const Batch& batch) const;

  int32_t n_layers_;
  int64_t n_embd_;
  std::vector<uint32_t> masks_;  // [n_layers]
  uint32_t global_mask_ = 0;     // hook_bit()s of the captured global points
  std::vector<OpEntry> ops_stage_, ops_;
  std::vector<ObsEntry> obs_stage_, obs_;
  std::vector<CapEntry> caps_stage_, caps_;
  std::vector<SkipEntry> skips_stage_, skips_;
  std::vector<int32_t> op_offsets_, obs_offsets_, cap_offsets_;  // [n_slots + 1]; caps: + kNumGlobalPoints
  std::vector<int32_t> skip_offsets_;                            // [n_layers + 1]
  std::vector<SinkEntry> sinks_stage_, sinks_;
  std::vector<int32_t> sink_offsets_;  // [n_layers + 1]
  std::vector<uint8_t> sink_n_;        // [≥ rows_needed] each row's sink_tokens (0: none), filled by finalize
  int32_t rows_needed_ = 0;
  const MonitorConfig* monitor_ = nullptr;
  MonitorStep* monitor_out_ = nullptr;
  ThreadPool* pool_ = nullptr;                // set_pool
  mutable std::vector<MonitorShare> shares_;  // [1, or pool_->size()]
  // [rows_needed, n_embd] the skipped rows' resid_pre of the current layer, by batch row (grown in
  // finalize only when the step skips; never shrunk).
  mutable std::vector<float> saved_;
  // observe.layer_time: the sequences timed, and the steady-clock ns of this forward's embed hook
  // (stamps_[0]) and each layer's resid_post (stamps_[l + 1]), -1 until seen. Sized at construction.
  std::vector<GlassAccumulator*> timed_;
  mutable std::vector<int64_t> stamps_;
};

}  // namespace gb

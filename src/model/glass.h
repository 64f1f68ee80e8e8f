// The glass box inside the batch: per-request interventions and observation, and the engine-wide
// massive-activation monitor, all as data that the forward pass applies at its hook points
// (never user callbacks). A request carries an immutable GlassSpec; its GlassAccumulator gathers
// what the forward passes saw; each step the engine lists the running requests' specs in a
// GlassStep (row ranges of the flat batch per (point, layer)), which Hooks::emit applies.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/hooks.h"

namespace gb {

inline constexpr int kNumLayerPoints = static_cast<int>(HookPoint::kEmbed);  // resid_pre .. resid_post
inline constexpr int32_t kMaxTopK = 16;                 // ObserveSpec::top_k
inline constexpr int32_t kMaxSelectedPositions = 256;   // TokenSelector::positions
inline constexpr int64_t kMaxCaptureFloats = 1 << 20;   // raw vectors per request (4 MiB)
inline constexpr int32_t kMaxEventsPerRequest = 256;    // massive events kept per request; the rest are counted

// Which tokens of a sequence an intervention or observation applies to. A "token" is a row of the
// forward pass: the hidden state computed for the token at that position (the row at position p
// predicts token p + 1). Prompt tokens are positions < prompt length, generated ones the rest.
enum class TokenScope : uint8_t { kAll, kPrompt, kGenerated, kFirst, kPositions };
std::string_view token_scope_name(TokenScope s);  // "all", "prompt", "generated", "first", "positions"
std::optional<TokenScope> parse_token_scope(std::string_view name);

struct TokenSelector {
  TokenScope scope = TokenScope::kAll;
  std::vector<int32_t> positions = {};  // kPositions: 0-based positions (sorted and deduplicated at resolution)
};

enum class InterventionOp : uint8_t { kScale, kAdd, kSet, kClamp, kAblate, kClipMassive };
std::string_view intervention_op_name(InterventionOp op);  // "scale", "add", "set", "clamp", "ablate", "clip_massive"
std::optional<InterventionOp> parse_intervention_op(std::string_view name);

// One edit of the hidden state at a per-layer hook point, for layers [layer_first, layer_last].
//   scale:        x_d ← x_d · (1 + strength)            on dims (empty: every dim)
//   add:          x_d ← x_d + strength                  on dims; or x ← x + strength · vector
//   set:          x_d ← strength                        on dims
//   clamp:        x_d ← clamp(x_d, −strength, strength) on dims (strength ≥ 0; ∞ allowed)
//   ablate:       x ← x − strength · (x·u) u            u = vector, normalised at resolution
//   clip_massive: where |x_d| > threshold · median|x| of the row: x_d ← vector[d] (a per-dim mean)
//                 when vector is given, else x_d · strength (0 zeroes them)
struct Intervention {
  InterventionOp op = InterventionOp::kScale;
  HookPoint point = HookPoint::kResidPost;
  int32_t layer_first = 0;  // 0-based; -1 (with layer_last -1): every layer
  int32_t layer_last = 0;   // inclusive
  std::vector<int32_t> dims = {};
  float strength = 0;
  std::vector<float> vector = {};  // [width of the point] f32 (n_embd, or n_ff for mlp_act), or empty
  float threshold = 0;
  TokenSelector tokens = {};
  std::string label = {};  // free text reported back in `applied` (e.g. "control_vector:happy")
};

// The massive-activation rule (Sun et al. 2024): |x| > min_abs and |x| > min_ratio · median|x|
// of that token's row at that (layer, point).
struct MassiveRule {
  float min_abs = 100.0f;
  float min_ratio = 1000.0f;
};

// A raw vector to copy out: the row of (point, layer) at `position`. Global points too (embed,
// final_norm, logits; layer -1): a final_norm or logits capture makes its position an output row
// of the forward pass, so it costs a vocab-wide row of logits and counts vocab floats to the cap.
struct CaptureRequest {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;
  int32_t position = 0;
};

struct ObserveSpec {
  bool enabled = false;
  std::vector<HookPoint> points;  // per-layer points; empty: resid_post
  std::vector<int32_t> layers;    // 0-based; empty: every layer
  TokenSelector tokens;
  int32_t top_k = 0;              // top dims by |x| per (layer, point), 0 .. kMaxTopK
  bool detect_massive = true;     // massive events on the observed rows
  std::vector<CaptureRequest> captures;  // raw vectors; Σ widths ≤ max_capture_floats
  int64_t max_capture_floats = kMaxCaptureFloats;  // a tool (glassbox dump) may raise it; the server never does
};

// Everything the glass box does for one request.
struct GlassSpec {
  ObserveSpec observe;
  std::vector<Intervention> interventions;  // applied in this order at each point
  MassiveRule massive;
  // Set by resolve_glass_spec: the model shape the spec was checked against (the engine refuses
  // a spec resolved for another model).
  struct Shape {
    int32_t n_layers = 0, n_embd = 0, n_ff = 0;
    bool operator==(const Shape&) const = default;
  } resolved_for;
};
// The Shape a spec resolved for c has.
GlassSpec::Shape glass_shape(const ModelConfig& c);

// Checks spec against the model and resolves it: layer ranges (-1 → every layer), dims and
// vector widths against the point, positions sorted, ablation directions normalised. Every error
// names the field ("interventions[1].dims[0]: 4000 is outside mlp_act's 3072 dims").
Result<std::shared_ptr<const GlassSpec>> resolve_glass_spec(GlassSpec spec, const ModelConfig& c);

// A hash of everything in a resolved spec that changes the KV cache (the interventions; not the
// observation), 0 when there are none. Prompt-relative token scopes make KV depend on the prompt
// length, so it is mixed in then. The engine mixes this into the request's cache_salt.
uint64_t glass_kv_salt(const GlassSpec& spec, int32_t n_prompt);

// ---- What a request gets back ----

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
  float rms = 0;              // sqrt(mean x²) over every observed value
  float mean = 0;             // mean x over every observed value
  std::vector<TopDim> top;    // up to top_k dims by their largest |x|, largest first
};

struct MassiveEvent {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;
  int32_t position = 0;   // token position in its sequence
  int32_t dim = 0;
  float value = 0;        // x (signed)
  float median_abs = 0;   // median |x| of that row
  float ratio = 0;        // |x| / median_abs (∞ when the median is 0)
  bool abs_test = false;  // |x| > min_abs
  bool ratio_test = false;  // |x| > min_ratio · median_abs
};

struct Capture {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;
  int32_t position = 0;
  bool filled = false;      // false: the position was never computed (served from a cache, or not reached)
  std::vector<float> data;  // [width] f32
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
  float vector_norm = 0;    // L2 norm of the vector as given (ablate: before normalisation)
  TokenSelector tokens;
  std::string label;
  int64_t rows = 0;         // (token, layer) rows it was applied to
};

// An intervention as resolved (rows = 0: the caller counts them).
AppliedIntervention applied_intervention(const Intervention& iv);

struct GlassReport {
  std::vector<PointStats> stats;  // observed (layer, point) pairs, layer-major
  std::vector<MassiveEvent> events;  // in the order seen, at most kMaxEventsPerRequest
  int64_t events_dropped = 0;
  std::vector<Capture> captures;  // in ObserveSpec::captures order
  std::vector<AppliedIntervention> applied;  // in GlassSpec::interventions order
};

// Per-request state the forward passes write into; owned by the engine's sequence. Allocates
// everything at construction, so the step path never does.
class GlassAccumulator {
 public:
  GlassAccumulator(std::shared_ptr<const GlassSpec> spec, const ModelConfig& c);
  const GlassSpec& spec() const { return *spec_; }
  GlassReport report() const;
  // Appends to *positions those in [first_pos, first_pos + n) that a final_norm or logits capture
  // needs as output rows of the forward pass (ascending, once each).
  void output_positions(int32_t first_pos, int32_t n, std::vector<int32_t>* positions) const;

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
    int32_t n_top = 0;
    TopDim top[kMaxTopK];
  };
  std::shared_ptr<const GlassSpec> spec_;
  int32_t n_layers_;
  std::vector<uint8_t> observed_;      // [n_layers · kNumLayerPoints] 1 where observed
  std::vector<Acc> acc_;               // [n_layers · kNumLayerPoints]
  std::vector<MassiveEvent> events_;   // capacity kMaxEventsPerRequest
  int64_t events_dropped_ = 0;
  std::vector<int64_t> applied_rows_;  // [interventions]
  std::vector<Capture> captures_;      // data sized at construction
};

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
  void reset(int32_t n_layers);  // clears, keeping capacity
  std::vector<float> max_abs;    // [n_layers] max |x| over the step's rows
  std::vector<float> max_ratio;  // [n_layers] max over rows of max|x| / median|x|
  std::vector<MonitorEvent> events;  // at most kMaxEvents
  int64_t events_dropped = 0;
  int64_t rows = 0;              // rows checked (summed over layers and points)
};

// One step's glass-box table: per (point, layer), the row ranges of the flat batch and what to do
// on them. Built by the engine (or a test) from the batch's sequences, then handed to
// Hooks::set_glass; the forward pass applies it through Hooks::emit. Grow-only buffers: after the
// largest step has been seen once, building and applying allocate nothing.
class GlassStep {
 public:
  explicit GlassStep(const ModelConfig& c);

  void clear();
  // One sequence of the batch: rows [row_begin, row_begin + n_rows) hold its positions
  // first_pos, first_pos + 1, ...; n_prompt is its prompt length (token scopes). acc receives its
  // observation and must stay alive until the forward pass returns.
  void add_sequence(int32_t row_begin, int32_t n_rows, int32_t first_pos, int32_t n_prompt, GlassAccumulator* acc);
  // Monitors every row of this step at config.points of every layer into *out.
  void set_monitor(const MonitorConfig& config, MonitorStep* out);
  // Sorts the table by (point, layer); call after the last add_sequence / set_monitor.
  void finalize();

  bool empty() const;
  // One past the highest batch row the table touches (the forward checks it against the batch).
  int32_t rows_needed() const { return rows_needed_; }
  uint32_t layer_mask(int32_t layer) const { return masks_[layer]; }
  uint32_t global_mask() const { return global_mask_; }  // hook_bit()s of captured global points
  int32_t n_layers() const { return n_layers_; }

  // Interventions for (p, layer) on data[n_rows, width] (rows = batch rows 0..n_rows-1), then the
  // observations and the monitor, which see the edited values.
  void apply(HookPoint p, int32_t layer, float* data, int64_t n_rows, int64_t width, const Batch& batch) const;
  // The captures at a global point (embed, final_norm, logits) from data[n_rows, width], whose row
  // i is batch row row_ids[i].
  void apply_global(HookPoint p, const float* data, int64_t n_rows, int64_t width, const int32_t* row_ids) const;

 private:
  struct OpEntry {
    int32_t slot, row_begin, row_end;
    const Intervention* op;
    int64_t* rows;  // the accumulator's applied counter
  };
  struct ObsEntry {
    int32_t slot, row_begin, row_end;
    GlassAccumulator* acc;
  };
  struct CapEntry {
    int32_t slot, row;
    Capture* dst;
  };
  // Per-layer points: layer · kNumLayerPoints + point; global points (captures only) follow.
  int32_t slot(HookPoint p, int32_t layer) const {
    return is_layer_point(p) ? layer * kNumLayerPoints + static_cast<int>(p)
                             : n_layers_ * kNumLayerPoints + (static_cast<int>(p) - kNumLayerPoints);
  }
  template <class E>
  static void sort_by_slot(std::vector<E>& staged, std::vector<E>& sorted, std::vector<int32_t>& offsets, int32_t n_slots);

  int32_t n_layers_;
  std::vector<uint32_t> masks_;  // [n_layers]
  uint32_t global_mask_ = 0;
  std::vector<OpEntry> ops_stage_, ops_;
  std::vector<ObsEntry> obs_stage_, obs_;
  std::vector<CapEntry> caps_stage_, caps_;
  std::vector<int32_t> op_offsets_, obs_offsets_, cap_offsets_;  // [n_slots + 1]
  int32_t rows_needed_ = 0;
  const MonitorConfig* monitor_ = nullptr;
  MonitorStep* monitor_out_ = nullptr;
  mutable std::vector<float> scratch_;  // [max(n_embd, n_ff)] median workspace
};

}  // namespace gb

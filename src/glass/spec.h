// What the glass box does for one request, as plain data: interventions (edits of the hidden
// state at per-layer hook points), observation (statistics, massive-activation events, raw
// captures) and the massive-activation rule. A spec is resolved once against the model's shape
// and then shared, immutable, by the engine's sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/hooks.h"

namespace gb {

inline constexpr int kNumLayerPoints = static_cast<int>(HookPoint::kEmbed);  // resid_pre .. resid_post
inline constexpr int kNumGlobalPoints = kNumHookPoints - kNumLayerPoints;    // embed, final_norm, logits
// final_norm and logits exist only for the output rows of a forward pass.
inline constexpr bool is_output_point(HookPoint p) { return p == HookPoint::kFinalNorm || p == HookPoint::kLogits; }
inline constexpr int32_t kMaxTopK = 16;                // ObserveSpec::top_k
inline constexpr int32_t kMaxSelectedPositions = 256;  // TokenSelector::positions
inline constexpr int64_t kMaxCaptureFloats = 1 << 20;  // raw vectors per sequence (4 MiB)
inline constexpr int32_t kMaxEventsPerRequest = 256;   // massive events kept per sequence; the rest are counted
inline constexpr int32_t kMaxSinkTokens = 16;          // ObserveSpec::sink_tokens

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

enum class InterventionOp : uint8_t { kScale, kAdd, kSet, kClamp, kAblate, kClipMassive, kSkip };
inline constexpr int kNumInterventionOps = 7;
// "scale", "add", "set", "clamp", "ablate", "clip_massive", "skip"
std::string_view intervention_op_name(InterventionOp op);
std::optional<InterventionOp> parse_intervention_op(std::string_view name);

// One edit of the hidden state at a per-layer hook point, for layers [layer_first, layer_last].
//   scale:        x_d ← x_d · (1 + strength)            on dims (empty: every dim)
//   add:          x_d ← x_d + strength                  on dims; or x ← x + strength · vector
//   set:          x_d ← strength                        on dims
//   clamp:        x_d ← clamp(x_d, −strength, strength) on dims (strength ≥ 0; ∞ allowed)
//   ablate:       x ← x − strength · (x·u) u            u = vector, normalised at resolution
//   clip_massive: where |x_d| > threshold · median|x| of the row: x_d ← vector[d] (a per-dim mean)
//                 when vector is given, else x_d · strength (0 zeroes them)
//   skip:         resid_post ← resid_pre of each layer: the row leaves the layer exactly as it
//                 entered it (bitwise), as in a model without that layer. point is resid_post;
//                 no dims, strength, vector or threshold. resid_pre is taken after that point's
//                 interventions; resid_post's interventions apply after the restore. The layer
//                 still runs for the batch (its inner points are computed and observable, and
//                 its KV entries are written), but a skipped row's residual never depends on them.
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

// The massive-activation rule (Sun et al. 2024): a row's largest |x| is tested against
//   abs_test:   |x| > min_abs
//   ratio_test: |x| > min_ratio · median
// at that (layer, point), and the row is an event when the tests fire_on asks for hold. The median
// is, with median = layer (the paper's: "the median magnitude of the layer's hidden states"), the
// median |x| over every value of the sequence's rows in the step — a prompt prefilled in one step
// is exactly the paper's rule over the prompt's tokens, a chunked prompt uses each chunk's — and a
// step with one row of the sequence (decode) uses the layer median stored from the sequence's
// last multi-row step at that (layer, point), or its own row's median when there is none. With
// median = token it is the row's own median |x|.
enum class MassiveMedian : uint8_t { kLayer, kToken };
std::string_view massive_median_name(MassiveMedian m);  // "layer", "token"
std::optional<MassiveMedian> parse_massive_median(std::string_view name);
enum class MassiveFire : uint8_t { kBoth, kAbs, kRatio, kEither };
std::string_view massive_fire_name(MassiveFire f);  // "both", "abs", "ratio", "either"
std::optional<MassiveFire> parse_massive_fire(std::string_view name);

struct MassiveRule {
  float min_abs = 100.0f;
  float min_ratio = 1000.0f;
  MassiveMedian median = MassiveMedian::kLayer;
  MassiveFire fire_on = MassiveFire::kBoth;  // both tests, the absolute one, the ratio one, either of them
};

// The rule applied to a row's max |x| and the median it is compared with: the one test the
// per-request detector and the engine-wide monitor share.
struct MassiveTest {
  bool abs_test = false;    // max_abs > min_abs
  bool ratio_test = false;  // max_abs > min_ratio · median_abs
  bool fires = false;       // the tests rule.fire_on asks for hold
  bool massive() const { return fires; }
};
inline MassiveTest is_massive(const MassiveRule& rule, float max_abs, float median_abs) {
  MassiveTest t;
  t.abs_test = max_abs > rule.min_abs;
  t.ratio_test = max_abs > rule.min_ratio * median_abs;
  switch (rule.fire_on) {
    case MassiveFire::kBoth: t.fires = t.abs_test && t.ratio_test; break;
    case MassiveFire::kAbs: t.fires = t.abs_test; break;
    case MassiveFire::kRatio: t.fires = t.ratio_test; break;
    case MassiveFire::kEither: t.fires = t.abs_test || t.ratio_test; break;
  }
  return t;
}

// Whether the median can matter for a row of this max |x|: under kBoth and kAbs a row at or
// below min_abs never fires, whatever the median (is_massive then need not be asked).
inline bool massive_needs_median(const MassiveRule& rule, float max_abs) {
  return max_abs > rule.min_abs || rule.fire_on == MassiveFire::kRatio || rule.fire_on == MassiveFire::kEither;
}

// A raw vector to copy out: the row of (point, layer) at `position`. Global points too (embed,
// final_norm, logits; layer -1): a final_norm or logits capture makes its position an output row
// of the forward pass, so it costs a vocab-wide row of logits and counts vocab floats to the cap.
// The HTTP API takes per-layer points only; `glassbox dump` captures the global ones.
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
  int32_t top_k = 0;                               // top dims by |x| per (layer, point), 0 .. kMaxTopK
  bool detect_massive = true;                      // massive events on the observed rows
  bool layer_time = false;                         // wall time per layer of the sequence's steps (LayerTime)
  std::vector<CaptureRequest> captures;            // raw vectors; Σ widths ≤ max_capture_floats
  int64_t max_capture_floats = kMaxCaptureFloats;  // a tool (glassbox dump) may raise it; the server never does
  // Attention sinks: per observed full-attention layer and query head, the softmax mass the
  // observed tokens put on key positions [0, sink_tokens) of their sequence; 0: off, else
  // 1 .. kMaxSinkTokens. Linear-attention layers have no softmax and report none.
  int32_t sink_tokens = 0;
  std::vector<int32_t> sink_layers = {};  // set by resolution (with sink_tokens): the observed layers with softmax
                                          // attention, ascending
};
// Whether layer l of c attends with a softmax over the KV cache (not a linear-attention layer).
inline bool softmax_attention_layer(const ModelConfig& c, int32_t l) {
  return static_cast<size_t>(l) >= c.layer_kinds.size() ||
         c.layer_kinds[static_cast<size_t>(l)] == LayerKind::kAttention;
}

// Everything the glass box does for one request.
struct GlassSpec {
  ObserveSpec observe;
  std::vector<Intervention> interventions;  // applied in this order at each point
  MassiveRule massive;
  // Set by resolution: the model shape the spec was checked against (the engine refuses a spec
  // resolved for another model).
  struct Shape {
    int32_t n_layers = 0, n_embd = 0, n_ff = 0;
    bool operator==(const Shape&) const = default;
  } resolved_for;
};
// The Shape a spec resolved for c has.
GlassSpec::Shape glass_shape(const ModelConfig& c);
// The width of a point's rows: n_ff for mlp_act, vocab for logits, else n_embd.
int64_t point_width(HookPoint p, const ModelConfig& c);

// Checks one intervention against the model and resolves it in place: layer range (-1 → every
// layer), dims and vector width against the point, positions sorted, an ablation direction
// normalised. Resolving is not idempotent (normalisation), so each intervention is resolved once.
// Errors name the field under `where` ("interventions[1].dims[0]: 4000 is outside mlp_act's 3072 dims").
Status resolve_intervention(Intervention& iv, const ModelConfig& c, const std::string& where);
// Checks and resolves the observation part (points, layers, top_k, tokens, captures) in place;
// errors name "observe.<field>".
Status resolve_observe(ObserveSpec& ob, const ModelConfig& c);
Status check_massive_rule(const MassiveRule& m);

// Checks spec against the model and resolves it (every intervention, the observation, the rule).
Result<std::shared_ptr<const GlassSpec>> resolve_glass_spec(GlassSpec spec, const ModelConfig& c);
// A spec whose interventions were each resolved already (resolve_intervention) and whose
// observation was resolved (resolve_observe): stamps the shape without resolving again.
std::shared_ptr<const GlassSpec> seal_resolved_spec(GlassSpec spec, const ModelConfig& c);

// A hash of everything in a resolved spec that changes the KV cache (the interventions; not the
// observation), 0 when there are none. Prompt-relative token scopes make KV depend on the prompt
// length, so it is mixed in then. The engine mixes this into the request's cache_salt.
uint64_t glass_kv_salt(const GlassSpec& spec, int32_t n_prompt);

}  // namespace gb

// The glass box's JSON codec: the `glassbox` request syntax (observation, interventions, presets,
// library and control vectors, the massive rule, the repetition stop) parsed and resolved in one
// pass into spec parts, the same items re-encoded canonically for audit rows, and reports as JSON.
//
// Request syntax (every field optional):
//   "glassbox": {
//     "observe": {"points": ["resid_post"] | "all", "layers": "all" | [0, 3] | {"from": 2, "to": 9},
//                 "tokens": "all" | "prompt" | "generated" | "first" | [positions], "top_k": 4,
//                 "stats": ["max_abs", "median_abs", "rms", "mean", "top_k"], "detect_massive": true,
//                 "capture": [{"point": "resid_post", "layer": 3, "token": 0}], "layer_time": false,
//                 "attention_sinks": true | {"tokens": 4}},
//     "interventions": [
//       {"op": "scale", "point": "mlp_act", "layer": 14, "dims": [8949], "strength": -0.98},
//       {"op": "add", "point": "resid_post", "layers": {"from": 2, "to": 5}, "vector": [...] | "name", "strength": 4},
//       {"op": "clamp", "point": "resid_post", "layers": "all", "strength": 30 | "inf"},
//       {"op": "clip_massive", "point": "resid_post", "layer": 2, "threshold": 100, "strength": 0 | "mean": [...]},
//       {"op": "skip", "layer": 3 | "layers": {"from": 2, "to": 4}},   (point: resid_post or absent)
//       {"control_vector": "happy", "strength": 0.8},
//       {"preset": "neuron-14-8949-low"}],
//     "massive": {"min_abs": 100, "min_ratio": 1000, "median": "layer" | "token",
//                 "fire_on": "both" | "abs" | "ratio" | "either"},
//     "stop_on_repetition": {"ngram": 4, "window": 64, "max_rate": 0.6}
//   }
//
// The codec walks a fixed structure (no recursion over user JSON), never copies or re-serializes
// the input, and its messages quote at most a short prefix of a value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/control_vector.h"
#include "glass/error.h"
#include "glass/limits.h"
#include "glass/repetition.h"
#include "glass/report.h"
#include "glass/spec.h"
#include "model/config.h"

namespace gb {

// The names a request's items may refer to.
struct GlassCatalog {
  const std::map<std::string, std::shared_ptr<const InterventionSet>>* presets = nullptr;
  const std::map<std::string, std::shared_ptr<const ControlVector>>* vectors = nullptr;
};

struct ParseContext {
  const ModelConfig* model = nullptr;
  GlassCatalog catalog;
  const GlassLimits* limits = nullptr;                   // when set: every item is checked against it (check_item)
  int32_t max_interventions = kDefaultMaxInterventions;  // after expansion, counting what *out holds already
};

// Parses a list of interventions (request syntax) under `where` ("glassbox.interventions") and
// appends them, expanded (presets, library vectors per layer, control vectors, layer runs) and
// resolved, to *out. allow_presets: items may be {"preset": NAME} (not inside a preset).
std::optional<GlassError> parse_interventions(const nlohmann::json& list, const std::string& where,
                                              const ParseContext& ctx, bool allow_presets, InterventionSet* out);
// A control vector given as JSON: {"<layer>": [n_embd numbers], ...} (a layer at most once).
// *canonical: the directions re-encoded.
std::optional<GlassError> parse_vector_directions(const nlohmann::json& directions, const ModelConfig& m,
                                                  const std::string& name, ControlVector* out,
                                                  nlohmann::json* canonical);

// A request's `glassbox` object, parsed and resolved.
struct GlassRequestParts {
  bool observes = false;  // an observe object was given (observe is then resolved)
  ObserveSpec observe;
  MassiveRule massive;
  std::vector<std::string> stats;  // which statistics the report lists (empty: all)
  std::optional<RepetitionStop> stop_on_repetition;
  bool asks_interventions = false;  // a non-empty interventions list was given
  InterventionSet interventions;
  nlohmann::json canonical = nlohmann::json::object();  // the object re-encoded (bounded by the limits)
};

// What a request uses, asked of the caller (roles, the interventions switch) before that part is
// parsed; an error refuses the request.
enum class GlassUse : uint8_t { kObserve, kIntervene };
using GlassGate = std::function<std::optional<GlassError>(GlassUse)>;

std::optional<GlassError> parse_glass_request(const nlohmann::json& ext, const ParseContext& ctx, const GlassGate& gate,
                                              GlassRequestParts* out);

// A `glassbox` object for a local tool (`glassbox generate`, `score`: the researcher's own
// process): the same syntax and resolution as a request, with no policy — no caps beyond the
// request syntax's, no roles, no presets; `vectors` names the control vectors it may use (may be
// null). The spec is sealed for m; stats and stop_on_repetition as parsed.
struct LocalGlass {
  std::shared_ptr<const GlassSpec> spec;  // null when the object asks for nothing
  std::vector<std::string> stats;
  std::optional<RepetitionStop> stop_on_repetition;
};
Result<LocalGlass> parse_local_glass(const nlohmann::json& ext, const ModelConfig& m,
                                     const std::map<std::string, std::shared_ptr<const ControlVector>>* vectors);

// The per-choice report: stats per layer and point, events, captures and applied. stats filters
// the report's fields (empty: all).
nlohmann::json glass_report_json(const GlassReport& r, const std::vector<std::string>& stats);
// The report's attention sinks (with sink_tokens > 0): {"sink_tokens": N, "layers": [{"layer",
// "tokens", "mean": [per head], "max": [per head], "max_token": [per head]}]}; linear-attention
// layers are not listed. glass_report_json puts it under "attention_sinks".
nlohmann::json attention_sinks_json(const GlassReport& r);

// observe.layer_time's report: {steps, total_ms, layers: [{layer, ms, share}], head: {ms, share}},
// shares of total_ms (the layers' and the head's sum to 1).
nlohmann::json layer_time_json(const LayerTime& t);

// A float as the shortest decimal that reads back as it (-0.98, not -0.9800000190734863); "inf",
// "-inf", "nan" for the others.
nlohmann::json float_json(float v);

// A bounded description of a JSON value for messages: a short scalar as written (a long string
// is cut), "a list" / "an object" otherwise.
std::string json_brief(const nlohmann::json& v);
// A name from the input, cut to 64 characters.
std::string name_brief(const std::string& s);

}  // namespace gb

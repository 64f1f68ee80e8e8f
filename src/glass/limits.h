// The admin's bounds on interventions (the server's glassbox_policy without its roles): caps per
// op, the layers and points that may be touched, how many interventions one request may resolve
// to — and the check that a request's interventions, taken together, stay within the caps.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "glass/error.h"
#include "glass/spec.h"
#include "model/config.h"

namespace gb {

inline constexpr int32_t kDefaultMaxInterventions = 256;

struct GlassLimits {
  // Largest |strength| per op (indexed by InterventionOp); +inf: not capped. See check_combined
  // for what a cap bounds when items stack. skip has no strength: it is never capped (the roles,
  // allowed_layers and allowed_points — its point is resid_post — bound it).
  std::array<double, kNumInterventionOps> caps = {
      std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::infinity()};
  std::vector<int32_t> allowed_layers;                   // empty: every layer
  std::vector<HookPoint> allowed_points;                 // empty: every per-layer point
  int32_t max_interventions = kDefaultMaxInterventions;  // resolved interventions per request

  double cap(InterventionOp op) const { return caps[static_cast<size_t>(op)]; }
  bool capped(InterventionOp op) const { return cap(op) < std::numeric_limits<double>::infinity(); }
};

// A list of interventions resolved against the model: what a request's items, a preset, a session
// or the default set expanded to. Immutable once made (shared by the admin state's snapshots).
struct InterventionSet {
  std::vector<Intervention> interventions;         // each resolved once (resolve_intervention)
  std::vector<std::string> sources;                // [interventions]: the item it came from, for messages
  nlohmann::json items = nlohmann::json::array();  // the items as given, re-encoded in request syntax
};

// Appends a stored set to *out, refusing it when the total would pass max_interventions. what
// names the set ("session exp-1"); the sources become "<what> <source>".
std::optional<GlassError> append_set(const InterventionSet& set, const std::string& what, int32_t max_interventions,
                                     InterventionSet* out);

// One resolved intervention against the limits on its own: its op's cap, the layers and points.
// `where` names the item ("glassbox.interventions[0]").
//   scale, set, ablate, clip_massive, clamp: |strength| ≤ cap
//   add: |strength| ≤ cap, and with a vector |strength| · ‖vector‖ ≤ cap (the size of the shift)
//   clip_massive with a mean: every |mean_d| ≤ the set cap (it writes those values, as set does)
//   skip: no cap (no strength); only the layers and the point (resid_post)
std::optional<GlassError> check_item(const Intervention& iv, const std::string& where, const GlassLimits& limits);

// The stacked effect of a request's interventions (its own, its session's, the default set's)
// per (point, layer) and dim, over every layer each covers (token selectors are ignored: items
// on different tokens are counted as if they met):
//   add:          Σ |s| of dim adds covering d + Σ |s|·‖v‖ of vector adds ≤ cap
//   scale:        |Π (1 + s) − 1| over the scales covering d ≤ cap
//   ablate:       Π max(1, |1 − s|) ≤ 1 + cap (the most any direction can grow)
//   clip_massive: Π max(1, |s|) ≤ max(1, cap)
// (set and clamp do not stack: the last one wins.) sources[i] names interventions[i] in the
// message; param is the error's param.
std::optional<GlassError> check_combined(const std::vector<Intervention>& interventions,
                                         const std::vector<std::string>& sources, const GlassLimits& limits,
                                         const ModelConfig& c, const std::string& param);

// A stored set under the limits, as requests would meet it alone: its size, every item
// (check_item), the stacked effect (check_combined).
std::optional<GlassError> check_set(const InterventionSet& set, const GlassLimits& limits, const ModelConfig& c);

// A float as its shortest decimal ("-0.98", "inf"), for messages.
std::string short_float(double v);

}  // namespace gb

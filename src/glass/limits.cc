// Caps, layers and points: per item and for the stacked effect of a request.
#include "glass/limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gb {

namespace {

constexpr double kRelTol = 1e-9;  // sums of logs and removals round; a single item is checked exactly first

std::string cap_field(InterventionOp op) { return "glassbox_policy.caps." + std::string(intervention_op_name(op)); }

double vector_norm(const std::vector<float>& v) {
  double n2 = 0;
  for (float x : v) n2 += static_cast<double>(x) * x;
  return std::sqrt(n2);
}

bool over(double value, double cap) { return !(value <= cap * (1 + kRelTol) + 1e-12); }

// The running stack of one point while sweeping over its layers.
struct Stack {
  // add
  double add_all = 0;   // Σ |s| of adds on every dim
  double add_norm = 0;  // Σ |s|·‖v‖ of vector adds
  std::vector<double> add_dim;
  // scale: Π (1 + s) as log|·|, zero and negative factor counts
  double scale_log = 0;
  int32_t scale_zero = 0, scale_neg = 0;
  std::vector<double> scale_dim_log;
  std::vector<int32_t> scale_dim_zero, scale_dim_neg;
  // ablate / clip_massive: Σ log max(1, gain)
  double ablate_log = 0, clip_log = 0;
  // dims that ever had a per-dim entry, and the ones changed at this layer
  std::vector<int32_t> seen, touched;
  std::vector<uint8_t> seen_flag, touched_flag;
  bool scalar_changed = false;

  void size_for(int64_t width) {
    add_dim.assign(static_cast<size_t>(width), 0.0);
    scale_dim_log.assign(static_cast<size_t>(width), 0.0);
    scale_dim_zero.assign(static_cast<size_t>(width), 0);
    scale_dim_neg.assign(static_cast<size_t>(width), 0);
    seen_flag.assign(static_cast<size_t>(width), 0);
    touched_flag.assign(static_cast<size_t>(width), 0);
  }
  void touch(int32_t d) {
    if (!seen_flag[d]) seen_flag[d] = 1, seen.push_back(d);
    if (!touched_flag[d]) touched_flag[d] = 1, touched.push_back(d);
  }
  void apply(const Intervention& iv, double sign) {
    const double s = iv.strength;
    switch (iv.op) {
      case InterventionOp::kAdd:
        if (!iv.vector.empty()) {
          add_norm += sign * std::fabs(s) * vector_norm(iv.vector);
          scalar_changed = true;
        } else if (iv.dims.empty()) {
          add_all += sign * std::fabs(s);
          scalar_changed = true;
        } else {
          for (int32_t d : iv.dims) add_dim[d] += sign * std::fabs(s), touch(d);
        }
        break;
      case InterventionOp::kScale: {
        const double f = 1.0 + s;
        const int32_t z = f == 0 ? 1 : 0, ng = f < 0 ? 1 : 0;
        const double lg = f == 0 ? 0.0 : std::log(std::fabs(f));
        const int32_t k = sign > 0 ? 1 : -1;
        if (iv.dims.empty()) {
          scale_log += sign * lg, scale_zero += k * z, scale_neg += k * ng;
          scalar_changed = true;
        } else {
          for (int32_t d : iv.dims) {
            scale_dim_log[d] += sign * lg, scale_dim_zero[d] += k * z, scale_dim_neg[d] += k * ng;
            touch(d);
          }
        }
        break;
      }
      case InterventionOp::kAblate:
        ablate_log += sign * std::log(std::max(1.0, std::fabs(1.0 - s)));
        scalar_changed = true;
        break;
      case InterventionOp::kClipMassive:
        clip_log += sign * std::log(std::max(1.0, std::fabs(s)));
        scalar_changed = true;
        break;
      case InterventionOp::kSet:
      case InterventionOp::kClamp:
      case InterventionOp::kSkip: break;
    }
  }
  double add_at(int32_t d) const { return add_all + add_norm + (d >= 0 ? add_dim[d] : 0.0); }
  double scale_at(int32_t d) const {
    const int32_t z = scale_zero + (d >= 0 ? scale_dim_zero[d] : 0);
    const int32_t ng = scale_neg + (d >= 0 ? scale_dim_neg[d] : 0);
    if (z > 0) return 0.0;
    const double m = std::exp(scale_log + (d >= 0 ? scale_dim_log[d] : 0.0));
    return ng % 2 != 0 ? -m : m;
  }
};

bool stacks(InterventionOp op) {
  return op == InterventionOp::kAdd || op == InterventionOp::kScale || op == InterventionOp::kAblate ||
         op == InterventionOp::kClipMassive;
}

bool covers_dim(const Intervention& iv, int32_t d) {
  if (d < 0 || iv.dims.empty()) return true;
  return std::binary_search(iv.dims.begin(), iv.dims.end(), d);
}

}  // namespace

std::optional<GlassError> append_set(const InterventionSet& set, const std::string& what, int32_t max_interventions,
                                     InterventionSet* out) {
  if (static_cast<int64_t>(out->interventions.size() + set.interventions.size()) > max_interventions) {
    return glass_invalid(what, what + ": its " + std::to_string(set.interventions.size()) + " interventions with the " +
                                   std::to_string(out->interventions.size()) + " before them are more than " +
                                   std::to_string(max_interventions) + " (glassbox_policy.max_interventions)");
  }
  for (size_t i = 0; i < set.interventions.size(); ++i) {
    out->interventions.push_back(set.interventions[i]);
    out->sources.push_back(what + " " + (i < set.sources.size() ? set.sources[i] : ""));
  }
  return std::nullopt;
}

std::optional<GlassError> check_set(const InterventionSet& set, const GlassLimits& limits, const ModelConfig& c) {
  if (static_cast<int64_t>(set.interventions.size()) > limits.max_interventions) {
    return glass_invalid("interventions", std::to_string(set.interventions.size()) + " interventions, more than " +
                                              std::to_string(limits.max_interventions) +
                                              " (glassbox_policy.max_interventions)");
  }
  for (size_t i = 0; i < set.interventions.size(); ++i) {
    if (auto e = check_item(set.interventions[i], set.sources[i], limits)) return e;
  }
  return check_combined(set.interventions, set.sources, limits, c, "interventions");
}

std::string short_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::optional<GlassError> check_item(const Intervention& iv, const std::string& where, const GlassLimits& limits) {
  const std::string op(intervention_op_name(iv.op));
  if (limits.capped(iv.op)) {
    const double cap = limits.cap(iv.op);
    if (std::fabs(static_cast<double>(iv.strength)) > cap) {
      return glass_invalid(where + ".strength",
                           where + ".strength: " + short_float(iv.strength) + " is over the cap of " +
                               short_float(cap) + " for " + op + " (" + cap_field(iv.op) +
                               "); requests over a cap are refused, not clamped",
                           "cap_exceeded");
    }
    if (iv.op == InterventionOp::kAdd && !iv.vector.empty()) {
      const double shift = std::fabs(static_cast<double>(iv.strength)) * vector_norm(iv.vector);
      if (shift > cap) {
        return glass_invalid(where + ".vector",
                             where + ".vector: |strength| × |vector| = " + short_float(shift) + " is over the cap of " +
                                 short_float(cap) + " for add (" + cap_field(iv.op) +
                                 "; a vector add is capped by the size of the shift it adds)",
                             "cap_exceeded");
      }
    }
  }
  if (iv.op == InterventionOp::kClipMassive && !iv.vector.empty() && limits.capped(InterventionOp::kSet)) {
    const double cap = limits.cap(InterventionOp::kSet);
    for (size_t d = 0; d < iv.vector.size(); ++d) {
      if (std::fabs(static_cast<double>(iv.vector[d])) > cap) {
        return glass_invalid(where + ".mean",
                             where + ".mean[" + std::to_string(d) + "]: " + short_float(iv.vector[d]) +
                                 " is over the cap of " + short_float(cap) + " for set (" +
                                 cap_field(InterventionOp::kSet) +
                                 "; clip_massive writes the mean's values as set does)",
                             "cap_exceeded");
      }
    }
  }
  const std::string point(hook_point_name(iv.point));
  if (!limits.allowed_points.empty() &&
      std::find(limits.allowed_points.begin(), limits.allowed_points.end(), iv.point) == limits.allowed_points.end())
    return glass_forbidden("point_not_allowed",
                           where + ".point: " + point + " is not in glassbox_policy.allowed_points");
  if (!limits.allowed_layers.empty()) {
    for (int32_t l = iv.layer_first; l <= iv.layer_last; ++l) {
      if (std::find(limits.allowed_layers.begin(), limits.allowed_layers.end(), l) == limits.allowed_layers.end())
        return glass_forbidden("layer_not_allowed",
                               where + ": layer " + std::to_string(l) + " is not in glassbox_policy.allowed_layers");
    }
  }
  return std::nullopt;
}

std::optional<GlassError> check_combined(const std::vector<Intervention>& ivs, const std::vector<std::string>& sources,
                                         const GlassLimits& limits, const ModelConfig& c, const std::string& param) {
  for (int pi = 0; pi < kNumLayerPoints; ++pi) {
    const HookPoint p = static_cast<HookPoint>(pi);
    std::vector<size_t> items;
    bool per_dim = false;
    for (size_t i = 0; i < ivs.size(); ++i) {
      const Intervention& iv = ivs[i];
      if (iv.point != p || !stacks(iv.op) || !limits.capped(iv.op)) continue;
      items.push_back(i);
      per_dim |= !iv.dims.empty() && (iv.op == InterventionOp::kAdd || iv.op == InterventionOp::kScale);
    }
    if (items.size() < 2) continue;  // one item: check_item bounds it exactly
    const int64_t width = point_width(p, c);
    struct Event {
      int32_t layer;
      bool start;
      size_t item;
    };
    std::vector<Event> events;
    for (size_t i : items) {
      events.push_back({ivs[i].layer_first, true, i});
      events.push_back({ivs[i].layer_last + 1, false, i});
    }
    // Per layer, ends before starts: the stack at layer L holds exactly the items covering L.
    std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return a.layer != b.layer ? a.layer < b.layer : (!a.start && b.start);
    });
    Stack st;
    if (per_dim) st.size_for(width);
    for (size_t e = 0; e < events.size();) {
      const int32_t layer = events[e].layer;
      st.scalar_changed = false;
      for (int32_t d : st.touched) st.touched_flag[d] = 0;
      st.touched.clear();
      for (; e < events.size() && events[e].layer == layer; ++e)
        st.apply(ivs[events[e].item], events[e].start ? 1 : -1);
      if (layer >= c.n_layers) break;
      // The violation, if any: op, dim (-1: every dim or none), the combined figure.
      std::optional<InterventionOp> bad_op;
      int32_t bad_dim = -1;
      double figure = 0;
      auto check_dim = [&](int32_t d) {
        if (limits.capped(InterventionOp::kAdd) && over(st.add_at(d), limits.cap(InterventionOp::kAdd))) {
          bad_op = InterventionOp::kAdd, bad_dim = d, figure = st.add_at(d);
          return false;
        }
        if (limits.capped(InterventionOp::kScale) &&
            over(std::fabs(st.scale_at(d) - 1.0), limits.cap(InterventionOp::kScale))) {
          bad_op = InterventionOp::kScale, bad_dim = d, figure = st.scale_at(d);
          return false;
        }
        return true;
      };
      bool ok = check_dim(-1);
      if (ok && limits.capped(InterventionOp::kAblate) &&
          over(std::exp(st.ablate_log), 1.0 + limits.cap(InterventionOp::kAblate))) {
        bad_op = InterventionOp::kAblate, figure = std::exp(st.ablate_log), ok = false;
      }
      if (ok && limits.capped(InterventionOp::kClipMassive) &&
          over(std::exp(st.clip_log), std::max(1.0, limits.cap(InterventionOp::kClipMassive)))) {
        bad_op = InterventionOp::kClipMassive, figure = std::exp(st.clip_log), ok = false;
      }
      if (ok && per_dim) {
        for (int32_t d : st.scalar_changed ? st.seen : st.touched) {
          if (!(ok = check_dim(d))) break;
        }
      }
      if (ok) continue;
      // Name the items that stack there.
      const InterventionOp op = *bad_op;
      std::string names;
      int32_t n = 0;
      for (size_t i : items) {
        const Intervention& iv = ivs[i];
        if (iv.op != op || iv.layer_first > layer || iv.layer_last < layer || !covers_dim(iv, bad_dim)) continue;
        if (n++ < 8)
          names += (names.empty() ? "" : ", ") +
                   (i < sources.size() ? sources[i] : "interventions[" + std::to_string(i) + "]");
      }
      if (n > 8) names += " and " + std::to_string(n - 8) + " more";
      const double cap = limits.cap(op);
      const std::string opname(intervention_op_name(op));
      std::string at = std::string(hook_point_name(p)) + " layer " + std::to_string(layer);
      if (bad_dim >= 0) at += " dim " + std::to_string(bad_dim);
      std::string effect;
      switch (op) {
        case InterventionOp::kAdd:
          effect = "add up to " + short_float(figure) +
                   " (Σ |strength|, a vector counted as |strength| × |vector|), over the cap of " + short_float(cap);
          break;
        case InterventionOp::kScale:
          effect = "multiply it by " + short_float(figure) +
                   " (|factor − 1| = " + short_float(std::fabs(figure - 1.0)) + "), over the cap of " +
                   short_float(cap);
          break;
        case InterventionOp::kAblate:
          effect = "can grow a direction " + short_float(figure) + "×, over 1 + the cap of " + short_float(cap);
          break;
        default:
          effect = "scale clipped values by up to " + short_float(figure) + "×, over the cap of " + short_float(cap);
          break;
      }
      return glass_invalid(param,
                           param + ": the stacked " + opname + " interventions at " + at + " " + effect + " (" +
                               cap_field(op) + "): " + names +
                               ". A cap bounds the combined effect of all of a request's interventions (its own, "
                               "its session's and the default set's)",
                           "cap_exceeded");
    }
  }
  return std::nullopt;
}

}  // namespace gb

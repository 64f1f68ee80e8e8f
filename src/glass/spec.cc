// Glass-box specs: names, resolution against the model's shape, the KV salt.
#include "glass/spec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gb {

namespace {

constexpr std::string_view kScopeNames[] = {"all", "prompt", "generated", "first", "positions"};
constexpr std::string_view kOpNames[] = {"scale", "add", "set", "clamp", "ablate", "clip_massive", "skip"};
static_assert(std::size(kOpNames) == kNumInterventionOps);

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}
uint64_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

Status resolve_selector(TokenSelector& sel, const std::string& where) {
  if (sel.scope != TokenScope::kPositions) {
    if (!sel.positions.empty()) return Status::error(where + ".positions: only allowed with scope 'positions'");
    return Status::ok();
  }
  if (sel.positions.empty()) return Status::error(where + ".positions: scope 'positions' needs at least one position");
  if (static_cast<int32_t>(sel.positions.size()) > kMaxSelectedPositions) {
    return Status::error(where + ".positions: more than " + std::to_string(kMaxSelectedPositions) + " positions");
  }
  for (int32_t p : sel.positions) {
    if (p < 0) return Status::error(where + ".positions: " + std::to_string(p) + " is negative");
  }
  std::sort(sel.positions.begin(), sel.positions.end());
  sel.positions.erase(std::unique(sel.positions.begin(), sel.positions.end()), sel.positions.end());
  return Status::ok();
}

Status check_layer_point(HookPoint p, const std::string& where) {
  if (!is_layer_point(p)) {
    return Status::error(where + ": '" + std::string(hook_point_name(p)) + "' is not a per-layer point (" +
                         hook_point_list(true) + ")");
  }
  return Status::ok();
}

Status check_layer(int32_t l, const ModelConfig& c, const std::string& where) {
  if (l < 0 || l >= c.n_layers) {
    return Status::error(where + ": layer " + std::to_string(l) + " is outside the model's " +
                         std::to_string(c.n_layers) + " layers (0.." + std::to_string(c.n_layers - 1) + ")");
  }
  return Status::ok();
}

}  // namespace

std::string_view token_scope_name(TokenScope s) {
  const auto i = static_cast<size_t>(s);
  return i < std::size(kScopeNames) ? kScopeNames[i] : "?";
}
std::optional<TokenScope> parse_token_scope(std::string_view name) {
  for (size_t i = 0; i < std::size(kScopeNames); ++i) {
    if (kScopeNames[i] == name) return static_cast<TokenScope>(i);
  }
  return std::nullopt;
}
std::string_view massive_median_name(MassiveMedian m) { return m == MassiveMedian::kLayer ? "layer" : "token"; }
std::optional<MassiveMedian> parse_massive_median(std::string_view name) {
  if (name == "layer") return MassiveMedian::kLayer;
  if (name == "token") return MassiveMedian::kToken;
  return std::nullopt;
}
std::string_view massive_fire_name(MassiveFire f) {
  switch (f) {
    case MassiveFire::kBoth: return "both";
    case MassiveFire::kAbs: return "abs";
    case MassiveFire::kRatio: return "ratio";
    case MassiveFire::kEither: return "either";
  }
  return "?";
}
std::optional<MassiveFire> parse_massive_fire(std::string_view name) {
  for (MassiveFire f : {MassiveFire::kBoth, MassiveFire::kAbs, MassiveFire::kRatio, MassiveFire::kEither}) {
    if (massive_fire_name(f) == name) return f;
  }
  return std::nullopt;
}
std::string_view intervention_op_name(InterventionOp op) {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOpNames) ? kOpNames[i] : "?";
}
std::optional<InterventionOp> parse_intervention_op(std::string_view name) {
  for (size_t i = 0; i < std::size(kOpNames); ++i) {
    if (kOpNames[i] == name) return static_cast<InterventionOp>(i);
  }
  return std::nullopt;
}

GlassSpec::Shape glass_shape(const ModelConfig& c) { return {c.n_layers, c.n_embd, c.n_ff}; }

int64_t point_width(HookPoint p, const ModelConfig& c) {
  return p == HookPoint::kMlpAct ? c.n_ff : p == HookPoint::kLogits ? c.vocab : c.n_embd;
}

Status resolve_intervention(Intervention& iv, const ModelConfig& c, const std::string& where) {
  GB_RETURN_IF_ERROR(check_layer_point(iv.point, where + ".point"));
  if (iv.op == InterventionOp::kSkip) {
    // A skip replaces a whole layer: it has no point of its own to edit but resid_post, and
    // nothing to scale it by.
    if (iv.point != HookPoint::kResidPost)
      return Status::error(where +
                           ".point: skip sets resid_post = resid_pre of the layer; its point is resid_post "
                           "(or absent), not " +
                           std::string(hook_point_name(iv.point)));
    if (!iv.dims.empty()) return Status::error(where + ".dims: not used by skip (it replaces the whole row)");
    if (iv.strength != 0) return Status::error(where + ".strength: not used by skip");
    if (!iv.vector.empty()) return Status::error(where + ".vector: not used by skip");
    if (iv.threshold != 0) return Status::error(where + ".threshold: not used by skip");
  }
  if (iv.layer_first == -1 && iv.layer_last == -1) {
    iv.layer_first = 0;
    iv.layer_last = c.n_layers - 1;
  }
  GB_RETURN_IF_ERROR(check_layer(iv.layer_first, c, where + ".layers"));
  GB_RETURN_IF_ERROR(check_layer(iv.layer_last, c, where + ".layers"));
  if (iv.layer_last < iv.layer_first) return Status::error(where + ".layers: the range is empty (last < first)");
  const int64_t width = point_width(iv.point, c);
  const std::string pname(hook_point_name(iv.point));
  for (size_t j = 0; j < iv.dims.size(); ++j) {
    if (iv.dims[j] < 0 || iv.dims[j] >= width) {
      return Status::error(where + ".dims[" + std::to_string(j) + "]: " + std::to_string(iv.dims[j]) + " is outside " +
                           pname + "'s " + std::to_string(width) + " dims");
    }
  }
  std::sort(iv.dims.begin(), iv.dims.end());
  iv.dims.erase(std::unique(iv.dims.begin(), iv.dims.end()), iv.dims.end());
  if (!iv.vector.empty() && static_cast<int64_t>(iv.vector.size()) != width) {
    return Status::error(where + ".vector: " + std::to_string(iv.vector.size()) + " values, " + pname + " has " +
                         std::to_string(width) + " dims");
  }
  for (float v : iv.vector) {
    if (!std::isfinite(v)) return Status::error(where + ".vector: values must be finite");
  }
  const bool is_clamp = iv.op == InterventionOp::kClamp;
  if (std::isnan(iv.strength) || (!is_clamp && !std::isfinite(iv.strength))) {
    return Status::error(where + ".strength: must be a finite number");
  }
  switch (iv.op) {
    case InterventionOp::kScale:
    case InterventionOp::kSet:
      if (!iv.vector.empty())
        return Status::error(where + ".vector: not used by " + std::string(intervention_op_name(iv.op)));
      break;
    case InterventionOp::kAdd:
      if (!iv.vector.empty() && !iv.dims.empty())
        return Status::error(where + ": add takes dims or a vector, not both");
      break;
    case InterventionOp::kClamp:
      if (iv.strength < 0) return Status::error(where + ".strength: a clamp bound must be >= 0");
      if (!iv.vector.empty()) return Status::error(where + ".vector: not used by clamp");
      break;
    case InterventionOp::kAblate: {
      if (iv.vector.empty()) return Status::error(where + ".vector: ablate needs a direction");
      if (!iv.dims.empty()) return Status::error(where + ".dims: not used by ablate");
      double n2 = 0;
      for (float v : iv.vector) n2 += static_cast<double>(v) * v;
      if (!(n2 > 0)) return Status::error(where + ".vector: the ablation direction is zero");
      const double inv = 1.0 / std::sqrt(n2);
      for (float& v : iv.vector) v = static_cast<float>(v * inv);
      break;
    }
    case InterventionOp::kClipMassive:
      if (!(iv.threshold > 0) || !std::isfinite(iv.threshold)) {
        return Status::error(where + ".threshold: clip_massive needs a positive threshold (× median |x|)");
      }
      if (!iv.dims.empty()) return Status::error(where + ".dims: not used by clip_massive");
      break;
    case InterventionOp::kSkip: break;  // checked above
  }
  return resolve_selector(iv.tokens, where + ".tokens");
}

Status check_massive_rule(const MassiveRule& m) {
  if (!(m.min_abs >= 0) || !(m.min_ratio >= 0) || !std::isfinite(m.min_abs) || !std::isfinite(m.min_ratio)) {
    return Status::error("massive: min_abs and min_ratio must be finite non-negative numbers");
  }
  if (m.median != MassiveMedian::kLayer && m.median != MassiveMedian::kToken)
    return Status::error("massive.median: must be layer or token");
  if (!parse_massive_fire(massive_fire_name(m.fire_on)))
    return Status::error("massive.fire_on: must be both, abs, ratio or either");
  return Status::ok();
}

Status resolve_observe(ObserveSpec& ob, const ModelConfig& c) {
  if (!ob.enabled) {
    if (!ob.captures.empty()) return Status::error("observe.captures: observation is not enabled");
    if (ob.sink_tokens != 0) return Status::error("observe.attention_sinks: observation is not enabled");
    return Status::ok();
  }
  if (ob.points.empty()) ob.points.push_back(HookPoint::kResidPost);
  for (size_t j = 0; j < ob.points.size(); ++j) {
    GB_RETURN_IF_ERROR(check_layer_point(ob.points[j], "observe.points[" + std::to_string(j) + "]"));
  }
  std::sort(ob.points.begin(), ob.points.end());
  ob.points.erase(std::unique(ob.points.begin(), ob.points.end()), ob.points.end());
  if (ob.layers.empty()) {
    for (int32_t l = 0; l < c.n_layers; ++l) ob.layers.push_back(l);
  }
  for (size_t j = 0; j < ob.layers.size(); ++j) {
    GB_RETURN_IF_ERROR(check_layer(ob.layers[j], c, "observe.layers[" + std::to_string(j) + "]"));
  }
  std::sort(ob.layers.begin(), ob.layers.end());
  ob.layers.erase(std::unique(ob.layers.begin(), ob.layers.end()), ob.layers.end());
  if (ob.top_k < 0 || ob.top_k > kMaxTopK) {
    return Status::error("observe.top_k: " + std::to_string(ob.top_k) + " is outside 0.." + std::to_string(kMaxTopK));
  }
  GB_RETURN_IF_ERROR(resolve_selector(ob.tokens, "observe.tokens"));
  if (ob.sink_tokens < 0 || ob.sink_tokens > kMaxSinkTokens) {
    return Status::error("observe.attention_sinks.tokens: " + std::to_string(ob.sink_tokens) + " is outside 1.." +
                         std::to_string(kMaxSinkTokens));
  }
  ob.sink_layers.clear();
  if (ob.sink_tokens > 0) {
    for (int32_t l : ob.layers) {
      if (softmax_attention_layer(c, l)) ob.sink_layers.push_back(l);
    }
  }
  int64_t floats = 0;
  for (size_t j = 0; j < ob.captures.size(); ++j) {
    CaptureRequest& cr = ob.captures[j];
    const std::string where = "observe.captures[" + std::to_string(j) + "]";
    if (is_layer_point(cr.point)) {
      GB_RETURN_IF_ERROR(check_layer(cr.layer, c, where));
    } else {
      cr.layer = -1;
    }
    if (cr.position < 0) return Status::error(where + ".position: must be >= 0");
    // A final_norm capture also makes its position an output row: a row of logits.
    floats += is_output_point(cr.point) ? c.vocab : point_width(cr.point, c);
  }
  if (floats > ob.max_capture_floats) {
    return Status::error("observe.captures: " + std::to_string(floats) + " values exceed the cap of " +
                         std::to_string(ob.max_capture_floats));
  }
  return Status::ok();
}

Result<std::shared_ptr<const GlassSpec>> resolve_glass_spec(GlassSpec spec, const ModelConfig& c) {
  GB_RETURN_IF_ERROR(check_massive_rule(spec.massive));
  for (size_t k = 0; k < spec.interventions.size(); ++k) {
    GB_RETURN_IF_ERROR(resolve_intervention(spec.interventions[k], c, "interventions[" + std::to_string(k) + "]"));
  }
  GB_RETURN_IF_ERROR(resolve_observe(spec.observe, c));
  return seal_resolved_spec(std::move(spec), c);
}

std::shared_ptr<const GlassSpec> seal_resolved_spec(GlassSpec spec, const ModelConfig& c) {
  spec.resolved_for = glass_shape(c);
  return std::make_shared<const GlassSpec>(std::move(spec));
}

uint64_t glass_kv_salt(const GlassSpec& spec, int32_t n_prompt) {
  if (spec.interventions.empty()) return 0;
  uint64_t h = 0x676c617373626f78ULL;  // "glassbox"
  bool prompt_relative = false;
  for (const Intervention& iv : spec.interventions) {
    h = mix(h, static_cast<uint64_t>(iv.op));
    h = mix(h, static_cast<uint64_t>(iv.point));
    h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(iv.layer_first)));
    h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(iv.layer_last)));
    h = mix(h, iv.dims.size());
    for (int32_t d : iv.dims) h = mix(h, static_cast<uint32_t>(d));
    h = mix(h, float_bits(iv.strength));
    h = mix(h, float_bits(iv.threshold));
    h = mix(h, iv.vector.size());
    for (float v : iv.vector) h = mix(h, float_bits(v));
    h = mix(h, static_cast<uint64_t>(iv.tokens.scope));
    for (int32_t p : iv.tokens.positions) h = mix(h, static_cast<uint32_t>(p));
    prompt_relative |= iv.tokens.scope == TokenScope::kPrompt || iv.tokens.scope == TokenScope::kGenerated;
  }
  if (prompt_relative) h = mix(h, static_cast<uint32_t>(n_prompt));
  return h == 0 ? 1 : h;
}

}  // namespace gb

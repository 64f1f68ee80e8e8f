#include "server/glass_api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

namespace gb::server {

using json = nlohmann::json;

namespace {

ApiError bad(const std::string& param, const std::string& message) { return invalid_field(param, message); }

ApiError forbidden(const std::string& code, const std::string& message) {
  ApiError e;
  e.status = 403;
  e.type = "permission_error";
  e.code = code;
  e.message = message;
  return e;
}

bool has_role(const std::vector<Role>& roles, Role r) { return std::find(roles.begin(), roles.end(), r) != roles.end(); }

std::string roles_text(const std::vector<Role>& roles) {
  std::string s;
  for (Role r : roles) s += (s.empty() ? "" : ", ") + std::string(role_name(r));
  return s.empty() ? "none" : s;
}

// "layer": 3 | "layers": "all" | [0, 3] | {"from": 2, "to": 9} -> sorted distinct layers.
std::optional<ApiError> parse_layers(const json& item, const std::string& where, int32_t n_layers,
                                     std::vector<int32_t>* out) {
  out->clear();
  const bool has_layer = item.contains("layer"), has_layers = item.contains("layers");
  if (has_layer == has_layers) return bad(where, where + ": give exactly one of layer or layers");
  const std::string w = where + (has_layer ? ".layer" : ".layers");
  const json& v = has_layer ? item["layer"] : item["layers"];
  auto check = [&](const json& l) -> std::optional<ApiError> {
    if (!l.is_number_integer()) return bad(w, w + ": '" + l.dump() + "' is not a layer number");
    const int64_t x = l.get<int64_t>();
    if (x < 0 || x >= n_layers)
      return bad(w, w + ": layer " + std::to_string(x) + " is outside the model's layers 0.." + std::to_string(n_layers - 1));
    out->push_back(static_cast<int32_t>(x));
    return std::nullopt;
  };
  if (v.is_string() && v.get<std::string>() == "all") {
    for (int32_t l = 0; l < n_layers; ++l) out->push_back(l);
  } else if (v.is_number_integer()) {
    if (auto e = check(v)) return e;
  } else if (v.is_array() && !has_layer) {
    for (const json& l : v) {
      if (auto e = check(l)) return e;
    }
  } else if (v.is_object() && !has_layer && v.contains("from") && v.contains("to")) {
    if (!v["from"].is_number_integer() || !v["to"].is_number_integer())
      return bad(w, w + ": from and to must be layer numbers");
    const int64_t a = v["from"].get<int64_t>(), b = v["to"].get<int64_t>();
    if (a > b) return bad(w, w + ": from > to");
    for (int64_t l = a; l <= b; ++l) {
      if (auto e = check(json(l))) return e;
    }
  } else {
    return bad(w, w + ": expected a layer number" + (has_layer ? "" : ", \"all\", a list or {\"from\", \"to\"}"));
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  if (out->empty()) return bad(w, w + ": no layers");
  return std::nullopt;
}

std::optional<ApiError> parse_tokens(const json& v, const std::string& w, TokenSelector* out) {
  if (v.is_string()) {
    auto scope = parse_token_scope(v.get<std::string>());
    if (!scope || *scope == TokenScope::kPositions)
      return bad(w, w + ": expected all, prompt, generated, first or a list of token positions");
    out->scope = *scope;
    return std::nullopt;
  }
  if (!v.is_array() || v.empty()) return bad(w, w + ": expected all, prompt, generated, first or a list of positions");
  if (v.size() > static_cast<size_t>(kMaxSelectedPositions))
    return bad(w, w + ": at most " + std::to_string(kMaxSelectedPositions) + " positions");
  out->scope = TokenScope::kPositions;
  for (const json& p : v) {
    if (!p.is_number_integer() || p.get<int64_t>() < 0 || p.get<int64_t>() > (1 << 30))
      return bad(w, w + ": '" + p.dump() + "' is not a token position");
    out->positions.push_back(p.get<int32_t>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_floats(const json& v, const std::string& w, std::vector<float>* out) {
  if (!v.is_array()) return bad(w, w + ": expected a list of numbers");
  out->clear();
  out->reserve(v.size());
  for (const json& x : v) {
    if (!x.is_number()) return bad(w, w + ": expected a list of numbers");
    out->push_back(x.get<float>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_point(const json& v, const std::string& w, HookPoint* out) {
  auto p = v.is_string() ? parse_hook_point(v.get<std::string>()) : std::nullopt;
  if (!p || !is_layer_point(*p))
    return bad(w, w + ": expected a per-layer hook point (resid_pre, attn_out, resid_mid, mlp_act, mlp_out, resid_post)");
  *out = *p;
  return std::nullopt;
}

// "strength": a number, or "inf" (clamp at infinity: the identity).
std::optional<ApiError> parse_strength(const json& item, const std::string& where, bool required, float* out) {
  const std::string w = where + ".strength";
  if (!item.contains("strength")) {
    if (required) return bad(w, w + ": required");
    return std::nullopt;
  }
  const json& v = item["strength"];
  if (v.is_number()) {
    *out = v.get<float>();
    return std::nullopt;
  }
  if (v.is_string() && (v.get<std::string>() == "inf" || v.get<std::string>() == "infinity")) {
    *out = std::numeric_limits<float>::infinity();
    return std::nullopt;
  }
  return bad(w, w + ": expected a number");
}

// Strips the "interventions[k]" prefix from resolve_glass_spec's messages (the caller names the item).
std::string resolve_detail(const std::string& msg) {
  if (msg.rfind("interventions[", 0) == 0) {
    const size_t close = msg.find(']');
    if (close != std::string::npos) return msg.substr(close + 1);
  }
  return ": " + msg;
}

// A float as the shortest decimal that reads back as it (-0.98, not -0.9800000190734863).
json float_json(float v) {
  if (std::isfinite(v)) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
  }
  return std::isnan(v) ? json("nan") : json(v > 0 ? "inf" : "-inf");
}

json selector_json(const TokenSelector& t) {
  if (t.scope == TokenScope::kPositions) return t.positions;
  return std::string(token_scope_name(t.scope));
}

}  // namespace

GlassService::GlassService(const ServerConfig& cfg, const ModelConfig* model) : model_(model) {
  auto st = std::make_shared<GlassState>();
  st->interventions_enabled = cfg.interventions;
  st->policy = cfg.glassbox_policy;
  state_ = std::move(st);
}

std::shared_ptr<const GlassState> GlassService::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

template <class F>
std::optional<ApiError> GlassService::update(F&& fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto next = std::make_shared<GlassState>(*state_);
  if (auto e = fn(*next)) return e;
  if (commit_hook_) {
    if (auto e = commit_hook_()) return e;
  }
  state_ = std::move(next);
  return std::nullopt;
}

Status GlassService::init() {
  if (model_ == nullptr) return Status::ok();
  auto err = update([&](GlassState& st) -> std::optional<ApiError> {
    for (const ControlVectorFile& f : st.policy.control_vectors) {
      Result<ControlVector> cv = load_control_vector(f.path, *model_, f.name);
      if (!cv.is_ok()) return bad("control_vectors", "glassbox_policy.control_vectors." + f.name + ": " + cv.message());
      st.vectors[f.name] = std::make_shared<const ControlVector>(std::move(cv.value()));
    }
    for (const auto& [name, list] : st.policy.presets.items()) {
      std::vector<Intervention> ivs;
      if (auto e = parse_interventions(list, "glassbox_policy.presets." + name, st, false, &ivs)) return e;
    }
    return std::nullopt;
  });
  if (err) return Status::error(err->message);
  return Status::ok();
}

std::optional<ApiError> GlassService::parse_one(const json& item, const std::string& where, const GlassState& st,
                                                bool allow_presets, std::vector<Intervention>* out) const {
  if (!item.is_object()) return bad(where, where + ": expected an object");
  if (item.contains("preset")) {
    if (!allow_presets) return bad(where, where + ": a preset cannot use another preset");
    if (item.size() != 1) return bad(where, where + ": a preset item takes no other fields");
    const json& name = item["preset"];
    if (!name.is_string() || !st.policy.presets.contains(name.get<std::string>()))
      return bad(where + ".preset", where + ".preset: unknown preset " + name.dump());
    return parse_interventions(st.policy.presets[name.get<std::string>()], where + "(preset " + name.get<std::string>() + ")",
                               st, false, out);
  }
  if (item.contains("control_vector")) {
    for (const auto& [k, v] : item.items()) {
      if (k != "control_vector" && k != "strength" && k != "tokens")
        return bad(where + "." + k, where + "." + k + ": unknown field for a control vector (control_vector, strength, tokens)");
    }
    const json& name = item["control_vector"];
    auto it = name.is_string() ? st.vectors.find(name.get<std::string>()) : st.vectors.end();
    if (it == st.vectors.end()) return bad(where + ".control_vector", where + ".control_vector: unknown vector " + name.dump());
    float strength = 0;
    if (auto e = parse_strength(item, where, true, &strength)) return e;
    TokenSelector tokens;
    if (item.contains("tokens")) {
      if (auto e = parse_tokens(item["tokens"], where + ".tokens", &tokens)) return e;
    }
    for (Intervention& iv : control_vector_interventions(*it->second, strength, tokens)) out->push_back(std::move(iv));
    return std::nullopt;
  }
  static const std::set<std::string> kKeys = {"op", "point", "layer", "layers", "dims", "strength", "vector",
                                              "threshold", "mean", "tokens", "label"};
  for (const auto& [k, v] : item.items()) {
    if (!kKeys.count(k))
      return bad(where + "." + k, where + "." + k +
                                      ": unknown field (op, point, layer | layers, dims, strength, vector, threshold, "
                                      "mean, tokens, label; or preset; or control_vector)");
  }
  Intervention iv;
  auto op = item.contains("op") && item["op"].is_string() ? parse_intervention_op(item["op"].get<std::string>())
                                                          : std::nullopt;
  if (!op) return bad(where + ".op", where + ".op: expected scale, add, set, clamp, ablate or clip_massive");
  iv.op = *op;
  if (!item.contains("point")) return bad(where + ".point", where + ".point: required");
  if (auto e = parse_point(item["point"], where + ".point", &iv.point)) return e;
  std::vector<int32_t> layers;
  if (auto e = parse_layers(item, where, model_->n_layers, &layers)) return e;
  if (item.contains("dims")) {
    const json& d = item["dims"];
    if (!d.is_array()) return bad(where + ".dims", where + ".dims: expected a list of dimension indices");
    for (const json& x : d) {
      if (!x.is_number_integer()) return bad(where + ".dims", where + ".dims: '" + x.dump() + "' is not an index");
      iv.dims.push_back(x.get<int32_t>());
    }
  }
  const bool clip = iv.op == InterventionOp::kClipMassive;
  if (auto e = parse_strength(item, where, !clip, &iv.strength)) return e;
  if (clip) {
    if (!item.contains("threshold") || !item["threshold"].is_number())
      return bad(where + ".threshold", where + ".threshold: clip_massive needs a threshold (× the row's median |x|)");
    iv.threshold = item["threshold"].get<float>();
    if (item.contains("mean")) {
      if (auto e = parse_floats(item["mean"], where + ".mean", &iv.vector)) return e;
    }
  } else if (item.contains("threshold") || item.contains("mean")) {
    return bad(where, where + ": threshold and mean belong to clip_massive");
  }
  if (item.contains("tokens")) {
    if (auto e = parse_tokens(item["tokens"], where + ".tokens", &iv.tokens)) return e;
  }
  if (item.contains("label")) {
    if (!item["label"].is_string()) return bad(where + ".label", where + ".label: expected a string");
    iv.label = item["label"].get<std::string>();
  }
  std::shared_ptr<const ControlVector> named;
  if (item.contains("vector")) {
    if (clip) return bad(where + ".vector", where + ".vector: clip_massive takes mean, not vector");
    const json& v = item["vector"];
    if (v.is_string()) {
      auto it = st.vectors.find(v.get<std::string>());
      if (it == st.vectors.end()) return bad(where + ".vector", where + ".vector: unknown vector " + v.dump());
      if (iv.point == HookPoint::kMlpAct)
        return bad(where + ".vector", where + ".vector: library vectors live in the residual stream, not mlp_act");
      named = it->second;
      if (iv.label.empty()) iv.label = "vector:" + v.get<std::string>();
    } else if (auto e = parse_floats(v, where + ".vector", &iv.vector)) {
      return e;
    }
  }
  if (named != nullptr) {
    // A library vector has one direction per layer: one intervention per layer.
    for (int32_t l : layers) {
      auto d = std::find_if(named->directions.begin(), named->directions.end(), [&](const auto& p) { return p.first == l; });
      if (d == named->directions.end())
        return bad(where + ".vector", where + ".vector: " + named->name + " has no direction for layer " + std::to_string(l));
      Intervention one = iv;
      one.layer_first = one.layer_last = l;
      one.vector = d->second;
      out->push_back(std::move(one));
    }
    return std::nullopt;
  }
  // Contiguous runs of layers share one intervention.
  for (size_t i = 0; i < layers.size();) {
    size_t j = i + 1;
    while (j < layers.size() && layers[j] == layers[j - 1] + 1) ++j;
    Intervention run = iv;
    run.layer_first = layers[i];
    run.layer_last = layers[j - 1];
    out->push_back(std::move(run));
    i = j;
  }
  return std::nullopt;
}

std::optional<ApiError> GlassService::parse_interventions(const json& list, const std::string& where,
                                                          const GlassState& st, bool allow_presets,
                                                          std::vector<Intervention>* out) const {
  if (!list.is_array()) return bad(where, where + ": expected a list of interventions");
  if (list.size() > 256) return bad(where, where + ": at most 256 interventions");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    std::vector<Intervention> item;
    if (auto e = parse_one(list[i], w, st, allow_presets, &item)) return e;
    // Validate the item on its own so an error names it (dims, vector widths, op rules).
    GlassSpec probe;
    probe.interventions = item;
    Result<std::shared_ptr<const GlassSpec>> r = resolve_glass_spec(std::move(probe), *model_);
    if (!r.is_ok()) return bad(w, w + resolve_detail(r.message()));
    if (auto e = check_policy(item, w, st)) return e;
    for (Intervention& iv : item) out->push_back(std::move(iv));
  }
  return std::nullopt;
}

std::optional<ApiError> GlassService::check_policy(const std::vector<Intervention>& ivs, const std::string& where,
                                                   const GlassState& st) const {
  const GlassPolicyConfig& p = st.policy;
  for (const Intervention& iv : ivs) {
    const std::string op(intervention_op_name(iv.op));
    auto cap = p.caps.find(op);
    if (cap != p.caps.end() && std::fabs(static_cast<double>(iv.strength)) > cap->second) {
      ApiError e = bad(where + ".strength", where + ".strength: " + std::to_string(iv.strength) + " is over the cap of " +
                                                std::to_string(cap->second) + " for " + op +
                                                " (glassbox_policy.caps." + op + "); requests over a cap are refused, not clamped");
      e.code = "cap_exceeded";
      return e;
    }
    const std::string point(hook_point_name(iv.point));
    if (!p.allowed_points.empty() &&
        std::find(p.allowed_points.begin(), p.allowed_points.end(), point) == p.allowed_points.end())
      return forbidden("point_not_allowed", where + ".point: " + point + " is not in glassbox_policy.allowed_points");
    if (!p.allowed_layers.empty()) {
      for (int32_t l = iv.layer_first; l <= iv.layer_last; ++l) {
        if (std::find(p.allowed_layers.begin(), p.allowed_layers.end(), l) == p.allowed_layers.end())
          return forbidden("layer_not_allowed",
                           where + ": layer " + std::to_string(l) + " is not in glassbox_policy.allowed_layers");
      }
    }
  }
  return std::nullopt;
}

std::optional<ApiError> GlassService::resolve(const json* ext, const std::string& session, const Caller& caller,
                                              GlassRequest* out) const {
  *out = GlassRequest{};
  const std::shared_ptr<const GlassState> st = state();
  const bool has_ext = ext != nullptr && !ext->is_null();
  const bool has_default = st->interventions_enabled && st->default_version > 0;
  if (!has_ext && session.empty() && !has_default) return std::nullopt;
  if (!available()) return bad("glassbox", "glassbox: this server's engine does not support the glass box");
  if (has_ext && !ext->is_object()) return bad("glassbox", "glassbox: expected an object");

  GlassSpec spec;
  json asked = has_ext ? *ext : json::object();
  if (has_ext) {
    static const std::set<std::string> kKeys = {"observe", "interventions", "massive", "stop_on_repetition"};
    for (const auto& [k, v] : ext->items()) {
      if (!kKeys.count(k))
        return bad("glassbox." + k, "glassbox." + k + ": unknown field (observe, interventions, massive, stop_on_repetition)");
    }
  }

  // ---- observation ----
  if (has_ext && ext->contains("observe") && !(*ext)["observe"].is_null()) {
    const json& o = (*ext)["observe"];
    const std::string w = "glassbox.observe";
    if (!has_role(st->policy.observe_roles, caller.role))
      return forbidden("role_not_allowed", w + ": the " + std::string(role_name(caller.role)) +
                                               " role may not observe (glassbox_policy.observe_roles: " +
                                               roles_text(st->policy.observe_roles) + ")");
    if (!o.is_object()) return bad(w, w + ": expected an object");
    static const std::set<std::string> kKeys = {"points", "layers", "tokens", "top_k", "stats", "detect_massive", "capture"};
    for (const auto& [k, v] : o.items()) {
      if (!kKeys.count(k))
        return bad(w + "." + k, w + "." + k + ": unknown field (points, layers, tokens, top_k, stats, detect_massive, capture)");
    }
    ObserveSpec& obs = spec.observe;
    obs.enabled = true;
    if (o.contains("points")) {
      const json& p = o["points"];
      if (p.is_string() && p.get<std::string>() == "all") {
        for (int i = 0; i < kNumLayerPoints; ++i) obs.points.push_back(static_cast<HookPoint>(i));
      } else if (p.is_array() && !p.empty()) {
        for (const json& x : p) {
          HookPoint hp;
          if (auto e = parse_point(x, w + ".points", &hp)) return e;
          obs.points.push_back(hp);
        }
      } else {
        return bad(w + ".points", w + ".points: expected \"all\" or a list of hook points");
      }
    }
    if (o.contains("layers")) {
      std::vector<int32_t> layers;
      json holder = {{"layers", o["layers"]}};
      if (auto e = parse_layers(holder, w, model_->n_layers, &layers)) return e;
      obs.layers = layers;
    }
    if (o.contains("tokens")) {
      if (auto e = parse_tokens(o["tokens"], w + ".tokens", &obs.tokens)) return e;
    }
    if (o.contains("top_k")) {
      const json& k = o["top_k"];
      if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() > kMaxTopK)
        return bad(w + ".top_k", w + ".top_k: expected 0.." + std::to_string(kMaxTopK));
      obs.top_k = k.get<int32_t>();
    }
    if (o.contains("stats")) {
      static const std::set<std::string> kStats = {"max_abs", "median_abs", "rms", "mean", "top_k", "max_ratio"};
      if (!o["stats"].is_array()) return bad(w + ".stats", w + ".stats: expected a list");
      for (const json& s : o["stats"]) {
        if (!s.is_string() || !kStats.count(s.get<std::string>()))
          return bad(w + ".stats", w + ".stats: '" + s.dump() + "' is not max_abs, median_abs, max_ratio, rms, mean or top_k");
        out->stats.push_back(s.get<std::string>());
      }
    }
    if (o.contains("detect_massive")) {
      if (!o["detect_massive"].is_boolean()) return bad(w + ".detect_massive", w + ".detect_massive: expected true or false");
      obs.detect_massive = o["detect_massive"].get<bool>();
    }
    if (o.contains("capture")) {
      const json& c = o["capture"];
      if (!c.is_array()) return bad(w + ".capture", w + ".capture: expected a list of {point, layer, token}");
      for (size_t i = 0; i < c.size(); ++i) {
        const std::string cw = w + ".capture[" + std::to_string(i) + "]";
        const json& x = c[i];
        CaptureRequest cr;
        if (!x.is_object() || !x.contains("point") || !x.contains("layer") || !x.contains("token"))
          return bad(cw, cw + ": expected {point, layer, token}");
        if (auto e = parse_point(x["point"], cw + ".point", &cr.point)) return e;
        if (!x["layer"].is_number_integer() || x["layer"].get<int64_t>() < 0 || x["layer"].get<int64_t>() >= model_->n_layers)
          return bad(cw + ".layer", cw + ".layer: not a layer of this model (0.." + std::to_string(model_->n_layers - 1) + ")");
        if (!x["token"].is_number_integer() || x["token"].get<int64_t>() < 0)
          return bad(cw + ".token", cw + ".token: expected a token position");
        cr.layer = x["layer"].get<int32_t>();
        cr.position = x["token"].get<int32_t>();
        obs.captures.push_back(cr);
      }
    }
  }
  if (has_ext && ext->contains("massive")) {
    const json& m = (*ext)["massive"];
    if (!m.is_object()) return bad("glassbox.massive", "glassbox.massive: expected {min_abs, min_ratio}");
    for (const auto& [k, v] : m.items()) {
      if ((k != "min_abs" && k != "min_ratio") || !v.is_number() || v.get<double>() < 0)
        return bad("glassbox.massive." + k, "glassbox.massive." + k + ": expected min_abs or min_ratio, a number >= 0");
      (k == "min_abs" ? spec.massive.min_abs : spec.massive.min_ratio) = v.get<float>();
    }
  }
  if (has_ext && ext->contains("stop_on_repetition")) {
    const json& r = (*ext)["stop_on_repetition"];
    const std::string w = "glassbox.stop_on_repetition";
    if (!r.is_object()) return bad(w, w + ": expected {ngram, window, max_rate}");
    RepetitionStop stop;
    for (const auto& [k, v] : r.items()) {
      if (k == "ngram" && v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= 64) {
        stop.ngram = v.get<int32_t>();
      } else if (k == "window" && v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= 4096) {
        stop.window = v.get<int32_t>();
      } else if (k == "max_rate" && v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1) {
        stop.max_rate = v.get<double>();
      } else {
        return bad(w + "." + k, w + "." + k + ": expected ngram 1..64, window 1..4096 or max_rate in (0, 1]");
      }
    }
    out->stop_on_repetition = stop;
  }

  // ---- interventions: the request's, its session's, the global default set ----
  const bool asks = has_ext && ext->contains("interventions") && !(*ext)["interventions"].is_null() &&
                    !(ext->at("interventions").is_array() && ext->at("interventions").empty());
  if ((asks || !session.empty()) && !st->interventions_enabled)
    return forbidden("interventions_disabled", "glassbox.interventions: interventions are off on this server "
                                                 "(interventions: false)");
  if (asks) {
    if (!has_role(st->policy.intervention_roles, caller.role))
      return forbidden("role_not_allowed", "glassbox.interventions: the " + std::string(role_name(caller.role)) +
                                               " role may not intervene (glassbox_policy.intervention_roles: " +
                                               roles_text(st->policy.intervention_roles) + ")");
    if (auto e = parse_interventions((*ext)["interventions"], "glassbox.interventions", *st, true, &spec.interventions))
      return e;
  }
  json audit = {{"glassbox", asked}};
  if (!session.empty()) {
    auto it = st->sessions.find(session);
    if (it == st->sessions.end())
      return bad("X-Glassbox-Session", "X-Glassbox-Session: unknown session '" + session + "' (PUT /admin/glassbox/sessions/ID)");
    if (auto e = parse_interventions(it->second, "session " + session, *st, true, &spec.interventions)) return e;
    audit["session"] = session;
  }
  if (has_default) {
    if (auto e = parse_interventions(st->defaults[st->default_version - 1], "default set", *st, true, &spec.interventions))
      return e;
    audit["default_version"] = st->default_version;
  }
  if (!spec.observe.enabled && spec.interventions.empty() && !out->stop_on_repetition) return std::nullopt;
  out->intervenes = !spec.interventions.empty();
  Result<std::shared_ptr<const GlassSpec>> resolved = resolve_glass_spec(std::move(spec), *model_);
  if (!resolved.is_ok()) return bad("glassbox", "glassbox: " + resolved.message());
  out->spec = std::move(resolved.value());
  out->audit_spec = std::move(audit);
  return std::nullopt;
}

// ---- admin ----

std::optional<ApiError> GlassService::set_policy(const json& body, json* change) {
  GlassPolicyConfig p;
  Status s = parse_glass_policy(body, &p);
  if (!s.is_ok()) return bad("policy", s.message());
  return update([&](GlassState& st) -> std::optional<ApiError> {
    st.policy = p;
    for (const auto& [name, list] : st.policy.presets.items()) {
      std::vector<Intervention> ivs;
      if (auto e = parse_interventions(list, "presets." + name, st, false, &ivs)) return e;
    }
    *change = {{"policy", glass_policy_json(p)}};
    return std::nullopt;
  });
}

template <class F>
std::optional<ApiError> GlassService::put_set(const json& body, bool allow_presets, F&& store) {
  if (!available()) return bad("glassbox", "this server's engine does not support the glass box");
  if (!body.is_object() || !body.contains("interventions") || !body["interventions"].is_array())
    return bad("interventions", "expected {\"interventions\": [...]}");
  const json& list = body["interventions"];
  return update([&](GlassState& st) -> std::optional<ApiError> {
    std::vector<Intervention> ivs;
    if (auto e = parse_interventions(list, "interventions", st, allow_presets, &ivs)) return e;
    store(st, list);
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::put_preset(const std::string& name, const json& body, json* change) {
  if (body.is_object() && body.contains("interventions") && body["interventions"].empty())
    return bad("interventions", "a preset needs at least one intervention");
  return put_set(body, /*allow_presets=*/false, [&](GlassState& st, const json& list) {
    st.policy.presets[name] = list;
    *change = {{"preset", name}, {"interventions", list}};
  });
}

std::optional<ApiError> GlassService::delete_preset(const std::string& name, json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (!st.policy.presets.contains(name)) return bad("preset", "unknown preset '" + name + "'");
    st.policy.presets.erase(name);
    *change = {{"preset", name}};
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::put_vector(const std::string& name, const json& body, json* change) {
  if (!available()) return bad("glassbox", "this server's engine does not support the glass box");
  if (!body.is_object() || (body.contains("path") == body.contains("directions")))
    return bad("vector", "expected {\"path\": GGUF file} or {\"directions\": {\"<layer>\": [...]}}");
  ControlVector cv;
  if (body.contains("path")) {
    if (!body["path"].is_string()) return bad("path", "path: expected a string");
    Result<ControlVector> r = load_control_vector(body["path"].get<std::string>(), *model_, name);
    if (!r.is_ok()) return bad("path", r.message());
    cv = std::move(r.value());
    *change = {{"vector", name}, {"path", body["path"]}};
  } else {
    const json& d = body["directions"];
    if (!d.is_object() || d.empty()) return bad("directions", "directions: expected {\"<layer>\": [n_embd numbers], ...}");
    cv.name = name;
    cv.n_embd = model_->n_embd;
    for (const auto& [k, v] : d.items()) {
      char* end = nullptr;
      const long l = std::strtol(k.c_str(), &end, 10);
      if (end == k.c_str() || *end != '\0' || l < 0 || l >= model_->n_layers)
        return bad("directions", "directions." + k + ": not a layer of this model");
      std::vector<float> values;
      if (auto e = parse_floats(v, "directions." + k, &values)) return e;
      if (static_cast<int64_t>(values.size()) != model_->n_embd)
        return bad("directions", "directions." + k + ": " + std::to_string(values.size()) + " values, the model has " +
                                     std::to_string(model_->n_embd) + " dims");
      for (float x : values) {
        if (!std::isfinite(x)) return bad("directions", "directions." + k + ": values must be finite");
      }
      cv.directions.emplace_back(static_cast<int32_t>(l), std::move(values));
    }
    std::sort(cv.directions.begin(), cv.directions.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    json layers = json::array();
    for (const auto& [l, v] : cv.directions) layers.push_back(l);
    *change = {{"vector", name}, {"layers", layers}, {"directions", d}};
  }
  return update([&](GlassState& st) -> std::optional<ApiError> {
    st.vectors[name] = std::make_shared<const ControlVector>(std::move(cv));
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::delete_vector(const std::string& name, json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (!st.vectors.count(name)) return bad("vector", "unknown vector '" + name + "'");
    st.vectors.erase(name);
    *change = {{"vector", name}};
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::put_session(const std::string& id, const json& body, json* change) {
  return put_set(body, /*allow_presets=*/true, [&](GlassState& st, const json& list) {
    st.sessions[id] = list;
    *change = {{"session", id}, {"interventions", list}};
  });
}

std::optional<ApiError> GlassService::delete_session(const std::string& id, json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (!st.sessions.count(id)) return bad("session", "unknown session '" + id + "'");
    st.sessions.erase(id);
    *change = {{"session", id}};
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::put_default(const json& body, json* change) {
  return put_set(body, /*allow_presets=*/true, [&](GlassState& st, const json& list) {
    st.defaults.push_back(list);
    const int64_t previous = st.default_version;
    st.default_version = static_cast<int64_t>(st.defaults.size());
    *change = {{"version", st.default_version}, {"previous_version", previous}, {"interventions", list}};
  });
}

std::optional<ApiError> GlassService::rollback_default(json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (st.default_version == 0) return bad("version", "the default set has no earlier version to roll back to");
    const int64_t from = st.default_version;
    --st.default_version;
    *change = {{"version", st.default_version}, {"rolled_back_from", from}};
    return std::nullopt;
  });
}

json GlassService::describe() const {
  const std::shared_ptr<const GlassState> st = state();
  json vectors = json::array();
  for (const auto& [name, cv] : st->vectors) {
    json layers = json::array();
    for (const auto& [l, d] : cv->directions) {
      double n2 = 0;
      for (float x : d) n2 += static_cast<double>(x) * x;
      layers.push_back({{"layer", l}, {"norm", std::sqrt(n2)}});
    }
    vectors.push_back({{"name", name}, {"n_embd", cv->n_embd}, {"directions", layers}});
  }
  json sessions = json::object();
  for (const auto& [id, list] : st->sessions) sessions[id] = list;
  json versions = json::array();
  for (size_t i = 0; i < st->defaults.size(); ++i) versions.push_back({{"version", i + 1}, {"interventions", st->defaults[i]}});
  return {{"interventions_enabled", st->interventions_enabled},
          {"policy", glass_policy_json(st->policy)},
          {"vectors", vectors},
          {"sessions", sessions},
          {"default", {{"version", st->default_version}, {"history", versions}}}};
}

// ---- responses ----

json glass_report_json(const GlassReport& r, const std::vector<std::string>& stats) {
  auto want = [&](const char* s) { return stats.empty() || std::find(stats.begin(), stats.end(), s) != stats.end(); };
  json report = json::array();
  for (const PointStats& p : r.stats) {
    json e = {{"layer", p.layer}, {"point", std::string(hook_point_name(p.point))}, {"tokens", p.n_tokens}};
    if (want("max_abs")) {
      e["max_abs"] = float_json(p.max_abs);
      e["max_dim"] = p.max_dim;
      e["max_token"] = p.max_position;
    }
    if (want("median_abs")) e["median_abs"] = float_json(p.median_abs);
    if (want("max_ratio")) {
      e["max_ratio"] = float_json(p.max_ratio);
      e["max_ratio_token"] = p.max_ratio_position;
    }
    if (want("rms")) e["rms"] = float_json(p.rms);
    if (want("mean")) e["mean"] = float_json(p.mean);
    if (want("top_k") && !p.top.empty()) {
      json top = json::array();
      for (const TopDim& t : p.top) top.push_back({{"dim", t.dim}, {"abs", float_json(t.abs)}, {"token", t.position}});
      e["top"] = std::move(top);
    }
    report.push_back(std::move(e));
  }
  json events = json::array();
  for (const MassiveEvent& ev : r.events) {
    events.push_back({{"layer", ev.layer},
                      {"point", std::string(hook_point_name(ev.point))},
                      {"token", ev.position},
                      {"dim", ev.dim},
                      {"value", float_json(ev.value)},
                      {"median_abs", float_json(ev.median_abs)},
                      {"ratio", float_json(ev.ratio)},
                      {"abs_test", ev.abs_test},
                      {"ratio_test", ev.ratio_test}});
  }
  json captures = json::array();
  for (const Capture& c : r.captures) {
    json values = json::array();
    for (float x : c.data) values.push_back(float_json(x));
    captures.push_back({{"layer", c.layer},
                        {"point", std::string(hook_point_name(c.point))},
                        {"token", c.position},
                        {"values", c.filled ? values : json(nullptr)}});
  }
  json applied = json::array();
  for (const AppliedIntervention& a : r.applied) {
    json e = {{"op", std::string(intervention_op_name(a.op))},
              {"point", std::string(hook_point_name(a.point))},
              {"layers", {a.layer_first, a.layer_last}},
              {"strength", float_json(a.strength)},
              {"tokens", selector_json(a.tokens)},
              {"rows", a.rows}};
    if (!a.dims.empty()) e["dims"] = a.dims;
    if (a.op == InterventionOp::kClipMassive) e["threshold"] = float_json(a.threshold);
    if (a.vector_size > 0) e["vector"] = {{"size", a.vector_size}, {"norm", float_json(a.vector_norm)}};
    if (!a.label.empty()) e["label"] = a.label;
    applied.push_back(std::move(e));
  }
  json out = {{"report", report}, {"events", events}, {"applied", applied}};
  if (r.events_dropped > 0) out["events_dropped"] = r.events_dropped;
  if (!captures.empty()) out["captures"] = captures;
  return out;
}

// ---- repetition ----

RepetitionTracker::RepetitionTracker(int32_t n, int32_t window) : n_(std::max(1, n)), window_(std::max(1, window)) {
  recent_.assign(static_cast<size_t>(window_), 0);
}

void RepetitionTracker::push(int32_t token) {
  last_.push_back(token);
  if (static_cast<int32_t>(last_.size()) > n_) last_.erase(last_.begin());
  if (static_cast<int32_t>(last_.size()) < n_) return;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int32_t t : last_) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ULL;
  }
  const bool repeated = !seen_.insert(h).second;
  const size_t slot = static_cast<size_t>(total_ % window_);
  recent_sum_ += static_cast<int64_t>(repeated) - recent_[slot];
  recent_[slot] = repeated;
  ++total_;
  repeated_ += repeated;
}

double RepetitionTracker::window_rate() const {
  const int64_t n = std::min<int64_t>(total_, window_);
  return n > 0 ? static_cast<double>(recent_sum_) / static_cast<double>(n) : 0.0;
}

}  // namespace gb::server

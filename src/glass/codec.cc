// The `glassbox` JSON syntax → resolved spec parts, and reports → JSON.
#include "glass/codec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

namespace gb {

using json = nlohmann::json;

namespace {

constexpr size_t kMaxLabelBytes = 256;
constexpr int64_t kMaxPosition = int64_t{1} << 30;

GlassError bad(const std::string& param, const std::string& message) { return glass_invalid(param, message); }

// An integer JSON value as int64 (false: not an integer, or beyond int64).
bool as_int64(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  return false;
}

// A JSON number as a finite f32 (false: not a number, or non-finite once it is an f32).
bool as_finite_float(const json& v, float* out) {
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) return false;
  *out = v.is_number_float() ? static_cast<float>(d) : v.get<float>();
  return std::isfinite(*out);
}

std::string not_finite(const std::string& w) {
  return w + ": expected a finite number (within the 32-bit float range)";
}

// "layer": 3 | "layers": "all" | [0, 3] | {"from": 2, "to": 9} -> sorted distinct layers; the
// accepted form re-encoded into *canon.
std::optional<GlassError> parse_layers(const json* layer, const json* layers, const std::string& where,
                                       int32_t n_layers, std::vector<int32_t>* out, json* canon) {
  out->clear();
  const bool has_layer = layer != nullptr, has_layers = layers != nullptr;
  if (has_layer == has_layers) return bad(where, where + ": give exactly one of layer or layers");
  const std::string w = where + (has_layer ? ".layer" : ".layers");
  const json& v = has_layer ? *layer : *layers;
  auto check = [&](const json& l) -> std::optional<GlassError> {
    int64_t x = 0;
    if (!l.is_number_integer()) return bad(w, w + ": " + json_brief(l) + " is not a layer number");
    if (!as_int64(l, &x) || x < 0 || x >= n_layers)
      return bad(w,
                 w + ": layer " + json_brief(l) + " is outside the model's layers 0.." + std::to_string(n_layers - 1));
    out->push_back(static_cast<int32_t>(x));
    return std::nullopt;
  };
  if (v.is_string() && v.get_ref<const std::string&>() == "all") {
    for (int32_t l = 0; l < n_layers; ++l) out->push_back(l);
    *canon = "all";
  } else if (v.is_number_integer()) {
    if (auto e = check(v)) return e;
    *canon = out->front();
  } else if (v.is_array() && !has_layer) {
    for (const json& l : v) {
      if (auto e = check(l)) return e;
    }
    *canon = *out;
  } else if (v.is_object() && !has_layer && v.contains("from") && v.contains("to")) {
    int64_t a = 0, b = 0;
    if (!as_int64(v["from"], &a) || !as_int64(v["to"], &b)) return bad(w, w + ": from and to must be layer numbers");
    if (a > b) return bad(w, w + ": from > to");
    for (int64_t l = a; l <= b; ++l) {
      if (auto e = check(json(l))) return e;
    }
    *canon = {{"from", a}, {"to", b}};
  } else {
    return bad(w, w + ": expected a layer number" + (has_layer ? "" : ", \"all\", a list or {\"from\", \"to\"}"));
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  if (out->empty()) return bad(w, w + ": no layers");
  return std::nullopt;
}

std::optional<GlassError> parse_tokens(const json& v, const std::string& w, TokenSelector* out) {
  if (v.is_string()) {
    auto scope = parse_token_scope(v.get_ref<const std::string&>());
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
    int64_t x = 0;
    if (!as_int64(p, &x) || x < 0 || x > kMaxPosition)
      return bad(w, w + ": " + json_brief(p) + " is not a token position");
    out->positions.push_back(static_cast<int32_t>(x));
  }
  return std::nullopt;
}

json selector_json(const TokenSelector& t) {
  if (t.scope == TokenScope::kPositions) return t.positions;
  return std::string(token_scope_name(t.scope));
}

// A list of finite numbers of at most max_size values (the point's width: a longer list is
// refused as resolve_intervention would, before it is stored).
// size_param: the param of a size error (the item, as resolve_intervention names it).
std::optional<GlassError> parse_floats(const json& v, const std::string& size_param, const std::string& w,
                                       size_t max_size, const std::string& point, std::vector<float>* out) {
  const std::string& param = w;
  if (!v.is_array()) return bad(param, w + ": expected a list of numbers");
  if (v.size() > max_size)
    return bad(size_param, w + ": " + std::to_string(v.size()) + " values, " + point + " has " +
                               std::to_string(max_size) + " dims");
  out->clear();
  out->reserve(v.size());
  for (const json& x : v) {
    float f = 0;
    if (!x.is_number()) return bad(param, w + ": expected a list of numbers");
    if (!as_finite_float(x, &f)) return bad(param, w + ": values must be finite");
    out->push_back(f);
  }
  return std::nullopt;
}

json floats_json(const std::vector<float>& v) {
  json a = json::array();
  for (float x : v) a.push_back(float_json(x));
  return a;
}

std::optional<GlassError> parse_point(const json& v, const std::string& w, HookPoint* out) {
  auto p = v.is_string() ? parse_hook_point(v.get_ref<const std::string&>()) : std::nullopt;
  if (!p || !is_layer_point(*p)) return bad(w, w + ": expected a per-layer hook point (" + hook_point_list(true) + ")");
  *out = *p;
  return std::nullopt;
}

// "strength": a finite number, or "inf" (clamp at infinity: the identity).
std::optional<GlassError> parse_strength(const json& item, const std::string& where, bool required, float* out) {
  const std::string w = where + ".strength";
  auto it = item.find("strength");
  if (it == item.end()) {
    if (required) return bad(w, w + ": required");
    return std::nullopt;
  }
  const json& v = *it;
  if (v.is_number()) {
    if (!as_finite_float(v, out)) return bad(w, not_finite(w) + "; a clamp at infinity is \"inf\"");
    return std::nullopt;
  }
  if (v.is_string() && (v.get_ref<const std::string&>() == "inf" || v.get_ref<const std::string&>() == "infinity")) {
    *out = std::numeric_limits<float>::infinity();
    return std::nullopt;
  }
  return bad(w, w + ": expected a number");
}

const std::string* string_field(const json& v) { return v.is_string() ? &v.get_ref<const std::string&>() : nullptr; }

// Appends one resolved intervention, refusing the list once it passes the limit.
std::optional<GlassError> push(Intervention iv, const std::string& w, const std::string& list_where,
                               const ParseContext& ctx, InterventionSet* out) {
  if (static_cast<int64_t>(out->interventions.size()) >= ctx.max_interventions) {
    return bad(list_where, list_where + ": more than " + std::to_string(ctx.max_interventions) +
                               " interventions once presets, vectors, layer runs, the session and the default set are "
                               "expanded (glassbox_policy.max_interventions)");
  }
  Status s = resolve_intervention(iv, *ctx.model, w);
  if (!s.is_ok()) return bad(w, s.message());
  if (ctx.limits != nullptr) {
    if (auto e = check_item(iv, w, *ctx.limits)) return e;
  }
  out->interventions.push_back(std::move(iv));
  out->sources.push_back(w);
  return std::nullopt;
}

// {"preset": NAME}: the stored, resolved preset, appended whole.
std::optional<GlassError> parse_preset_item(const json& item, const json& name_json, const std::string& where,
                                            const std::string& list_where, const ParseContext& ctx, bool allow_presets,
                                            InterventionSet* out) {
  if (!allow_presets) return bad(where, where + ": a preset cannot use another preset");
  if (item.size() != 1) return bad(where, where + ": a preset item takes no other fields");
  const std::string* name = string_field(name_json);
  const auto* presets = ctx.catalog.presets;
  auto it = name != nullptr && presets != nullptr ? presets->find(*name) : decltype(presets->end()){};
  if (name == nullptr || presets == nullptr || it == presets->end())
    return bad(where + ".preset", where + ".preset: unknown preset " + json_brief(name_json));
  if (auto e = append_set(*it->second, where + " (preset " + *name + ")", ctx.max_interventions, out)) {
    e->param = list_where;
    return e;
  }
  out->items.push_back({{"preset", *name}});
  return std::nullopt;
}

// {"control_vector": NAME, "strength": s, "tokens": ...}: one add per direction of the vector.
std::optional<GlassError> parse_control_vector_item(const json& item, const json& name_json, const std::string& where,
                                                    const std::string& list_where, const ParseContext& ctx,
                                                    InterventionSet* out) {
  for (const auto& [k, v] : item.items()) {
    if (k != "control_vector" && k != "strength" && k != "tokens")
      return bad(
          where + "." + name_brief(k),
          where + "." + name_brief(k) + ": unknown field for a control vector (control_vector, strength, tokens)");
  }
  const std::string* name = string_field(name_json);
  const auto* vectors = ctx.catalog.vectors;
  if (name == nullptr || vectors == nullptr || !vectors->count(*name))
    return bad(where + ".control_vector", where + ".control_vector: unknown vector " + json_brief(name_json));
  const ControlVector& cv = *vectors->at(*name);
  float strength = 0;
  if (auto e = parse_strength(item, where, true, &strength)) return e;
  TokenSelector tokens;
  if (auto tit = item.find("tokens"); tit != item.end()) {
    if (auto e = parse_tokens(*tit, where + ".tokens", &tokens)) return e;
  }
  json canon = {{"control_vector", *name}, {"strength", float_json(strength)}};
  if (item.contains("tokens")) canon["tokens"] = selector_json(tokens);
  for (Intervention& iv : control_vector_interventions(cv, strength, tokens)) {
    if (auto e = push(std::move(iv), where, list_where, ctx, out)) return e;
  }
  out->items.push_back(std::move(canon));
  return std::nullopt;
}

// "dims": distinct indices below the point's width (at most width of them).
std::optional<GlassError> parse_dims(const json& d, const std::string& where, int64_t width, const std::string& pname,
                                     std::vector<int32_t>* dims) {
  if (!d.is_array()) return bad(where + ".dims", where + ".dims: expected a list of dimension indices");
  if (d.size() > static_cast<size_t>(width))
    return bad(where + ".dims", where + ".dims: " + std::to_string(d.size()) + " indices, " + pname + " has " +
                                    std::to_string(width) + " dims");
  for (size_t j = 0; j < d.size(); ++j) {
    const json& x = d[j];
    int64_t v = 0;
    if (!x.is_number_integer()) return bad(where + ".dims", where + ".dims: " + json_brief(x) + " is not an index");
    if (!as_int64(x, &v) || v < 0 || v >= width)
      return bad(where, where + ".dims[" + std::to_string(j) + "]: " + json_brief(x) + " is outside " + pname + "'s " +
                            std::to_string(width) + " dims");
    dims->push_back(static_cast<int32_t>(v));
  }
  return std::nullopt;
}

// clip_massive's "threshold" (required) and "mean" (optional); refused on the other ops.
std::optional<GlassError> parse_clip_fields(const json& item, const std::string& where, int64_t width,
                                            const std::string& pname, Intervention* iv, json* canon) {
  if (iv->op != InterventionOp::kClipMassive) {
    if (item.contains("threshold") || item.contains("mean"))
      return bad(where, where + ": threshold and mean belong to clip_massive");
    return std::nullopt;
  }
  auto tit = item.find("threshold");
  if (tit == item.end() || !tit->is_number())
    return bad(where + ".threshold", where + ".threshold: clip_massive needs a threshold (× the row's median |x|)");
  if (!as_finite_float(*tit, &iv->threshold)) return bad(where + ".threshold", not_finite(where + ".threshold"));
  (*canon)["threshold"] = float_json(iv->threshold);
  if (auto mit = item.find("mean"); mit != item.end()) {
    if (auto e = parse_floats(*mit, where + ".mean", where + ".mean", static_cast<size_t>(width), pname, &iv->vector))
      return e;
    (*canon)["mean"] = floats_json(iv->vector);
  }
  return std::nullopt;
}

// "vector": a raw list of width floats (into iv->vector), or the name of a library vector
// (*named; one direction per layer, taken when the item expands).
std::optional<GlassError> parse_vector_field(const json& v, const std::string& where, int64_t width,
                                             const std::string& pname, const ParseContext& ctx, Intervention* iv,
                                             std::shared_ptr<const ControlVector>* named, json* canon) {
  if (iv->op == InterventionOp::kClipMassive)
    return bad(where + ".vector", where + ".vector: clip_massive takes mean, not vector");
  if (const std::string* name = string_field(v)) {
    const auto* vectors = ctx.catalog.vectors;
    auto it = vectors != nullptr ? vectors->find(*name) : decltype(vectors->end()){};
    if (vectors == nullptr || it == vectors->end())
      return bad(where + ".vector", where + ".vector: unknown vector " + json_brief(v));
    if (iv->point == HookPoint::kMlpAct)
      return bad(where + ".vector", where + ".vector: library vectors live in the residual stream, not mlp_act");
    *named = it->second;
    if (iv->label.empty()) iv->label = "vector:" + *name;
    (*canon)["vector"] = *name;
    return std::nullopt;
  }
  if (auto e = parse_floats(v, where, where + ".vector", static_cast<size_t>(width), pname, &iv->vector)) return e;
  (*canon)["vector"] = floats_json(iv->vector);
  return std::nullopt;
}

// Expands one parsed item over its layers: with a library vector one intervention per layer (each
// with that layer's direction), else one per contiguous run of layers.
std::optional<GlassError> expand_layers(const Intervention& iv, const std::vector<int32_t>& layers,
                                        const ControlVector* named, const std::string& where,
                                        const std::string& list_where, const ParseContext& ctx, InterventionSet* out) {
  if (named != nullptr) {
    auto direction = [&](int32_t l) {
      return std::find_if(named->directions.begin(), named->directions.end(),
                          [&](const auto& p) { return p.first == l; });
    };
    for (int32_t l : layers) {
      if (direction(l) == named->directions.end())
        return bad(where + ".vector",
                   where + ".vector: " + name_brief(named->name) + " has no direction for layer " + std::to_string(l));
    }
    for (int32_t l : layers) {
      Intervention one = iv;
      one.layer_first = one.layer_last = l;
      one.vector = direction(l)->second;
      if (auto e = push(std::move(one), where, list_where, ctx, out)) return e;
    }
    return std::nullopt;
  }
  for (size_t i = 0; i < layers.size();) {
    size_t j = i + 1;
    while (j < layers.size() && layers[j] == layers[j - 1] + 1) ++j;
    Intervention run = iv;
    run.layer_first = layers[i];
    run.layer_last = layers[j - 1];
    if (auto e = push(std::move(run), where, list_where, ctx, out)) return e;
    i = j;
  }
  return std::nullopt;
}

// {"op": ..., "point": ..., "layer" | "layers": ..., ...}: one intervention item.
std::optional<GlassError> parse_op_item(const json& item, const std::string& where, const std::string& list_where,
                                        const ParseContext& ctx, InterventionSet* out) {
  static const std::set<std::string> kKeys = {"op",     "point",     "layer", "layers", "dims", "strength",
                                              "vector", "threshold", "mean",  "tokens", "label"};
  for (const auto& [k, v] : item.items()) {
    if (!kKeys.count(k))
      return bad(where + "." + name_brief(k), where + "." + name_brief(k) +
                                                  ": unknown field (op, point, layer | layers, dims, strength, vector, "
                                                  "threshold, mean, tokens, label; or preset; or control_vector)");
  }
  const ModelConfig& m = *ctx.model;
  Intervention iv;
  json canon = json::object();
  auto oit = item.find("op");
  auto op =
      oit != item.end() && oit->is_string() ? parse_intervention_op(oit->get_ref<const std::string&>()) : std::nullopt;
  if (!op) return bad(where + ".op", where + ".op: expected scale, add, set, clamp, ablate, clip_massive or skip");
  iv.op = *op;
  canon["op"] = std::string(intervention_op_name(iv.op));
  const bool skip = iv.op == InterventionOp::kSkip;
  if (skip) {
    // A skip replaces whole layers (resid_post = resid_pre): nothing to edit by, no other point.
    for (const char* k : {"dims", "strength", "vector", "threshold", "mean"}) {
      if (item.contains(k))
        return bad(where + "." + k, where + "." + k +
                                        ": not used by skip (it sets each layer's resid_post to its resid_pre; give "
                                        "op, layer | layers, and optionally point resid_post, tokens, label)");
    }
  }
  auto pit = item.find("point");
  if (pit == item.end() && !skip) return bad(where + ".point", where + ".point: required");
  if (pit != item.end()) {
    if (auto e = parse_point(*pit, where + ".point", &iv.point)) return e;
  }
  if (skip && iv.point != HookPoint::kResidPost)
    return bad(where + ".point", where +
                                     ".point: skip acts at resid_post (resid_post = resid_pre of the layer); give "
                                     "resid_post or leave point out, not " +
                                     std::string(hook_point_name(iv.point)));
  const std::string pname(hook_point_name(iv.point));
  canon["point"] = pname;
  const int64_t width = point_width(iv.point, m);
  std::vector<int32_t> layers;
  auto lit = item.find("layer"), lsit = item.find("layers");
  json layers_canon;
  if (auto e = parse_layers(lit != item.end() ? &*lit : nullptr, lsit != item.end() ? &*lsit : nullptr, where,
                            m.n_layers, &layers, &layers_canon))
    return e;
  canon[lit != item.end() ? "layer" : "layers"] = std::move(layers_canon);
  if (auto dit = item.find("dims"); dit != item.end()) {
    if (auto e = parse_dims(*dit, where, width, pname, &iv.dims)) return e;
    canon["dims"] = iv.dims;
  }
  if (auto e = parse_strength(item, where, iv.op != InterventionOp::kClipMassive && !skip, &iv.strength)) return e;
  if (item.contains("strength")) canon["strength"] = float_json(iv.strength);
  if (auto e = parse_clip_fields(item, where, width, pname, &iv, &canon)) return e;
  if (auto tit = item.find("tokens"); tit != item.end()) {
    if (auto e = parse_tokens(*tit, where + ".tokens", &iv.tokens)) return e;
    canon["tokens"] = selector_json(iv.tokens);
  }
  if (auto bit = item.find("label"); bit != item.end()) {
    if (!bit->is_string()) return bad(where + ".label", where + ".label: expected a string");
    if (bit->get_ref<const std::string&>().size() > kMaxLabelBytes)
      return bad(where + ".label", where + ".label: at most " + std::to_string(kMaxLabelBytes) + " bytes");
    iv.label = bit->get<std::string>();
    canon["label"] = iv.label;
  }
  std::shared_ptr<const ControlVector> named;
  if (auto vit = item.find("vector"); vit != item.end()) {
    if (auto e = parse_vector_field(*vit, where, width, pname, ctx, &iv, &named, &canon)) return e;
  }
  if (auto e = expand_layers(iv, layers, named.get(), where, list_where, ctx, out)) return e;
  out->items.push_back(std::move(canon));
  return std::nullopt;
}

// One item of an interventions list: a preset reference, a control vector or an op item.
std::optional<GlassError> parse_one(const json& item, const std::string& where, const std::string& list_where,
                                    const ParseContext& ctx, bool allow_presets, InterventionSet* out) {
  if (!item.is_object()) return bad(where, where + ": expected an object");
  if (auto pit = item.find("preset"); pit != item.end())
    return parse_preset_item(item, *pit, where, list_where, ctx, allow_presets, out);
  if (auto cit = item.find("control_vector"); cit != item.end())
    return parse_control_vector_item(item, *cit, where, list_where, ctx, out);
  return parse_op_item(item, where, list_where, ctx, out);
}

// "attention_sinks": true (the first token) | false | {"tokens": N} (the first N, 1..kMaxSinkTokens).
std::optional<GlassError> parse_attention_sinks(const json& v, const std::string& w, int32_t* out) {
  const std::string expected =
      ": expected true, false or {\"tokens\": N} with N in 1.." + std::to_string(kMaxSinkTokens);
  if (v.is_boolean()) {
    *out = v.get<bool>() ? 1 : 0;
    return std::nullopt;
  }
  if (!v.is_object()) return bad(w, w + expected);
  for (const auto& [k, x] : v.items()) {
    if (k != "tokens") return bad(w + "." + name_brief(k), w + "." + name_brief(k) + ": unknown field (tokens)");
  }
  auto it = v.find("tokens");
  if (it == v.end()) return bad(w + ".tokens", w + ".tokens: required" + expected);
  int64_t n = 0;
  if (!as_int64(*it, &n) || n < 1 || n > kMaxSinkTokens)
    return bad(w + ".tokens", w + ".tokens: " + json_brief(*it) + " is not a number of key positions in 1.." +
                                  std::to_string(kMaxSinkTokens));
  *out = static_cast<int32_t>(n);
  return std::nullopt;
}

std::optional<GlassError> parse_observe(const json& o, const std::string& w, const ModelConfig& m,
                                        GlassRequestParts* out) {
  if (!o.is_object()) return bad(w, w + ": expected an object");
  static const std::set<std::string> kKeys = {"points",         "layers",  "tokens",     "top_k",          "stats",
                                              "detect_massive", "capture", "layer_time", "attention_sinks"};
  for (const auto& [k, v] : o.items()) {
    if (!kKeys.count(k))
      return bad(w + "." + name_brief(k), w + "." + name_brief(k) +
                                              ": unknown field (points, layers, tokens, top_k, stats, detect_massive, "
                                              "capture, layer_time, attention_sinks)");
  }
  ObserveSpec& obs = out->observe;
  json canon = json::object();
  obs.enabled = true;
  if (auto it = o.find("points"); it != o.end()) {
    const json& p = *it;
    if (p.is_string() && p.get_ref<const std::string&>() == "all") {
      for (int i = 0; i < kNumLayerPoints; ++i) obs.points.push_back(static_cast<HookPoint>(i));
      canon["points"] = "all";
    } else if (p.is_array() && !p.empty()) {
      for (const json& x : p) {
        HookPoint hp;
        if (auto e = parse_point(x, w + ".points", &hp)) return e;
        if (std::find(obs.points.begin(), obs.points.end(), hp) == obs.points.end()) obs.points.push_back(hp);
      }
      json names = json::array();
      for (HookPoint hp : obs.points) names.push_back(std::string(hook_point_name(hp)));
      canon["points"] = std::move(names);
    } else {
      return bad(w + ".points", w + ".points: expected \"all\" or a list of hook points");
    }
  }
  if (auto it = o.find("layers"); it != o.end()) {
    json lc;
    if (auto e = parse_layers(nullptr, &*it, w, m.n_layers, &obs.layers, &lc)) return e;
    canon["layers"] = std::move(lc);
  }
  if (auto it = o.find("tokens"); it != o.end()) {
    if (auto e = parse_tokens(*it, w + ".tokens", &obs.tokens)) return e;
    canon["tokens"] = selector_json(obs.tokens);
  }
  if (auto it = o.find("top_k"); it != o.end()) {
    int64_t k = 0;
    if (!as_int64(*it, &k) || k < 0 || k > kMaxTopK)
      return bad(w + ".top_k", w + ".top_k: expected 0.." + std::to_string(kMaxTopK));
    obs.top_k = static_cast<int32_t>(k);
    canon["top_k"] = obs.top_k;
  }
  if (auto it = o.find("stats"); it != o.end()) {
    static const std::set<std::string> kStats = {"max_abs", "median_abs", "rms", "mean", "top_k", "max_ratio"};
    if (!it->is_array()) return bad(w + ".stats", w + ".stats: expected a list");
    for (const json& s : *it) {
      if (!s.is_string() || !kStats.count(s.get_ref<const std::string&>()))
        return bad(w + ".stats",
                   w + ".stats: " + json_brief(s) + " is not max_abs, median_abs, max_ratio, rms, mean or top_k");
      if (std::find(out->stats.begin(), out->stats.end(), s.get_ref<const std::string&>()) == out->stats.end())
        out->stats.push_back(s.get<std::string>());
    }
    canon["stats"] = out->stats;
  }
  if (auto it = o.find("detect_massive"); it != o.end()) {
    if (!it->is_boolean()) return bad(w + ".detect_massive", w + ".detect_massive: expected true or false");
    obs.detect_massive = it->get<bool>();
    canon["detect_massive"] = obs.detect_massive;
  }
  if (auto it = o.find("layer_time"); it != o.end()) {
    if (!it->is_boolean()) return bad(w + ".layer_time", w + ".layer_time: expected true or false");
    obs.layer_time = it->get<bool>();
    canon["layer_time"] = obs.layer_time;
  }
  if (auto it = o.find("attention_sinks"); it != o.end()) {
    if (auto e = parse_attention_sinks(*it, w + ".attention_sinks", &obs.sink_tokens)) return e;
    if (obs.sink_tokens > 0) canon["attention_sinks"] = {{"tokens", obs.sink_tokens}};
  }
  if (auto it = o.find("capture"); it != o.end()) {
    const json& c = *it;
    if (!c.is_array()) return bad(w + ".capture", w + ".capture: expected a list of {point, layer, token}");
    json caps = json::array();
    for (size_t i = 0; i < c.size(); ++i) {
      const std::string cw = w + ".capture[" + std::to_string(i) + "]";
      const json& x = c[i];
      CaptureRequest cr;
      if (!x.is_object() || !x.contains("point") || !x.contains("layer") || !x.contains("token"))
        return bad(cw, cw + ": expected {point, layer, token}");
      if (auto e = parse_point(x["point"], cw + ".point", &cr.point)) return e;
      int64_t layer = 0, token = 0;
      if (!as_int64(x["layer"], &layer) || layer < 0 || layer >= m.n_layers)
        return bad(cw + ".layer", cw + ".layer: not a layer of this model (0.." + std::to_string(m.n_layers - 1) + ")");
      if (!as_int64(x["token"], &token) || token < 0 || token > kMaxPosition)
        return bad(cw + ".token", cw + ".token: expected a token position");
      cr.layer = static_cast<int32_t>(layer);
      cr.position = static_cast<int32_t>(token);
      obs.captures.push_back(cr);
      caps.push_back({{"point", std::string(hook_point_name(cr.point))}, {"layer", cr.layer}, {"token", cr.position}});
      // Stop early: the sum of widths is capped (resolve_observe names the cap).
      if (static_cast<int64_t>(obs.captures.size()) * std::min(m.n_embd, m.n_ff) > kMaxCaptureFloats) break;
    }
    canon["capture"] = std::move(caps);
  }
  Status s = resolve_observe(obs, m);
  if (!s.is_ok()) return bad("glassbox", "glassbox: " + s.message());
  out->canonical["observe"] = std::move(canon);
  return std::nullopt;
}

}  // namespace

std::optional<GlassError> parse_interventions(const json& list, const std::string& where, const ParseContext& ctx,
                                              bool allow_presets, InterventionSet* out) {
  if (!list.is_array()) return bad(where, where + ": expected a list of interventions");
  if (static_cast<int64_t>(list.size()) > ctx.max_interventions)
    return bad(where, where + ": at most " + std::to_string(ctx.max_interventions) +
                          " interventions (glassbox_policy.max_interventions)");
  for (size_t i = 0; i < list.size(); ++i) {
    if (auto e = parse_one(list[i], where + "[" + std::to_string(i) + "]", where, ctx, allow_presets, out)) return e;
  }
  return std::nullopt;
}

std::optional<GlassError> parse_glass_request(const json& ext, const ParseContext& ctx, const GlassGate& gate,
                                              GlassRequestParts* out) {
  *out = GlassRequestParts{};
  if (!ext.is_object()) return bad("glassbox", "glassbox: expected an object");
  static const std::set<std::string> kKeys = {"observe", "interventions", "massive", "stop_on_repetition"};
  for (const auto& [k, v] : ext.items()) {
    if (!kKeys.count(k))
      return bad("glassbox." + name_brief(k),
                 "glassbox." + name_brief(k) + ": unknown field (observe, interventions, massive, stop_on_repetition)");
  }

  // ---- observation ----
  if (auto it = ext.find("observe"); it != ext.end() && !it->is_null()) {
    if (auto e = gate(GlassUse::kObserve)) return e;
    out->observes = true;
    if (auto e = parse_observe(*it, "glassbox.observe", *ctx.model, out)) return e;
  }
  if (auto it = ext.find("massive"); it != ext.end()) {
    const json& m = *it;
    const std::string w = "glassbox.massive";
    if (!m.is_object()) return bad(w, w + ": expected {min_abs, min_ratio, median, fire_on}");
    json canon = json::object();
    for (const auto& [k, v] : m.items()) {
      const std::string kw = w + "." + name_brief(k);
      float f = 0;
      if (k == "min_abs" || k == "min_ratio") {
        if (!as_finite_float(v, &f) || f < 0) return bad(kw, kw + ": expected a finite number >= 0");
        (k == "min_abs" ? out->massive.min_abs : out->massive.min_ratio) = f;
        canon[k] = float_json(f);
      } else if (k == "median") {
        const auto med = v.is_string() ? parse_massive_median(v.get_ref<const std::string&>()) : std::nullopt;
        if (!med)
          return bad(kw, kw + ": " + json_brief(v) +
                             " is not \"layer\" (the median |x| of the sequence's rows, Sun et al.) or \"token\" "
                             "(each row's own)");
        out->massive.median = *med;
        canon[k] = std::string(massive_median_name(*med));
      } else if (k == "fire_on") {
        const auto fire = v.is_string() ? parse_massive_fire(v.get_ref<const std::string&>()) : std::nullopt;
        if (!fire) return bad(kw, kw + ": " + json_brief(v) + " is not \"both\", \"abs\", \"ratio\" or \"either\"");
        out->massive.fire_on = *fire;
        canon[k] = std::string(massive_fire_name(*fire));
      } else {
        return bad(kw, kw + ": unknown field (min_abs, min_ratio, median, fire_on)");
      }
    }
    out->canonical["massive"] = std::move(canon);
  }
  if (auto it = ext.find("stop_on_repetition"); it != ext.end()) {
    const json& r = *it;
    const std::string w = "glassbox.stop_on_repetition";
    if (!r.is_object()) return bad(w, w + ": expected {ngram, window, max_rate}");
    RepetitionStop stop;
    json canon = json::object();
    for (const auto& [k, v] : r.items()) {
      int64_t i = 0;
      if (k == "ngram" && as_int64(v, &i) && i >= 1 && i <= 64) {
        stop.ngram = static_cast<int32_t>(i);
        canon[k] = stop.ngram;
      } else if (k == "window" && as_int64(v, &i) && i >= 1 && i <= 4096) {
        stop.window = static_cast<int32_t>(i);
        canon[k] = stop.window;
      } else if (k == "max_rate" && v.is_number() && v.get<double>() > 0 && v.get<double>() <= 1) {
        stop.max_rate = v.get<double>();
        canon[k] = stop.max_rate;
      } else {
        return bad(w + "." + name_brief(k),
                   w + "." + name_brief(k) + ": expected ngram 1..64, window 1..4096 or max_rate in (0, 1]");
      }
    }
    out->stop_on_repetition = stop;
    out->canonical["stop_on_repetition"] = std::move(canon);
  }

  // ---- the request's own interventions ----
  auto it = ext.find("interventions");
  out->asks_interventions = it != ext.end() && !it->is_null() && !(it->is_array() && it->empty());
  if (out->asks_interventions) {
    if (auto e = gate(GlassUse::kIntervene)) return e;
    if (auto e = parse_interventions(*it, "glassbox.interventions", ctx, true, &out->interventions)) return e;
    out->canonical["interventions"] = out->interventions.items;
  }
  return std::nullopt;
}

std::optional<GlassError> parse_vector_directions(const json& d, const ModelConfig& m, const std::string& name,
                                                  ControlVector* out, json* canonical) {
  if (!d.is_object() || d.empty())
    return bad("directions", "directions: expected {\"<layer>\": [n_embd numbers], ...}");
  out->name = name;
  out->n_embd = m.n_embd;
  out->directions.clear();
  *canonical = json::object();
  for (const auto& [k, v] : d.items()) {
    char* end = nullptr;
    const long l = std::strtol(k.c_str(), &end, 10);
    if (end == k.c_str() || *end != '\0' || l < 0 || l >= m.n_layers)
      return bad("directions", "directions." + name_brief(k) + ": not a layer of this model");
    const std::string w = "directions." + k;
    if (!v.is_array()) return bad("directions", w + ": expected a list of numbers");
    if (static_cast<int64_t>(v.size()) != m.n_embd)
      return bad("directions",
                 w + ": " + std::to_string(v.size()) + " values, the model has " + std::to_string(m.n_embd) + " dims");
    std::vector<float> values;
    if (auto e = parse_floats(v, "directions", w, static_cast<size_t>(m.n_embd), "the model", &values)) {
      e->param = "directions";
      return e;
    }
    (*canonical)[k] = floats_json(values);
    out->directions.emplace_back(static_cast<int32_t>(l), std::move(values));
  }
  std::sort(out->directions.begin(), out->directions.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return std::nullopt;
}

// ---- output ----

json float_json(float v) {
  if (std::isfinite(v)) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
  }
  return std::isnan(v) ? json("nan") : json(v > 0 ? "inf" : "-inf");
}

std::string name_brief(const std::string& s) {
  constexpr size_t kMax = 64;
  if (s.size() <= kMax) return s;
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
  return s.substr(0, cut) + "…";
}

std::string json_brief(const json& v) {
  switch (v.type()) {
    case json::value_t::string: {
      std::string s = "'";
      s += name_brief(v.get_ref<const std::string&>());
      s += '\'';
      return s;
    }
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    case json::value_t::null: return "null";
    default: return v.dump();  // a number or a boolean: short
  }
}

Result<LocalGlass> parse_local_glass(const json& ext, const ModelConfig& m,
                                     const std::map<std::string, std::shared_ptr<const ControlVector>>* vectors) {
  ParseContext ctx;
  ctx.model = &m;
  ctx.catalog.vectors = vectors;
  GlassRequestParts parts;
  if (auto e = parse_glass_request(
          ext, ctx, [](GlassUse) { return std::optional<GlassError>(); }, &parts))
    return Status::error(e->message);
  LocalGlass out;
  out.stats = std::move(parts.stats);
  out.stop_on_repetition = parts.stop_on_repetition;
  if (!parts.observes && parts.interventions.interventions.empty()) return out;
  GlassSpec spec;
  spec.observe = std::move(parts.observe);
  spec.massive = parts.massive;
  spec.interventions = std::move(parts.interventions.interventions);
  out.spec = seal_resolved_spec(std::move(spec), m);
  return out;
}

json layer_time_json(const LayerTime& t) {
  double total = t.head_ms;
  for (double ms : t.layer_ms) total += ms;
  auto share = [&](double ms) { return total > 0 ? ms / total : 0.0; };
  json layers = json::array();
  for (size_t l = 0; l < t.layer_ms.size(); ++l)
    layers.push_back({{"layer", l}, {"ms", t.layer_ms[l]}, {"share", share(t.layer_ms[l])}});
  return {{"steps", t.steps},
          {"total_ms", total},
          {"layers", std::move(layers)},
          {"head", {{"ms", t.head_ms}, {"share", share(t.head_ms)}}}};
}

json attention_sinks_json(const GlassReport& r) {
  json layers = json::array();
  for (const SinkStats& s : r.sinks) {
    json mean = json::array(), max = json::array();
    for (float v : s.mean) mean.push_back(float_json(v));
    for (float v : s.max) max.push_back(float_json(v));
    layers.push_back(
        {{"layer", s.layer}, {"tokens", s.n_tokens}, {"mean", mean}, {"max", max}, {"max_token", s.max_position}});
  }
  return {{"sink_tokens", r.sink_tokens}, {"layers", layers}};
}

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
                      {"median", std::string(massive_median_name(ev.median))},
                      {"ratio", float_json(ev.ratio)},
                      {"abs_test", ev.abs_test},
                      {"ratio_test", ev.ratio_test}});
  }
  json captures = json::array();
  for (const Capture& c : r.captures) {
    captures.push_back({{"layer", c.layer},
                        {"point", std::string(hook_point_name(c.point))},
                        {"token", c.position},
                        {"values", c.filled ? floats_json(c.data) : json(nullptr)}});
  }
  json applied = json::array();
  for (const AppliedIntervention& a : r.applied) {
    json e = {{"op", std::string(intervention_op_name(a.op))},
              {"point", std::string(hook_point_name(a.point))},
              {"layers", {a.layer_first, a.layer_last}},
              {"tokens", selector_json(a.tokens)},
              {"rows", a.rows}};
    if (a.op != InterventionOp::kSkip) e["strength"] = float_json(a.strength);
    if (!a.dims.empty()) e["dims"] = a.dims;
    if (a.op == InterventionOp::kClipMassive) e["threshold"] = float_json(a.threshold);
    if (a.vector_size > 0) e["vector"] = {{"size", a.vector_size}, {"norm", float_json(a.vector_norm)}};
    if (!a.label.empty()) e["label"] = a.label;
    applied.push_back(std::move(e));
  }
  json out = {{"report", report}, {"events", events}, {"applied", applied}};
  if (r.events_dropped > 0) out["events_dropped"] = r.events_dropped;
  if (!captures.empty()) out["captures"] = captures;
  if (r.layer_time.enabled) out["layer_time"] = layer_time_json(r.layer_time);
  if (r.sink_tokens > 0) out["attention_sinks"] = attention_sinks_json(r);
  return out;
}

}  // namespace gb

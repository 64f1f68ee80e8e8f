#include "server/glass_api.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

ApiError to_api(const GlassError& g) {
  if (g.forbidden) return forbidden(g.code, g.message);
  ApiError e = bad(g.param, g.message);
  e.code = g.code;
  return e;
}

ApiError conflict(const std::string& what, const std::vector<std::string>& conflicts) {
  ApiError e;
  e.status = 409;
  e.code = "policy_conflict";
  std::string list;
  for (size_t i = 0; i < conflicts.size() && i < 20; ++i) list += "; " + conflicts[i];
  if (conflicts.size() > 20) list += "; and " + std::to_string(conflicts.size() - 20) + " more";
  e.message = what + " conflicts with " + std::to_string(conflicts.size()) +
              " stored set(s), which requests would then be refused for; change or delete them first" + list;
  return e;
}

bool has_role(const std::vector<Role>& roles, Role r) {
  return std::find(roles.begin(), roles.end(), r) != roles.end();
}

std::string roles_text(const std::vector<Role>& roles) {
  std::string s;
  for (Role r : roles) s += (s.empty() ? "" : ", ") + std::string(role_name(r));
  return s.empty() ? "none" : s;
}

// A header value for a message: printable ASCII only, at most 64 characters.
std::string header_brief(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (out.size() == 64) return out + "...";
    out += ch >= 0x20 && ch < 0x7f ? ch : '?';
  }
  return out;
}

// Names of presets, vectors and sessions (they appear in URLs, messages and audit rows).
std::optional<ApiError> check_name(const std::string& kind, const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
           ch == '.' || ch == ':';
  });
  if (ok) return std::nullopt;
  return bad(kind, kind + " names are 1..128 characters of letters, digits and - _ . : ('" + header_brief(name) + "')");
}

std::string default_label(int64_t version) { return "default set v" + std::to_string(version); }

// A session set as requests meet it: followed by the default set in force.
std::optional<GlassError> check_with_default(const InterventionSet& session, const std::string& session_name,
                                             const GlassState& st, const ModelConfig& m) {
  if (st.default_version == 0) return std::nullopt;
  InterventionSet both;
  if (auto e = append_set(session, "session " + session_name, st.limits.max_interventions, &both)) return e;
  if (auto e = append_set(*st.defaults[st.default_version - 1], default_label(st.default_version),
                          st.limits.max_interventions, &both))
    return e;
  return check_combined(both.interventions, both.sources, st.limits, m, "interventions");
}

// Every stored set that requests would be refused for under st (its policy and limits).
std::vector<std::string> conflicts(const GlassState& st, const ModelConfig& m) {
  std::vector<std::string> out;
  for (const auto& [name, set] : st.presets) {
    if (auto e = check_set(*set, st.limits, m)) out.push_back("preset " + name + ": " + e->message);
  }
  if (st.default_version > 0) {
    if (auto e = check_set(*st.defaults[st.default_version - 1], st.limits, m))
      out.push_back(default_label(st.default_version) + ": " + e->message);
  }
  for (const auto& [id, s] : st.sessions) {
    if (auto e = check_set(*s.set, st.limits, m)) {
      out.push_back("session " + id + ": " + e->message);
    } else if (auto e2 = check_with_default(*s.set, id, st, m)) {
      out.push_back("session " + id + " with the " + default_label(st.default_version) + ": " + e2->message);
    }
  }
  return out;
}

json session_json(const GlassSession& s) {
  json j = {{"interventions", s.set->items}};
  if (s.restricted) {
    json roles = json::array();
    for (Role r : s.roles) roles.push_back(role_name(r));
    j["roles"] = roles;
    j["keys"] = s.keys;
  }
  return j;
}

}  // namespace

GlassLimits glass_limits(const GlassPolicyConfig& p) {
  GlassLimits l;
  for (const auto& [op, cap] : p.caps) {
    if (auto o = parse_intervention_op(op)) l.caps[static_cast<size_t>(*o)] = cap;
  }
  for (int64_t layer : p.allowed_layers)
    l.allowed_layers.push_back(static_cast<int32_t>(std::min<int64_t>(layer, 1 << 30)));
  for (const std::string& point : p.allowed_points) {
    if (auto hp = parse_hook_point(point)) l.allowed_points.push_back(*hp);
  }
  l.max_interventions = static_cast<int32_t>(p.max_interventions);
  return l;
}

GlassService::GlassService(const ServerConfig& cfg, const ModelConfig* model)
    : model_(model),
      max_request_observation_bytes_(cfg.max_request_observation_bytes),
      max_observation_bytes_(cfg.max_observation_bytes),
      observation_used_(std::make_shared<std::atomic<int64_t>>(0)) {
  auto st = std::make_shared<GlassState>();
  st->interventions_enabled = cfg.interventions;
  st->policy = cfg.glassbox_policy;
  st->policy.presets = json::object();  // resolved by init()
  st->limits = glass_limits(st->policy);
  presets_source_ = cfg.glassbox_policy.presets;
  // The presets resolve now as far as they can without the vector library; init() loads the
  // library and resolves them again, stopping the server on an error.
  json change;
  GlassState candidate = *st;
  if (model_ != nullptr && !apply_policy(candidate, presets_source_, /*replace_presets=*/true, &change))
    *st = candidate;
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
    json change;
    if (auto e = apply_policy(st, presets_source_, /*replace_presets=*/true, &change)) {
      e->message = "glassbox_policy: " + e->message;
      return e;
    }
    return std::nullopt;
  });
  if (err) return Status::error(err->message);
  return Status::ok();
}

std::optional<ApiError> GlassService::may_observe(const Caller& caller, const std::string& param) const {
  const std::shared_ptr<const GlassState> st = state();
  if (has_role(st->policy.observe_roles, caller.role)) return std::nullopt;
  return forbidden("role_not_allowed", param + ": the " + std::string(role_name(caller.role)) +
                                           " role may not observe (glassbox_policy.observe_roles: " +
                                           roles_text(st->policy.observe_roles) + ")");
}

std::optional<ApiError> GlassService::may_intervene(const Caller& caller, const std::string& param) const {
  const std::shared_ptr<const GlassState> st = state();
  if (!st->interventions_enabled)
    return forbidden("interventions_disabled", param + ": interventions are off on this server (interventions: false)");
  if (has_role(st->policy.intervention_roles, caller.role)) return std::nullopt;
  return forbidden("role_not_allowed", param + ": the " + std::string(role_name(caller.role)) +
                                           " role may not intervene (glassbox_policy.intervention_roles: " +
                                           roles_text(st->policy.intervention_roles) + ")");
}

std::optional<ApiError> GlassService::reserve_observation(int64_t per_sequence, int64_t n_sequences,
                                                          const std::string& param,
                                                          std::shared_ptr<const void>* reservation,
                                                          int64_t* reserved) const {
  const int64_t n = std::max<int64_t>(1, n_sequences);
  if (per_sequence > max_request_observation_bytes_ / n) {
    ApiError e = bad(param, param + ": this request would hold " + std::to_string(per_sequence) +
                                " bytes of observation per sequence × " + std::to_string(n) +
                                " sequence(s) (prompts × n), over max_request_observation_bytes = " +
                                std::to_string(max_request_observation_bytes_) +
                                "; observe fewer layers or points, capture less, or ask for fewer choices");
    e.code = "observation_budget_exceeded";
    return e;
  }
  const int64_t bytes = per_sequence * n;
  const int64_t before = observation_used_->fetch_add(bytes);
  if (before + bytes > max_observation_bytes_) {
    observation_used_->fetch_sub(bytes);
    ApiError e;
    e.status = 429;
    e.type = "rate_limit_error";
    e.code = "observation_budget_busy";
    e.message = "the server's observation memory is in use: requests in flight hold " + std::to_string(before) +
                " bytes, this one needs " + std::to_string(bytes) +
                ", over max_observation_bytes = " + std::to_string(max_observation_bytes_) +
                "; retry shortly (or raise max_observation_bytes)";
    e.retry_after_s = 1;
    return e;
  }
  struct Reservation {
    Reservation(std::shared_ptr<std::atomic<int64_t>> u, int64_t b) : used(std::move(u)), bytes(b) {}
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { used->fetch_sub(bytes); }
    std::shared_ptr<std::atomic<int64_t>> used;
    int64_t bytes;
  };
  *reservation = std::make_shared<const Reservation>(observation_used_, bytes);
  if (reserved != nullptr) *reserved = bytes;
  return std::nullopt;
}

// ---- requests ----

std::optional<ApiError> GlassService::resolve(const json* ext, const std::string& session, const Caller& caller,
                                              int64_t n_sequences, GlassRequest* out) const {
  *out = GlassRequest{};
  const std::shared_ptr<const GlassState> st = state();
  const bool has_ext = ext != nullptr && !ext->is_null();
  const bool has_default = st->interventions_enabled && st->default_version > 0;
  if (!has_ext && session.empty() && !has_default) return std::nullopt;
  if (!available()) return bad("glassbox", "glassbox: this server's engine does not support the glass box");

  const ApiError disabled = forbidden("interventions_disabled",
                                      "glassbox.interventions: interventions are off on this "
                                      "server (interventions: false)");
  ParseContext ctx{model_, st->catalog(), &st->limits, st->limits.max_interventions};
  GlassRequestParts parts;
  if (has_ext) {
    std::optional<ApiError> gate_error;
    auto gate = [&](GlassUse use) -> std::optional<GlassError> {
      if (use == GlassUse::kObserve) {
        if (has_role(st->policy.observe_roles, caller.role)) return std::nullopt;
        return glass_forbidden("role_not_allowed", "glassbox.observe: the " + std::string(role_name(caller.role)) +
                                                       " role may not observe (glassbox_policy.observe_roles: " +
                                                       roles_text(st->policy.observe_roles) + ")");
      }
      if (!st->interventions_enabled) return glass_forbidden(disabled.code, disabled.message);
      if (has_role(st->policy.intervention_roles, caller.role)) return std::nullopt;
      return glass_forbidden("role_not_allowed", "glassbox.interventions: the " + std::string(role_name(caller.role)) +
                                                     " role may not intervene (glassbox_policy.intervention_roles: " +
                                                     roles_text(st->policy.intervention_roles) + ")");
    };
    if (auto e = parse_glass_request(*ext, ctx, gate, &parts)) return to_api(*e);
  }
  if (!session.empty() && !st->interventions_enabled) return disabled;

  // ---- the request's interventions, then its session's, then the global default set ----
  InterventionSet all = std::move(parts.interventions);
  json audit = {{"glassbox", std::move(parts.canonical)}};
  if (!session.empty()) {
    auto it = st->sessions.find(session);
    if (it == st->sessions.end())
      return bad("X-Glassbox-Session", "X-Glassbox-Session: unknown session '" + header_brief(session) +
                                           "' (PUT /admin/glassbox/sessions/ID)");
    const GlassSession& s = it->second;
    const bool open = s.restricted ? has_role(s.roles, caller.role) ||
                                         std::find(s.keys.begin(), s.keys.end(), caller.key_id) != s.keys.end()
                                   : has_role(st->policy.intervention_roles, caller.role);
    if (!open) {
      return forbidden(
          "session_not_allowed",
          "X-Glassbox-Session: session '" + session + "' is not open to key '" + caller.key_id + "' (" +
              std::string(role_name(caller.role)) + " role); it is open to " +
              (s.restricted
                   ? "the roles [" + roles_text(s.roles) + "] and " + std::to_string(s.keys.size()) + " listed key(s)"
                   : "glassbox_policy.intervention_roles (" + roles_text(st->policy.intervention_roles) +
                         "); its PUT may list roles and keys"));
    }
    if (auto e = append_set(*s.set, "session " + session, st->limits.max_interventions, &all)) {
      e->param = "X-Glassbox-Session";
      return to_api(*e);
    }
    audit["session"] = session;
  }
  if (has_default) {
    if (auto e = append_set(*st->defaults[st->default_version - 1], default_label(st->default_version),
                            st->limits.max_interventions, &all)) {
      e->param = "glassbox.interventions";
      return to_api(*e);
    }
    audit["default_version"] = st->default_version;
  }
  if (!parts.observes && all.interventions.empty() && !parts.stop_on_repetition) return std::nullopt;
  if (auto e = check_combined(all.interventions, all.sources, st->limits, *model_, "glassbox.interventions"))
    return to_api(*e);

  GlassSpec spec;
  spec.observe = std::move(parts.observe);
  spec.massive = parts.massive;
  spec.interventions = std::move(all.interventions);
  std::shared_ptr<const GlassSpec> sealed = seal_resolved_spec(std::move(spec), *model_);

  // ---- observation memory: this request's, then the server's ----
  if (auto e = reserve_observation(observation_bytes(*sealed, *model_), n_sequences, "glassbox.observe",
                                   &out->observation, &out->observation_bytes))
    return e;

  out->intervenes = !sealed->interventions.empty();
  out->spec = std::move(sealed);
  out->audit_spec = std::move(audit);
  out->stats = std::move(parts.stats);
  out->stop_on_repetition = parts.stop_on_repetition;
  return std::nullopt;
}

// ---- admin ----

std::optional<ApiError> GlassService::apply_policy(GlassState& st, const json& presets, bool replace_presets,
                                                   json* change) const {
  st.limits = glass_limits(st.policy);
  std::map<std::string, std::shared_ptr<const InterventionSet>> next = replace_presets ? decltype(next){} : st.presets;
  json set = json::array(), removed = json::array();
  if (!presets.is_null() && !presets.is_object())
    return bad("presets", "presets: expected a map of name -> list of interventions");
  // Presets resolve against the library and the new limits; they may not use other presets.
  const GlassCatalog catalog{nullptr, &st.vectors};
  if (presets.is_object()) {
    for (const auto& [name, list] : presets.items()) {
      if (auto e = check_name("presets", name)) return e;
      if (list.is_null()) {
        if (!next.erase(name)) return bad("presets." + name, "presets." + name + ": no such preset to delete");
        removed.push_back(name);
        continue;
      }
      if (model_ == nullptr) return bad("glassbox", "this server's engine does not support the glass box");
      auto s = std::make_shared<InterventionSet>();
      ParseContext ctx{model_, catalog, &st.limits, st.limits.max_interventions};
      if (!list.is_array() || list.empty())
        return bad("presets." + name, "presets." + name + ": expected a non-empty list of interventions");
      if (auto e = parse_interventions(list, "presets." + name, ctx, false, s.get())) return to_api(*e);
      if (auto e = check_combined(s->interventions, s->sources, st.limits, *model_, "presets." + name))
        return to_api(*e);
      next[name] = std::move(s);
      set.push_back(name);
    }
  }
  if (replace_presets) {
    for (const auto& [name, s] : st.presets) {
      if (!next.count(name)) removed.push_back(name);
    }
  }
  st.presets = std::move(next);
  st.policy.presets = json::object();
  for (const auto& [name, s] : st.presets) st.policy.presets[name] = s->items;
  if (model_ != nullptr) {
    if (std::vector<std::string> c = conflicts(st, *model_); !c.empty()) return conflict("the policy", c);
  }
  *change = {{"policy", glass_policy_json(st.policy)}, {"presets_set", set}, {"presets_removed", removed}};
  return std::nullopt;
}

std::optional<ApiError> GlassService::set_policy(const json& body, json* change) {
  GlassPolicyConfig p;
  Status s = parse_glass_policy(body, &p);
  if (!s.is_ok()) return bad("policy", s.message());
  return update([&](GlassState& st) -> std::optional<ApiError> {
    st.policy = p;
    st.policy.presets = json::object();
    if (auto e = apply_policy(st, p.presets, /*replace_presets=*/true, change)) return e;
    // PUT replaces: say which keys took their defaults.
    json defaults = json::array();
    for (const char* k : {"intervention_roles", "observe_roles", "caps", "allowed_layers", "allowed_points", "presets",
                          "control_vectors", "max_interventions"}) {
      if (!body.contains(k)) defaults.push_back(k);
    }
    (*change)["replaced"] = true;
    (*change)["defaults_applied"] = defaults;
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::patch_policy(const json& body, json* change) {
  if (!body.is_object()) return bad("policy", "glassbox_policy: expected a map of the keys to change");
  return update([&](GlassState& st) -> std::optional<ApiError> {
    json merged = glass_policy_json(st.policy);
    merged.erase("presets");
    json presets = nullptr;
    json changed = json::array();
    for (const auto& [k, v] : body.items()) {
      changed.push_back(name_brief(k));
      if (k == "presets") {
        presets = v;
        if (!v.is_object()) return bad("presets", "presets: expected a map of name -> list of interventions (or null)");
      } else if (v.is_null()) {
        merged.erase(k);  // back to its default
      } else if (k == "caps" && v.is_object()) {
        for (const auto& [op, cap] : v.items()) {
          if (cap.is_null()) merged["caps"].erase(op);
          else merged["caps"][op] = cap.is_number() ? cap : json("invalid");
        }
      } else {
        merged[k] = v;
      }
    }
    GlassPolicyConfig p;
    Status s = parse_glass_policy(merged, &p);
    if (!s.is_ok()) return bad("policy", s.message());
    st.policy = p;
    if (auto e = apply_policy(st, presets, /*replace_presets=*/false, change)) return e;
    (*change)["merged"] = changed;
    return std::nullopt;
  });
}

template <class F>
std::optional<ApiError> GlassService::put_set(const json& body, const std::vector<std::string>& extra_keys,
                                              bool allow_presets, F&& store) {
  if (!available()) return bad("glassbox", "this server's engine does not support the glass box");
  if (!body.is_object() || !body.contains("interventions") || !body["interventions"].is_array())
    return bad("interventions", "expected {\"interventions\": [...]}");
  for (const auto& [k, v] : body.items()) {
    if (k != "interventions" && std::find(extra_keys.begin(), extra_keys.end(), k) == extra_keys.end())
      return bad(name_brief(k), name_brief(k) + ": unknown field");
  }
  const json& list = body["interventions"];
  return update([&](GlassState& st) -> std::optional<ApiError> {
    auto set = std::make_shared<InterventionSet>();
    ParseContext ctx{model_, st.catalog(), &st.limits, st.limits.max_interventions};
    if (auto e = parse_interventions(list, "interventions", ctx, allow_presets, set.get())) return to_api(*e);
    if (auto e = check_combined(set->interventions, set->sources, st.limits, *model_, "interventions"))
      return to_api(*e);
    return store(st, std::shared_ptr<const InterventionSet>(std::move(set)));
  });
}

std::optional<ApiError> GlassService::put_preset(const std::string& name, const json& body, json* change) {
  if (auto e = check_name("preset", name)) return e;
  if (body.is_object() && body.contains("interventions") && body["interventions"].empty())
    return bad("interventions", "a preset needs at least one intervention");
  return put_set(body, {}, /*allow_presets=*/false,
                 [&](GlassState& st, std::shared_ptr<const InterventionSet> set) -> std::optional<ApiError> {
                   st.policy.presets[name] = set->items;
                   *change = {{"preset", name}, {"interventions", set->items}};
                   st.presets[name] = std::move(set);
                   return std::nullopt;
                 });
}

std::optional<ApiError> GlassService::delete_preset(const std::string& name, json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (!st.presets.count(name)) return bad("preset", "unknown preset '" + header_brief(name) + "'");
    st.presets.erase(name);
    st.policy.presets.erase(name);
    *change = {{"preset", name}};
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::put_vector(const std::string& name, const json& body, json* change) {
  if (!available()) return bad("glassbox", "this server's engine does not support the glass box");
  if (auto e = check_name("vector", name)) return e;
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
    json directions;
    if (auto e = parse_vector_directions(body["directions"], *model_, name, &cv, &directions)) return to_api(*e);
    json layers = json::array();
    for (const auto& [l, v] : cv.directions) layers.push_back(l);
    *change = {{"vector", name}, {"layers", layers}, {"directions", directions}};
  }
  return update([&](GlassState& st) -> std::optional<ApiError> {
    st.vectors[name] = std::make_shared<const ControlVector>(std::move(cv));
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::delete_vector(const std::string& name, json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (!st.vectors.count(name)) return bad("vector", "unknown vector '" + header_brief(name) + "'");
    st.vectors.erase(name);
    *change = {{"vector", name}};
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::put_session(const std::string& id, const json& body, json* change) {
  if (auto e = check_name("session", id)) return e;
  GlassSession session;
  if (body.is_object()) {
    if (auto it = body.find("roles"); it != body.end()) {
      if (!it->is_array()) return bad("roles", "roles: expected a list of roles (user, researcher, admin)");
      for (const json& r : *it) {
        auto role = r.is_string() ? parse_role(r.get<std::string>()) : std::nullopt;
        if (!role) return bad("roles", "roles: " + json_brief(r) + " is not user, researcher or admin");
        if (!has_role(session.roles, *role)) session.roles.push_back(*role);
      }
      session.restricted = true;
    }
    if (auto it = body.find("keys"); it != body.end()) {
      if (!it->is_array() || it->size() > 1024) return bad("keys", "keys: expected a list of at most 1024 key ids");
      for (const json& k : *it) {
        if (!k.is_string() || k.get_ref<const std::string&>().empty() || k.get_ref<const std::string&>().size() > 128)
          return bad("keys", "keys: " + json_brief(k) + " is not a key id (keys[].id of the config)");
        session.keys.push_back(k.get<std::string>());
      }
      session.restricted = true;
    }
  }
  return put_set(body, {"roles", "keys"}, /*allow_presets=*/true,
                 [&](GlassState& st, std::shared_ptr<const InterventionSet> set) -> std::optional<ApiError> {
                   if (auto e = check_with_default(*set, id, st, *model_)) {
                     return conflict("this session with the " + default_label(st.default_version),
                                     {"session " + id + ": " + e->message});
                   }
                   session.set = std::move(set);
                   *change = session_json(session);
                   (*change)["session"] = id;
                   st.sessions[id] = std::move(session);
                   return std::nullopt;
                 });
}

std::optional<ApiError> GlassService::delete_session(const std::string& id, json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (!st.sessions.count(id)) return bad("session", "unknown session '" + header_brief(id) + "'");
    st.sessions.erase(id);
    *change = {{"session", id}};
    return std::nullopt;
  });
}

std::optional<ApiError> GlassService::put_default(const json& body, json* change) {
  return put_set(
      body, {}, /*allow_presets=*/true,
      [&](GlassState& st, std::shared_ptr<const InterventionSet> set) -> std::optional<ApiError> {
        const int64_t previous = st.default_version;
        st.defaults.push_back(set);
        st.default_version = static_cast<int64_t>(st.defaults.size());
        if (std::vector<std::string> c = conflicts(st, *model_); !c.empty()) return conflict("the new default set", c);
        *change = {{"version", st.default_version}, {"previous_version", previous}, {"interventions", set->items}};
        return std::nullopt;
      });
}

std::optional<ApiError> GlassService::rollback_default(json* change) {
  return update([&](GlassState& st) -> std::optional<ApiError> {
    if (st.default_version == 0) return bad("version", "the default set has no earlier version to roll back to");
    const int64_t from = st.default_version;
    --st.default_version;
    if (model_ != nullptr) {
      if (std::vector<std::string> c = conflicts(st, *model_); !c.empty())
        return conflict(
            "rolling back to " + (st.default_version > 0 ? default_label(st.default_version) : "no default set"), c);
    }
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
  for (const auto& [id, s] : st->sessions) sessions[id] = session_json(s);
  json versions = json::array();
  for (size_t i = 0; i < st->defaults.size(); ++i)
    versions.push_back({{"version", i + 1}, {"interventions", st->defaults[i]->items}});
  return {{"interventions_enabled", st->interventions_enabled},
          {"policy", glass_policy_json(st->policy)},
          {"vectors", vectors},
          {"sessions", sessions},
          {"default", {{"version", st->default_version}, {"history", versions}}},
          {"observation",
           {{"bytes_in_use", observation_in_use()},
            {"max_observation_bytes", max_observation_bytes_},
            {"max_request_observation_bytes", max_request_observation_bytes_}}}};
}

// ---- responses ----

json glass_choice_json(const GlassReport& r, const GlassRequest& g, const RepetitionTracker& repetition,
                       bool stopped_by_repetition) {
  json j = glass_report_json(r, g.stats);
  j["repetition_rate"] = repetition.rate();
  if (stopped_by_repetition && g.stop_on_repetition) {
    const RepetitionStop& s = *g.stop_on_repetition;
    j["stopped_by"] = "repetition";
    j["stopped"] = {{"by", "repetition"},
                    {"window_rate", repetition.window_rate()},
                    {"max_rate", s.max_rate},
                    {"ngram", s.ngram},
                    {"window", s.window}};
  }
  return j;
}

}  // namespace gb::server

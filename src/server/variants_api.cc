// The weight variants' admin API (issue 12.3, admin role): GET /admin/variants, PUT
// /admin/variants/NAME {path, sha256?, scale?} (load or replace while serving), DELETE
// /admin/variants/NAME, POST /admin/variants/NAME/rollback; and the roll-out's: GET
// /admin/routes, PUT / DELETE /admin/routes/ALIAS {arms: [{variant, weight}]} (canary weights),
// PUT / DELETE /admin/shadow/MODEL {variant, share}. Every change is an audit row, committed
// before the change takes effect, and a log line.
//
// A load is checked before it takes traffic: the patch's own hashes (load_patch), the sha256 the
// caller pinned (409 on a mismatch: the running version keeps serving), the fit to the model
// (engine load_variant) and a one-token self-test. A replaced version stays loaded beside the
// new one, not routed, so rollback is a routing switch back to the same deltas (its outputs are
// the old version's exactly); the version before that is unloaded.
#include <httplib.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "patch/patch.h"
#include "server/json_input.h"
#include "server/server.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

namespace {

// A message of ours that may carry a long path: at most 600 bytes.
std::string bounded(const std::string& s) { return s.size() <= 600 ? s : s.substr(0, 600) + "..."; }

std::string version_of(const VariantStatus& v) { return !v.version.empty() ? v.version : v.sha256.substr(0, 12); }

json variant_json(const VariantStatus& v, bool with_path) {
  json j = {{"version", version_of(v)},
            {"sha256", v.sha256},
            {"source", v.source},
            {"memory_bytes", v.bytes},
            {"edited_matrices", v.edits}};
  if (with_path) j["path"] = v.path;
  return j;
}

ApiError variant_error(int status, const char* code, const std::string& message) {
  const char* type = status == 404 ? "not_found_error" : status == 409 ? "conflict_error" : "invalid_request_error";
  if (status == 503) type = "service_unavailable";
  return make_error(status, type, code, message);
}

}  // namespace

void Server::set_variant_info(const VariantStatus& v, bool serving) {
  const Labels labels = {{"model", v.name}, {"version", version_of(v)}, {"sha256", v.sha256}, {"source", v.source}};
  if (!serving) {
    metrics_.remove("glassbox_variant_info", labels);
    return;
  }
  metrics_.gauge("glassbox_variant_info", "A weight variant served beside the base (value 1)", labels).set(1);
  metrics_
      .gauge("glassbox_variant_memory_bytes", "Memory a variant's deltas take beside the base weights",
             {{"model", v.name}})
      .set(static_cast<double>(v.bytes));
}

void Server::retire_variants(const std::vector<int32_t>& ids) {
  if (ids.empty()) return;
  // Requests that resolved a model name before the routing changed hold this shared until they
  // have reached the engine: once it is ours, none can still name a retired id.
  { std::unique_lock<std::shared_mutex> flush(routes_mutex_); }
  for (int32_t id : ids) {
    if (Status st = engine_->unload_variant(id); !st.is_ok()) spdlog::warn("variant {}: {}", id, st.message());
  }
}

Status Server::test_variant(const ServedModel& m, Clock::time_point deadline) {
  const std::string what = m.variant == 0 ? "self-test" : "self-test of variant '" + m.name + "'";
  auto channel = std::make_shared<RequestChannel>();
  GenerationRequest r;
  r.id = "self-test";
  r.prompt = codec_->encode("Hello", /*add_special=*/true);
  if (r.prompt.empty()) r.prompt = {0};
  r.max_tokens = 1;
  r.sampling.temperature = 0;
  r.variant = m.variant;
  r.deadline = deadline;
  GB_RETURN_IF_ERROR(engine_->submit(std::move(r), channel).with_context(what));
  GenerationEvent ev;
  bool done = false;
  while (!done && Clock::now() < deadline) {
    if (!channel->pop(&ev, std::chrono::milliseconds(50))) continue;
    if (ev.finish == FinishReason::kNone) continue;
    if (ev.finish != FinishReason::kStop && ev.finish != FinishReason::kLength)
      return Status::error(what + ": generation ended with " + finish_reason_name(ev.finish) +
                           (ev.error.empty() ? "" : ": " + ev.error));
    done = true;
  }
  if (!done) {
    channel->cancel();
    return Status::error(what + ": no token in time");
  }
  // The manifest's golden prompts, greedy, token for token.
  for (size_t i = 0; i < m.info.golden.size(); ++i) {
    GB_RETURN_IF_ERROR(check_golden(m, m.info.golden[i].first, m.info.golden[i].second, i).with_context(what));
  }
  return Status::ok();
}

Status Server::check_golden(const ServedModel& m, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& greedy, size_t index) {
  auto channel = std::make_shared<RequestChannel>();
  GenerationRequest r;
  r.id = "golden-";
  r.id += std::to_string(index);
  r.prompt = prompt;
  r.max_tokens = static_cast<int32_t>(greedy.size());
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.variant = m.variant;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(120);
  r.deadline = deadline;
  GB_RETURN_IF_ERROR(engine_->submit(std::move(r), channel));
  std::vector<int32_t> got;
  GenerationEvent ev;
  while (Clock::now() < deadline) {
    if (!channel->pop(&ev, std::chrono::milliseconds(50))) continue;
    for (const GeneratedToken& t : ev.tokens) got.push_back(t.token);
    if (ev.finish == FinishReason::kNone) continue;
    if (got == greedy) return Status::ok();
    auto list = [](const std::vector<int32_t>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 24; ++i) {
        if (i > 0) s += ',';
        s += std::to_string(v[i]);
      }
      return "[" + s + (v.size() > 24 ? ",...]" : "]");
    };
    return Status::error("golden prompt " + std::to_string(index) + " of the manifest: greedy tokens " + list(got) +
                         ", the manifest expects " + list(greedy));
  }
  channel->cancel();
  return Status::error("golden prompt " + std::to_string(index) + ": no answer in time");
}

void Server::handle_admin_variants(const httplib::Request& req, const std::string& body_text, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  if (req.method == "GET") {
    json data = json::array();
    std::lock_guard<std::mutex> lock(models_mutex_);
    for (const ServedModel& m : models_) {
      if (m.variant == 0) continue;
      json j = variant_json(m.info, true);
      j["name"] = m.name;
      auto prev = standby_.find(m.name);
      j["previous"] = prev == standby_.end() ? json(nullptr) : variant_json(prev->second.info, true);
      data.push_back(std::move(j));
    }
    return res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }
  const std::string name = req.matches[1].str();
  const std::string action = req.method == "PUT" ? "load" : req.method == "DELETE" ? "unload" : "rollback";
  json change = {{"name", name}};
  std::optional<ApiError> e;
  {
    std::lock_guard<std::mutex> lock(admin_mutex_);
    e = run_admin_change([&]() -> std::optional<ApiError> {
      if (action == "load") return load_variant(caller, name, body_text, &change);
      if (action == "unload") return unload_variant(caller, name, &change);
      return rollback_variant(caller, name, &change);
    });
  }
  if (e) return send_error(res, *e);
  spdlog::info("variant '{}': {} by key '{}': {}", name, action, caller.key_id, change.dump());
  write_log({{"event", "variant_change"}, {"action", action}, {"key_id", caller.key_id}, {"change", change}});
  res.set_content(json{{"ok", true}, {"action", action}, {"change", change}}.dump(), "application/json");
}

std::optional<ApiError> Server::load_variant(const Caller& caller, const std::string& name,
                                             const std::string& body_text, json* change) {
  if (!valid_model_name(name))
    return variant_error(400, "invalid_variant_name",
                         "a variant name is 1 to 64 letters, digits or the characters . _ - :");
  if (name == cfg_.served_model_name)
    return variant_error(400, "invalid_variant_name", "'" + name + "' is the base model's name");
  if (std::vector<RouteArm> arms; find_route(name, &arms))
    return variant_error(409, "name_in_use",
                         "'" + name + "' is a route alias; DELETE /admin/routes/" + name + " first");
  VariantLoadBody body;
  if (std::optional<ApiError> e = parse_variant_load_body(body_text, &body)) return e;
  const std::string& path = body.path;
  const std::string& sha = body.sha256;
  const double scale = body.scale;
  Result<patch::Patch> p = patch::load_patch(path, cfg_.model);
  if (!p.is_ok()) return variant_error(400, "invalid_variant", bounded(p.message()));
  const std::string have = patch::identity_sha256(*p);
  if (!sha.empty() && sha != have)
    return variant_error(409, "variant_hash_mismatch",
                         "'" + name + "' at " + bounded(path) + " has SHA-256 " + have + ", not the expected " +
                             bounded(sha) + "; nothing was changed, the running version keeps serving");
  Result<int32_t> id = engine_->load_variant(*p, name, scale);
  if (!id.is_ok()) return variant_error(400, "invalid_variant", bounded(id.message()));
  ServedModel loaded;
  for (const VariantStatus& v : engine_->variants()) {
    if (v.id == *id) loaded = ServedModel{name, *id, v, nullptr};
  }
  if (Status tested = test_variant(loaded, Clock::now() + std::chrono::seconds(60)); !tested.is_ok()) {
    retire_variants({*id});
    return variant_error(400, "variant_self_test_failed", bounded(tested.message()) + "; nothing was changed");
  }
  *change = {{"name", name}, {"loaded", variant_json(loaded.info, true)}, {"scale", scale}};
  ServedModel current;
  const bool replacing = find_model(name, &current);
  if (replacing) (*change)["replaced"] = variant_json(current.info, true);
  if (Status st = audit_change(caller, "variant", "load", *change); !st.is_ok()) {
    retire_variants({*id});
    return variant_error(503, "audit_unavailable",
                         "the variant was not loaded: the audit store cannot record it: " + st.message());
  }
  // Route: the new version serves; the one it replaces stands by for rollback; the one before that goes.
  std::vector<int32_t> retired;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    std::unique_ptr<ModelMetrics>& metrics = model_metrics_[name];
    if (metrics == nullptr) metrics = std::make_unique<ModelMetrics>(metrics_, name);
    loaded.metrics = metrics.get();
    auto it = std::find_if(models_.begin(), models_.end(), [&](const ServedModel& m) { return m.name == name; });
    if (it == models_.end()) {
      models_.push_back(loaded);
    } else {
      if (auto prev = standby_.find(name); prev != standby_.end()) retired.push_back(prev->second.variant);
      standby_[name] = *it;
      *it = loaded;
    }
  }
  if (replacing) set_variant_info(current.info, false);
  set_variant_info(loaded.info, true);
  retire_variants(retired);
  return std::nullopt;
}

std::optional<ApiError> Server::unload_variant(const Caller& caller, const std::string& name, json* change) {
  if (name == cfg_.served_model_name)
    return variant_error(400, "invalid_variant_name", "the base model cannot be unloaded");
  ServedModel current;
  if (!find_model(name, &current))
    return variant_error(404, "variant_not_found", "no variant " + quote_input(name) + " is served");
  if (const std::string users = route_users(name); !users.empty())
    return variant_error(409, "variant_in_use", "'" + name + "' is still " + users + "; change those first");
  *change = {{"name", name}, {"unloaded", variant_json(current.info, true)}};
  if (Status st = audit_change(caller, "variant", "unload", *change); !st.is_ok())
    return variant_error(503, "audit_unavailable",
                         "the variant was not unloaded: the audit store cannot record it: " + st.message());
  std::vector<int32_t> retired = {current.variant};
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    std::erase_if(models_, [&](const ServedModel& m) { return m.name == name; });
    if (auto prev = standby_.find(name); prev != standby_.end()) {
      retired.push_back(prev->second.variant);
      standby_.erase(prev);
    }
  }
  set_variant_info(current.info, false);
  metrics_.remove("glassbox_variant_memory_bytes", {{"model", name}});
  // Requests already running on it finish; the engine frees its deltas after them.
  retire_variants(retired);
  return std::nullopt;
}

std::optional<ApiError> Server::rollback_variant(const Caller& caller, const std::string& name, json* change) {
  ServedModel current;
  if (!find_model(name, &current) || current.variant == 0)
    return variant_error(404, "variant_not_found", "no variant " + quote_input(name) + " is served");
  ServedModel previous;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    auto prev = standby_.find(name);
    if (prev == standby_.end())
      return variant_error(409, "no_previous_version",
                           "'" + name + "' has no previous version to roll back to (one is kept per replace)");
    previous = prev->second;
  }
  *change = {
      {"name", name}, {"serving", variant_json(previous.info, true)}, {"replaced", variant_json(current.info, true)}};
  if (Status st = audit_change(caller, "variant", "rollback", *change); !st.is_ok())
    return variant_error(503, "audit_unavailable",
                         "the variant was not rolled back: the audit store cannot record it: " + st.message());
  {
    // Both stay loaded: a second rollback rolls forward again.
    std::lock_guard<std::mutex> lock(models_mutex_);
    for (ServedModel& m : models_) {
      if (m.name == name) std::swap(m, standby_[name]);
    }
  }
  set_variant_info(current.info, false);
  set_variant_info(previous.info, true);
  return std::nullopt;
}

std::string Server::route_users(const std::string& name) const {
  std::string users;
  auto add = [&](const std::string& what) {
    if (!users.empty()) users += ", ";
    users += what;
  };
  std::lock_guard<std::mutex> lock(models_mutex_);
  for (const auto& [alias, arms] : routes_) {
    for (const RouteArm& arm : arms) {
      if (arm.model == name) add("an arm of route '" + alias + "'");
    }
  }
  for (const auto& [from, sc] : shadow_) {
    if (from == name) add("copied onto '" + sc.model + "' (shadow '" + from + "')");
    else if (sc.model == name) add("the shadow of '" + from + "'");
  }
  return users;
}

namespace {

json routes_json(const std::map<std::string, std::vector<RouteArm>>& routes) {
  json j = json::object();
  for (const auto& [alias, arms] : routes) {
    json a = json::array();
    for (const RouteArm& arm : arms) a.push_back({{"variant", arm.model}, {"weight", arm.weight}});
    j[alias] = std::move(a);
  }
  return j;
}

json shadow_json(const ShadowConfig& sc) { return {{"variant", sc.model}, {"share", sc.share}}; }

}  // namespace

void Server::handle_admin_routes(const httplib::Request& req, const std::string& body_text, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  if (req.method == "GET") {
    json shadow = json::object();
    std::lock_guard<std::mutex> lock(models_mutex_);
    for (const auto& [from, sc] : shadow_) shadow[from] = shadow_json(sc);
    return res.set_content(json{{"routes", routes_json(routes_)}, {"shadow", shadow}}.dump(), "application/json");
  }
  const bool shadow = req.matches[1].str() == "shadow";
  const std::string name = req.matches[2].str();
  const std::string action = std::string(req.method == "PUT" ? "set" : "delete") + (shadow ? "_shadow" : "");
  json change = {{"name", name}};
  std::optional<ApiError> e;
  {
    std::lock_guard<std::mutex> lock(admin_mutex_);
    e = run_admin_change([&]() -> std::optional<ApiError> {
      if (req.method == "DELETE") return delete_route_or_shadow(caller, shadow, name, &change);
      if (shadow) return set_shadow(caller, name, body_text, &change);
      return set_route(caller, name, body_text, &change);
    });
  }
  if (e) return send_error(res, *e);
  spdlog::info("{} '{}': {} by key '{}': {}", shadow ? "shadow" : "route", name, action, caller.key_id, change.dump());
  write_log({{"event", "route_change"}, {"action", action}, {"key_id", caller.key_id}, {"change", change}});
  res.set_content(json{{"ok", true}, {"action", action}, {"change", change}}.dump(), "application/json");
}

std::optional<ApiError> Server::set_route(const Caller& caller, const std::string& alias, const std::string& body_text,
                                          json* change) {
  if (!valid_model_name(alias))
    return variant_error(400, "invalid_route_name",
                         "a route alias is 1 to 64 letters, digits or the characters . _ - :");
  if (ServedModel m; find_model(alias, &m))
    return variant_error(409, "name_in_use", "'" + alias + "' is a served model's name, not a route alias");
  std::vector<RouteArm> arms;
  if (std::optional<ApiError> e = parse_route_body(body_text, &arms)) return e;
  for (RouteArm& arm : arms) {
    if (arm.model == "base") arm.model = cfg_.served_model_name;
    if (ServedModel m; !find_model(arm.model, &m))
      return invalid_field("arms", "arm " + quote_input(arm.model) + " is neither the base ('base' or '" +
                                       cfg_.served_model_name + "') nor a served variant");
  }
  *change = {{"name", alias}, {"arms", routes_json({{alias, arms}})[alias]}};
  if (std::vector<RouteArm> before; find_route(alias, &before))
    (*change)["replaced"] = routes_json({{alias, before}})[alias];
  if (Status st = audit_change(caller, "route", "set", *change); !st.is_ok())
    return variant_error(503, "audit_unavailable",
                         "the route was not changed: the audit store cannot record it: " + st.message());
  std::lock_guard<std::mutex> lock(models_mutex_);
  routes_[alias] = std::move(arms);
  return std::nullopt;
}

std::optional<ApiError> Server::set_shadow(const Caller& caller, const std::string& model, const std::string& body_text,
                                           json* change) {
  std::vector<RouteArm> arms;
  if (ServedModel m; !find_model(model, &m) && !find_route(model, &arms))
    return variant_error(404, "model_not_found", "no model or route " + quote_input(model) + " is served");
  ShadowConfig sc;
  if (std::optional<ApiError> e = parse_shadow_body(body_text, &sc)) return e;
  if (sc.model == "base") sc.model = cfg_.served_model_name;
  if (ServedModel m; !find_model(sc.model, &m))
    return invalid_field("variant", "the shadow " + quote_input(sc.model) + " is neither the base ('base' or '" +
                                        cfg_.served_model_name + "') nor a served variant");
  *change = {{"name", model}, {"shadow", shadow_json(sc)}};
  if (ShadowConfig before; find_shadow(model, &before)) (*change)["replaced"] = shadow_json(before);
  if (Status st = audit_change(caller, "route", "set_shadow", *change); !st.is_ok())
    return variant_error(503, "audit_unavailable",
                         "the shadow was not changed: the audit store cannot record it: " + st.message());
  std::lock_guard<std::mutex> lock(models_mutex_);
  shadow_[model] = std::move(sc);
  return std::nullopt;
}

std::optional<ApiError> Server::delete_route_or_shadow(const Caller& caller, bool shadow, const std::string& name,
                                                       json* change) {
  if (shadow) {
    ShadowConfig sc;
    if (!find_shadow(name, &sc))
      return variant_error(404, "shadow_not_found", "no shadow copies requests of " + quote_input(name));
    *change = {{"name", name}, {"deleted", shadow_json(sc)}};
  } else {
    std::vector<RouteArm> arms;
    if (!find_route(name, &arms)) return variant_error(404, "route_not_found", "no route " + quote_input(name));
    if (ShadowConfig sc; find_shadow(name, &sc))
      return variant_error(
          409, "route_in_use",
          "route '" + name + "' is copied onto '" + sc.model + "'; DELETE /admin/shadow/" + name + " first");
    *change = {{"name", name}, {"deleted", routes_json({{name, arms}})[name]}};
  }
  const char* action = shadow ? "delete_shadow" : "delete";
  if (Status st = audit_change(caller, "route", action, *change); !st.is_ok())
    return variant_error(503, "audit_unavailable",
                         std::string("the ") + (shadow ? "shadow" : "route") +
                             " was not deleted: the audit store cannot record it: " + st.message());
  std::lock_guard<std::mutex> lock(models_mutex_);
  if (shadow) shadow_.erase(name);
  else routes_.erase(name);
  return std::nullopt;
}

}  // namespace gb::server

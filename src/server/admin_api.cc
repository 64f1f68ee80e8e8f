// The admin API: GET /admin/config, the glass box's policy / presets / vectors / sessions /
// default set under /admin/glassbox, and GET /admin/audit (admin role). Every glass-box change is
// logged and audited.
#include <httplib.h>

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/json_input.h"
#include "server/server.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

void Server::handle_admin_config(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  res.set_content(config_to_json(cfg_).dump(2), "application/json");
}

void Server::handle_admin_glass(const httplib::Request& req, const std::string& body_text, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  if (req.method == "GET") return res.set_content(glass_->describe().dump(2), "application/json");
  json body = json::object();
  if (!body_text.empty()) {
    if (std::optional<ApiError> e = parse_json_body(body_text, &body)) return send_error(res, *e);
  }
  const bool del = req.method == "DELETE";
  const std::string action = req.method == "POST"    ? "rollback"
                             : del                   ? "delete"
                             : req.method == "PATCH" ? "merge"
                                                     : "set";
  const std::string kind = req.path == "/admin/glassbox/policy"                          ? "policy"
                           : req.path.rfind("/admin/glassbox/default", 0) == 0           ? "default_set"
                           : req.matches.size() > 1 && req.matches[1].str() == "presets" ? "preset"
                           : req.matches.size() > 1 && req.matches[1].str() == "vectors" ? "vector"
                                                                                         : "session";
  json change;
  std::optional<ApiError> e;
  {
    // No change takes effect before its audit row is committed: GlassService runs the hook after
    // validating the change and before swapping it in; a failed append cancels it.
    std::lock_guard<std::mutex> lock(admin_mutex_);
    e = run_admin_change([&] {
      glass_->set_commit_hook([&]() -> std::optional<ApiError> {
        if (Status st = audit_change(caller, kind, action, change); !st.is_ok()) {
          if (!change_stale_) spdlog::error("audit: cannot record a {} change: {}", kind, st.message());
          return make_error(503, "service_unavailable", "audit_unavailable",
                            "the change was not made: the audit store cannot record it: " + st.message());
        }
        return std::nullopt;
      });
      std::optional<ApiError> r = apply_glass_change(req, body, &change);
      glass_->set_commit_hook(nullptr);
      return r;
    });
  }
  if (e) return send_error(res, *e);
  write_log({{"event", "glassbox_change"},
             {"kind", kind},
             {"action", action},
             {"key_id", caller.key_id},
             {"change", change}});
  res.set_content(json{{"ok", true}, {"kind", kind}, {"action", action}, {"change", change}}.dump(),
                  "application/json");
}

std::optional<ApiError> Server::apply_glass_change(const httplib::Request& req, const json& body, json* change) {
  const bool del = req.method == "DELETE";
  if (req.path == "/admin/glassbox/policy")
    return req.method == "PATCH" ? glass_->patch_policy(body, change) : glass_->set_policy(body, change);
  if (req.path == "/admin/glassbox/default") return glass_->put_default(body, change);
  if (req.path == "/admin/glassbox/default/rollback") return glass_->rollback_default(change);
  const std::string what = req.matches[1].str(), name = req.matches[2].str();
  if (what == "presets") return del ? glass_->delete_preset(name, change) : glass_->put_preset(name, body, change);
  if (what == "vectors") return del ? glass_->delete_vector(name, change) : glass_->put_vector(name, body, change);
  return del ? glass_->delete_session(name, change) : glass_->put_session(name, body, change);
}

Status Server::audit_change(const Caller& caller, const std::string& kind, const std::string& action,
                            const json& change) {
  if (audit_ == nullptr || replaying_) return Status::ok();
  AuditRecord r;
  r.kind = kind;
  r.key_id = caller.key_id;
  r.model = cfg_.served_model_name + "@" + cfg_.model;
  r.action = action;
  r.spec_json = change.dump();
  if (!sync_enabled_) return audit_->append(&r);
  Result<bool> appended = audit_->append_change(&r, last_change_id_);
  if (!appended.is_ok()) return appended.status();
  if (!*appended) {
    change_stale_ = true;
    return Status::error("another server changed the admin state at the same moment, again and again; retry");
  }
  last_change_id_ = r.id;
  return Status::ok();
}

std::optional<ApiError> Server::run_admin_change(const std::function<std::optional<ApiError>()>& fn) {
  constexpr int kAttempts = 5;
  std::optional<ApiError> e;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (sync_enabled_) {
      // Validate against the newest shared state; a failed read is no risk (append_change checks).
      if (Status st = catch_up_locked(); !st.is_ok()) spdlog::warn("admin sync: {}", st.message());
    }
    change_stale_ = false;
    e = fn();
    if (!change_stale_) return e;
  }
  return e;
}

void Server::handle_admin_audit(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  if (audit_ == nullptr)
    return send_error(res, make_error(404, "not_found_error", "no_audit_store", "this server has no audit_db"));
  AuditQuery q;
  q.kind = req.get_param_value("kind");
  q.key_id = req.get_param_value("key_id");
  q.request_id = req.get_param_value("request_id");
  for (const char* name : {"since", "until"}) {
    if (!req.has_param(name)) continue;
    Result<int64_t> t = parse_time_ms(req.get_param_value(name));
    if (!t.is_ok()) return send_error(res, invalid_field(name, std::string(name) + ": " + t.message()));
    (std::string(name) == "since" ? q.since_ms : q.until_ms) = *t;
  }
  for (const char* name : {"after_id", "limit"}) {
    if (!req.has_param(name)) continue;
    const std::string v = req.get_param_value(name);
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0')
      return send_error(res, invalid_field(name, std::string(name) + ": expected an integer"));
    if (std::string(name) == "after_id") q.after_id = x;
    else q.limit = static_cast<int32_t>(std::clamp<long long>(x, -1, kMaxAuditLimit + 1));
  }
  Result<std::vector<AuditRecord>> rows = audit_->query(q);
  if (!rows.is_ok()) return send_error(res, invalid_field("", rows.message()));
  json data = json::array();
  for (const AuditRecord& r : *rows) data.push_back(audit_record_json(r));
  json out = {{"object", "list"}, {"data", data}};
  if (!rows->empty()) out["last_id"] = rows->back().id;
  res.set_content(out.dump(), "application/json");
}

}  // namespace gb::server

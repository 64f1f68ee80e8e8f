// The admin API: GET /admin/config, the glass box's policy / presets / vectors / sessions /
// default set under /admin/glassbox, and GET /admin/audit (admin role). Every glass-box change is
// logged and audited.
#include <httplib.h>

#include <algorithm>

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

void Server::handle_admin_glass(const httplib::Request& req, httplib::Response& res) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kAdmin, &caller, &err)) return send_error(res, err);
  if (req.method == "GET") return res.set_content(glass_->describe().dump(2), "application/json");
  json body = json::object();
  if (!req.body.empty()) {
    try {
      body = json::parse(req.body);
    } catch (const json::parse_error& e) {
      return send_error(res, invalid_field("", std::string("the request body is not valid JSON: ") + e.what()));
    }
  }
  json change;
  std::string kind;
  std::optional<ApiError> e;
  const bool del = req.method == "DELETE";
  if (req.path == "/admin/glassbox/policy") {
    kind = "policy";
    e = glass_->set_policy(body, &change);
  } else if (req.path == "/admin/glassbox/default") {
    kind = "default_set";
    e = glass_->put_default(body, &change);
  } else if (req.path == "/admin/glassbox/default/rollback") {
    kind = "default_set";
    e = glass_->rollback_default(&change);
  } else {
    const std::string what = req.matches[1].str(), name = req.matches[2].str();
    if (what == "presets") {
      kind = "preset";
      e = del ? glass_->delete_preset(name, &change) : glass_->put_preset(name, body, &change);
    } else if (what == "vectors") {
      kind = "vector";
      e = del ? glass_->delete_vector(name, &change) : glass_->put_vector(name, body, &change);
    } else {
      kind = "session";
      e = del ? glass_->delete_session(name, &change) : glass_->put_session(name, body, &change);
    }
  }
  if (e) return send_error(res, *e);
  const std::string action = req.method == "POST" ? "rollback" : del ? "delete" : "set";
  write_log({{"event", "glassbox_change"}, {"kind", kind}, {"action", action}, {"key_id", caller.key_id}, {"change", change}});
  if (Status st = audit_change(caller, kind, action, change); !st.is_ok()) {
    return send_error(res, make_error(500, "server_error", "audit_failed",
                                      "the change is in effect but the audit store failed: " + st.message()));
  }
  res.set_content(json{{"ok", true}, {"kind", kind}, {"action", action}, {"change", change}}.dump(), "application/json");
}

Status Server::audit_change(const Caller& caller, const std::string& kind, const std::string& action, const json& change) {
  if (audit_ == nullptr) return Status::ok();
  AuditRecord r;
  r.kind = kind;
  r.key_id = caller.key_id;
  r.model = cfg_.served_model_name + "@" + cfg_.model;
  r.action = action;
  r.spec_json = change.dump();
  return audit_->append(&r);
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
    if (end == v.c_str() || *end != '\0') return send_error(res, invalid_field(name, std::string(name) + ": expected an integer"));
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

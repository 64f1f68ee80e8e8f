// Admin sync: replicas on one audit store share the admin state (policy, presets, vectors,
// sessions, the default set, variants, routes and shadows) through its change rows. Each change
// row already holds the whole change (what the admin API returned as "change"), so a replica
// replays the rows with an id above the last one it applied, in id order, through the same code
// paths as the admin API — validated the same way, but not audited again (the row is there).
//
// Ordering: a server appends its own change with AuditStore::append_change(row, last applied id),
// which writes only when no other change row came after the last one this server applied (under
// the store's write lock: an advisory lock in PostgreSQL, BEGIN IMMEDIATE in SQLite). When one
// did, the server replays it and validates the change again, so every replica applies the same
// changes in the same order (ids), and the state each change was validated against is the state
// every replica has when it applies it.
//
// Delay: a thread waits for a NOTIFY on the change channel (PostgreSQL sends it when a change row
// commits) or admin_sync_interval_ms, whichever comes first, then replays; so a change reaches the
// other replicas within milliseconds normally, and within the interval when a notification was
// lost (a reconnect). The same thread pings the store so /ready and glassbox_audit_store_ok see
// an outage within one interval even when nothing is written.
#include <spdlog/spdlog.h>

#include "server/server.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

namespace {

constexpr int32_t kReplayBatch = 200;

std::string brief(const std::string& s) { return s.size() <= 300 ? s : s.substr(0, 300) + "..."; }

}  // namespace

bool Server::admin_sync_on() const {
  if (audit_ == nullptr || cfg_.admin_sync == "off") return false;
  return cfg_.admin_sync == "on" || audit_->backend() == "postgresql";
}

Status Server::start_admin_sync() {
  if (audit_ == nullptr) return Status::ok();
  sync_enabled_ = admin_sync_on();
  if (sync_enabled_) {
    std::lock_guard<std::mutex> lock(admin_mutex_);
    GB_RETURN_IF_ERROR(catch_up_locked().with_context("admin sync: reading the change rows of " + audit_->path()));
    spdlog::info("admin sync: on ({}), {} change row(s) applied at start, last id {}", audit_->backend(),
                 sync_applied_at_start_, last_change_id_);
  }
  // A PostgreSQL store is pinged even without sync: a lost server shows in /ready at once.
  if (sync_enabled_ || audit_->backend() == "postgresql") sync_thread_ = std::thread([this] { admin_sync_loop(); });
  return Status::ok();
}

void Server::stop_admin_sync() {
  if (!sync_thread_.joinable()) return;
  sync_stop_.store(true);
  audit_->interrupt_wait();
  sync_thread_.join();
}

void Server::admin_sync_loop() {
  const auto interval = std::chrono::milliseconds(cfg_.admin_sync_interval_ms);
  while (!sync_stop_.load()) {
    audit_->wait_for_change(interval);
    if (sync_stop_.load()) break;
    (void)audit_->ping();
    if (!sync_enabled_) continue;
    std::lock_guard<std::mutex> lock(admin_mutex_);
    if (Status st = catch_up_locked(); !st.is_ok()) spdlog::warn("admin sync: {}", st.message());
  }
}

Status Server::catch_up_locked() {
  for (;;) {
    Result<std::vector<AuditRecord>> rows = audit_->changes_after(last_change_id_, kReplayBatch);
    {
      std::lock_guard<std::mutex> lock(sync_status_mutex_);
      sync_read_error_ = rows.is_ok() ? std::string() : rows.message();
    }
    if (!rows.is_ok()) return rows.status();
    for (const AuditRecord& r : *rows) {
      apply_change_row(r);
      last_change_id_ = r.id;
      if (state() == State::kStarting) ++sync_applied_at_start_;
    }
    metrics_.gauge("glassbox_admin_sync_last_id", "The last audit change row this server applied (admin sync)")
        .set(static_cast<double>(last_change_id_));
    if (static_cast<int32_t>(rows->size()) < kReplayBatch) return Status::ok();
  }
}

void Server::apply_change_row(const AuditRecord& r) {
  const json spec = json::parse(r.spec_json, nullptr, /*allow_exceptions=*/false);
  Caller caller;
  caller.key_id = r.key_id;
  caller.role = Role::kAdmin;
  std::optional<ApiError> e;
  json change;
  const std::string name = spec.is_object() && spec.contains("name") && spec["name"].is_string()
                               ? spec["name"].get<std::string>()
                               : std::string();
  auto str = [&](const char* key) {
    return spec.is_object() && spec.contains(key) && spec[key].is_string() ? spec[key].get<std::string>()
                                                                           : std::string();
  };
  auto field = [&](const char* key) { return spec.is_object() && spec.contains(key) ? spec[key] : json(nullptr); };
  replaying_ = true;
  if (!spec.is_object()) {
    e = invalid_field("spec", "the row's spec is not a change object");
  } else if (glass_ == nullptr) {
    e = invalid_field("", "no engine attached");
  } else if (r.kind == "policy") {
    // The row holds the whole policy in force after the change (presets included), PUT or PATCH.
    e = glass_->set_policy(field("policy"), &change);
  } else if (r.kind == "preset") {
    e = r.action == "delete" ? glass_->delete_preset(str("preset"), &change)
                             : glass_->put_preset(str("preset"), {{"interventions", field("interventions")}}, &change);
  } else if (r.kind == "vector") {
    if (r.action == "delete") {
      e = glass_->delete_vector(str("vector"), &change);
    } else {
      // A GGUF file must exist at the same path here (a shared volume); directions are inline.
      const json body =
          spec.contains("path") ? json{{"path", field("path")}} : json{{"directions", field("directions")}};
      e = glass_->put_vector(str("vector"), body, &change);
    }
  } else if (r.kind == "session") {
    if (r.action == "delete") {
      e = glass_->delete_session(str("session"), &change);
    } else {
      json body = {{"interventions", field("interventions")}};
      if (spec.contains("roles")) body["roles"] = spec["roles"];
      if (spec.contains("keys")) body["keys"] = spec["keys"];
      e = glass_->put_session(str("session"), body, &change);
    }
  } else if (r.kind == "default_set") {
    e = r.action == "rollback" ? glass_->rollback_default(&change)
                               : glass_->put_default({{"interventions", field("interventions")}}, &change);
    // The versions are the origin's when both sides applied the same history.
    if (!e && change.value("version", int64_t{-1}) != spec.value("version", int64_t{-2}))
      spdlog::warn(
          "admin sync: row {}: the default set here is v{}, the row made v{} (this server's history "
          "differs: its config or an earlier row)",
          r.id, change.value("version", int64_t{-1}), spec.value("version", int64_t{-2}));
  } else if (r.kind == "variant") {
    if (r.action == "load") {
      const json loaded = field("loaded");
      json body = {{"path", loaded.is_object() ? loaded.value("path", "") : ""}};
      if (loaded.is_object() && loaded.contains("sha256")) body["sha256"] = loaded["sha256"];
      if (spec.contains("scale")) body["scale"] = spec["scale"];
      e = load_variant(caller, name, body.dump(), &change);
    } else if (r.action == "unload") {
      e = unload_variant(caller, name, &change);
    } else {
      e = rollback_variant(caller, name, &change);
    }
  } else if (r.kind == "route") {
    if (r.action == "set") e = set_route(caller, name, json{{"arms", field("arms")}}.dump(), &change);
    else if (r.action == "set_shadow") e = set_shadow(caller, name, field("shadow").dump(), &change);
    else e = delete_route_or_shadow(caller, r.action == "delete_shadow", name, &change);
  } else {
    e = invalid_field("kind", "unknown change kind");
  }
  replaying_ = false;
  if (!e) {
    spdlog::info("admin sync: applied row {} ({} {}) by key '{}'", r.id, r.kind, r.action, r.key_id);
    metrics_.counter("glassbox_admin_sync_applied_total", "Audit change rows of other servers applied here").inc();
    return;
  }
  const std::string why = "row " + std::to_string(r.id) + " (" + r.kind + " " + r.action + " by key '" + r.key_id +
                          "'): " + brief(e->message);
  spdlog::error("admin sync: cannot apply {}; this server's admin state now differs from the store's", why);
  metrics_
      .counter("glassbox_admin_sync_failures_total",
               "Audit change rows this server could not apply (its admin state differs from the other servers')")
      .inc();
  std::lock_guard<std::mutex> lock(sync_status_mutex_);
  ++sync_failures_;
  sync_last_failure_ = why;
}

json Server::admin_sync_json() const {
  std::lock_guard<std::mutex> lock(sync_status_mutex_);
  json j = {{"enabled", sync_enabled_}, {"failed_rows", sync_failures_}};
  if (!sync_last_failure_.empty()) j["last_failure"] = sync_last_failure_;
  if (!sync_read_error_.empty()) j["read_error"] = sync_read_error_;
  return j;
}

}  // namespace gb::server

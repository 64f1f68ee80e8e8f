// The HTTP front-end: OpenAI endpoints, probes and /metrics over cpp-httplib's worker pool,
// feeding an EngineApi. HTTP threads validate, tokenize, submit and then stream text out of
// per-request channels; the engine thread never waits on a socket.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>

#include "engine/request.h"
#include "server/audit.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/glass_api.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/text_codec.h"

namespace httplib {
class ContentReader;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace gb::server {

using json = nlohmann::json;
struct Generation;
class HttpTransport;

// The request metrics of one served model (the base or a variant: label model="NAME"), looked up
// once so the hot path is only atomics.
struct ModelMetrics {
  ModelMetrics(MetricsRegistry& r, const std::string& model);
  Histogram& ttft;
  Histogram& inter_token;
  Histogram& e2e;
  Histogram& queue_time;
  Histogram& generation_tokens;
  Histogram& prompt_tokens;
  Histogram& repetition_rate;
  Counter& prompt_tokens_total;
  Counter& generation_tokens_total;
  // glassbox_request_finished_total{finish_reason, model}: the truncation rate is length / all.
  Counter& finished(const char* reason);

 private:
  MetricsRegistry& registry_;
  std::string model_;
};

// The server-wide gauges every request touches.
struct HotMetrics {
  explicit HotMetrics(MetricsRegistry& r);
  Gauge& in_flight;
  Gauge& ready;
};

// What a request's `model` names: the base or a weight variant served beside it.
struct ServedModel {
  std::string name;
  int32_t variant = 0;  // GenerationRequest::variant; 0: the base
  VariantStatus info;   // variants only
  ModelMetrics* metrics = nullptr;
};

class Server {
 public:
  // Lifecycle, in this order: start() (probes answer; inference is 503) -> attach() ->
  // self_test() -> set_ready() -> ... -> drain() -> stop().
  enum class State { kStarting, kReady, kDraining, kStopped };

  // request_log receives one JSON line per generation request; by default they go to stdout.
  explicit Server(ServerConfig cfg, std::function<void(const std::string&)> request_log = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (port 0: any free port) and starts serving on a background thread.
  Status start();
  int port() const { return port_; }

  // The engine and codec must outlive the server (until stop() returns).
  void attach(EngineApi* engine, const TextCodec* codec, int32_t max_model_len);
  // After attach: loads the configured control vectors and checks the presets against the model.
  Status init_glass();
  // Generates one token from a short prompt; ready only if that finishes cleanly.
  Status self_test(std::chrono::milliseconds timeout);
  // After self_test, before set_ready: with admin sync on (admin_sync; auto: a PostgreSQL
  // audit_db), replays every change row of the audit store (the admin state the other servers
  // share) and starts the thread that follows new ones; with a PostgreSQL store, that thread also
  // pings it. An error: the change rows cannot be read.
  Status start_admin_sync();
  void set_ready();

  // Stops accepting generation requests (503), lets running ones finish until `deadline`,
  // cancels the rest and waits for their handlers to answer.
  void drain(std::chrono::milliseconds deadline);
  // Stops listening and joins the HTTP threads. Idempotent.
  void stop();

  State state() const { return state_.load(std::memory_order_acquire); }
  int64_t in_flight() const { return in_flight_.load(); }
  MetricsRegistry& metrics() { return metrics_; }
  GlassService& glass() { return *glass_; }
  // What `model` may name: [0] the base, then its weight variants.
  std::vector<ServedModel> models() const;
  AuditStore* audit_store() { return audit_.get(); }  // null without audit_db
  const ServerConfig& config() const { return cfg_; }

 private:
  friend struct Generation;
  void install_routes();
  // The dashboard (dashboard_api.cc): /ui/ static files, GET /v1/glassbox/whoami and /monitor.
  void install_dashboard_routes();
  void handle_ui(const httplib::Request& req, httplib::Response& res);
  void handle_whoami(const httplib::Request& req, httplib::Response& res);
  void handle_monitor(const httplib::Request& req, httplib::Response& res);
  // httplib's own errors, exceptions and the per-route request counter.
  void install_error_handlers();
  using BodyHandler = std::function<void(const httplib::Request&, const std::string& body, httplib::Response&)>;
  // Reads a request body, at most max_body_bytes (413 beyond, 408 when it does not arrive in
  // body_timeout_s; both close the connection). false: refused, the answer is in res.
  bool read_body(const httplib::ContentReader& reader, httplib::Response& res, std::string* body);
  // Authentication, the role for /admin and the declared body size, before any body is read;
  // false: refused (the answer is in res).
  bool admit_before_body(const httplib::Request& req, httplib::Response& res);
  ApiError body_too_large() const;
  // The log line and the rejected-requests counter of a generation request refused before the engine.
  void log_rejected(Endpoint endpoint, const std::string& request_id, const std::string& key_id,
                    Clock::time_point arrival, const ApiError& e, const char* reason);
  void handle_ready(httplib::Response& res);
  void handle_generate(Endpoint endpoint, const httplib::Request& req, const std::string& body, httplib::Response& res);
  // A generation request refused before (or by) the engine: the answer and the metric's reason.
  struct Refusal {
    ApiError error;
    const char* reason;
  };
  // State, auth, rate limit, the body, the glass-box extension, queue and concurrency; fills
  // g->caller, g->req and g->glass. nullopt: admitted, holding one in_flight_ slot.
  std::optional<Refusal> admit(Endpoint endpoint, const httplib::Request& req, const std::string& body,
                               Clock::time_point arrival, Generation* g);
  // The caller's rate limit (429 with Retry-After when it is spent).
  std::optional<ApiError> take_rate(const Caller& caller, Clock::time_point arrival);
  // One slot of max_concurrent_requests (429 when every slot is held); given back with
  // in_flight_.fetch_sub(1).
  std::optional<ApiError> take_slot();
  // One engine request per choice; on a refusal the others are cancelled and the slot released.
  std::optional<Refusal> submit_choices(Generation* g);
  void handle_models(const httplib::Request& req, httplib::Response& res, const std::string& id);
  // POST /v1/glassbox/analyze: scan, depth or lens (src/analysis) on the serving engine.
  void handle_analyze(const httplib::Request& req, const std::string& body, httplib::Response& res);
  // The served model called `name` (empty: the base); false if none.
  bool find_model(const std::string& name, ServedModel* out) const;
  // The canary routes and shadow copies now in force (the config's, then /admin/routes changes).
  std::map<std::string, std::vector<RouteArm>> routes() const;
  bool find_route(const std::string& alias, std::vector<RouteArm>* arms) const;
  bool find_shadow(const std::string& model, ShadowConfig* out) const;
  void handle_metrics(httplib::Response& res);
  void handle_admin_config(const httplib::Request& req, httplib::Response& res);
  // /admin/variants: list, load or replace (PUT), unload (DELETE), rollback (POST); admin role.
  void handle_admin_variants(const httplib::Request& req, const std::string& body, httplib::Response& res);
  // Under admin_mutex_; each audits before its change takes effect and fills *change for the log.
  std::optional<ApiError> load_variant(const Caller& caller, const std::string& name, const std::string& body,
                                       nlohmann::json* change);
  std::optional<ApiError> unload_variant(const Caller& caller, const std::string& name, nlohmann::json* change);
  std::optional<ApiError> rollback_variant(const Caller& caller, const std::string& name, nlohmann::json* change);
  // /admin/routes (GET: routes and shadows; PUT / DELETE /admin/routes/ALIAS) and PUT / DELETE
  // /admin/shadow/MODEL; admin role, audited before the change takes effect.
  void handle_admin_routes(const httplib::Request& req, const std::string& body, httplib::Response& res);
  std::optional<ApiError> set_route(const Caller& caller, const std::string& alias, const std::string& body,
                                    nlohmann::json* change);
  std::optional<ApiError> set_shadow(const Caller& caller, const std::string& model, const std::string& body,
                                     nlohmann::json* change);
  std::optional<ApiError> delete_route_or_shadow(const Caller& caller, bool shadow, const std::string& name,
                                                 nlohmann::json* change);
  // Why `name` may not be unloaded or renamed: the routes and shadows that name it ("" if none).
  std::string route_users(const std::string& name) const;
  // glassbox_variant_info for a version that now serves (or no longer does).
  void set_variant_info(const VariantStatus& v, bool serving);
  // Unloads variants no longer routed, once every request that resolved them has been submitted.
  void retire_variants(const std::vector<int32_t>& ids);
  // Shadow mode: maybe copies the admitted request (its first choice) onto the configured shadow
  // model; the monitor thread drains the copies and logs what they produced.
  void maybe_shadow(const Generation& g);
  void drain_shadows(bool cancel);
  // A manifest's golden prompt, run greedily on a variant: its tokens must be the expected ones.
  Status check_golden(const ServedModel& m, const std::vector<int32_t>& prompt, const std::vector<int32_t>& greedy,
                      size_t index);
  // One greedy token on the model (base or variant): it must finish cleanly (finite logits); then
  // a variant's golden prompts (check_golden). At start (self_test) and for each load.
  Status test_variant(const ServedModel& m, Clock::time_point deadline);
  // /admin/glassbox/...: policy, presets, vectors, sessions, the default set (admin role).
  void handle_admin_glass(const httplib::Request& req, const std::string& body, httplib::Response& res);
  // GET /admin/audit: the audit store's rows (admin role); query: kind, key_id, request_id, since,
  // until (ISO-8601 or unix ms), after_id, limit.
  void handle_admin_audit(const httplib::Request& req, httplib::Response& res);
  // Runs the admin change the request names on the glass service.
  std::optional<ApiError> apply_glass_change(const httplib::Request& req, const json& body, json* change);
  // Appends a change (policy, preset, vector, session, default set) to the audit store, if any.
  // With admin sync on, only when no other server's change came after the last one applied here
  // (else an error, and change_stale_ is set). Not while replaying (the row exists). admin_mutex_ held.
  Status audit_change(const Caller& caller, const std::string& kind, const std::string& action, const json& change);
  // Runs one admin change (fn: validate, audit_change, apply) under admin_mutex_: first applies the
  // change rows other servers appended; when one came first again, applies it and runs fn again.
  std::optional<ApiError> run_admin_change(const std::function<std::optional<ApiError>()>& fn);
  // Admin sync (admin_sync.cc).
  bool admin_sync_on() const;
  void admin_sync_loop();
  void stop_admin_sync();
  // Applies the change rows after last_change_id_ (admin_mutex_ held).
  Status catch_up_locked();
  // Replays one change row through the admin code paths, unaudited; a failure is logged and counted.
  void apply_change_row(const AuditRecord& r);
  // For /ready: enabled, failed rows, the last failure.
  json admin_sync_json() const;
  // Logs the monitor's new massive-activation events (one JSON line each) every 500 ms.
  void monitor_loop();
  // Authenticates and checks the role; on failure fills *err.
  bool authorize(const httplib::Request& req, Role min_role, Caller* caller, ApiError* err);
  void send_error(httplib::Response& res, const ApiError& e);
  void write_log(const nlohmann::json& line);
  void refresh_engine_gauges();
  std::string new_request_id(const char* prefix);
  void register_generation(Generation* g);
  void unregister_generation(Generation* g);

  ServerConfig cfg_;
  std::function<void(const std::string&)> request_log_;
  std::unique_ptr<HttpTransport> http_;
  std::thread listen_thread_;
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
  std::atomic<State> state_{State::kStarting};

  EngineApi* engine_ = nullptr;  // set once by attach(), before state_ leaves kStarting
  const TextCodec* codec_ = nullptr;
  int32_t max_model_len_ = 0;
  std::unique_ptr<GlassService> glass_;  // made by attach()
  mutable std::mutex models_mutex_;
  std::vector<ServedModel> models_;                      // [0] the base, then the variants (attach())
  std::map<std::string, ServedModel> standby_;           // by name: the version a replace displaced, for rollback
  std::map<std::string, std::vector<RouteArm>> routes_;  // canary routes by alias (arms name served models)
  std::map<std::string, ShadowConfig> shadow_;           // shadow copies by the model or route copied from
  // Held shared from resolving a request's model to submitting it; a variant is unloaded only
  // after taking it exclusively (retire_variants), so no request can name a freed id.
  std::shared_mutex routes_mutex_;
  struct ShadowRun {
    std::string request_id, model, shadow_model;
    std::shared_ptr<RequestChannel> channel;
    std::vector<int32_t> tokens;
    Clock::time_point start;
  };
  std::mutex shadow_mutex_;
  std::vector<ShadowRun> shadows_;                                      // in flight
  std::map<std::string, std::unique_ptr<ModelMetrics>> model_metrics_;  // by name; never removed
  std::unique_ptr<AuditStore> audit_;                                   // opened by start() when audit_db is set
  std::thread monitor_thread_;
  std::mutex monitor_mutex_;
  std::condition_variable monitor_wake_;
  bool monitor_stop_ = false;
  uint64_t monitor_logged_ = 0;  // index of the last massive-activation event logged

  std::string ui_dir_;                 // the dashboard's files; empty: not found (ui_tried_ says where it looked)
  std::vector<std::string> ui_tried_;  // set by install_dashboard_routes() before the listener starts
  KeyStore keys_;
  RateLimiter rate_limiter_;
  MetricsRegistry metrics_;
  HotMetrics hot_{metrics_};

  std::atomic<int64_t> in_flight_{0};  // generation requests between admission and answer
  std::mutex generations_mutex_;
  std::set<Generation*> generations_;  // in flight, for drain to cancel
  std::atomic<uint64_t> request_counter_{0};
  uint64_t id_salt_ = 0;
  std::mutex log_mutex_;
  std::mutex admin_mutex_;  // admin changes one at a time (each with its audit row first)
  // Admin sync (admin_sync.cc). Under admin_mutex_: the last change row applied (or written) here,
  // whether a replay is running (audit_change then writes nothing), whether the last audit_change
  // lost to another server's change.
  int64_t last_change_id_ = 0;
  bool replaying_ = false;
  bool change_stale_ = false;
  bool sync_enabled_ = false;  // set by start_admin_sync()
  int64_t sync_applied_at_start_ = 0;
  std::thread sync_thread_;
  std::atomic<bool> sync_stop_{false};
  mutable std::mutex sync_status_mutex_;
  int64_t sync_failures_ = 0;      // rows that could not be applied here
  std::string sync_last_failure_;  // the last of them, and why
  std::string sync_read_error_;    // the last read of the change rows failed: why
};

}  // namespace gb::server

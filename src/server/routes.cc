// Routes: which handler answers which path, the probes, /v1/models, /metrics, and the answers to
// httplib's own errors (unknown route, body too large, malformed HTTP).
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>

#include "server/http_transport.h"
#include "server/json_input.h"
#include "server/server.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

namespace {

// Bounded label values for the per-endpoint HTTP counter.
std::string route_label(const std::string& path) {
  static const char* kKnown[] = {
      "/v1/completions", "/v1/chat/completions", "/v1/glassbox/analyze", "/v1/models",          "/health", "/ready",
      "/metrics",        "/admin/config",        "/v1/glassbox/whoami",  "/v1/glassbox/monitor"};
  for (const char* k : kKnown) {
    if (path == k) return k;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.rfind("/admin/glassbox", 0) == 0) return "/admin/glassbox";
  if (path == "/admin/audit") return path;
  if (path == "/ui" || path.rfind("/ui/", 0) == 0) return "/ui";
  return "other";
}

}  // namespace

void Server::install_routes() {
  // No exception may cross a handler: each is wrapped, and the answer is a 500 error JSON.
  auto guard = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
      } catch (...) {
        send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
      }
    };
  };
  // Handlers with a body get it read whole and bounded (read_body), after admit_before_body().
  auto with_body = [this](BodyHandler fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      try {
        std::string body;
        if (read_body(reader, res, &body)) fn(req, body, res);
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
      } catch (...) {
        send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
      }
    };
  };
  http_->Post("/v1/completions",
              with_body([this](const httplib::Request& q, const std::string& b, httplib::Response& r) {
                handle_generate(Endpoint::kCompletions, q, b, r);
              }));
  http_->Post("/v1/chat/completions",
              with_body([this](const httplib::Request& q, const std::string& b, httplib::Response& r) {
                handle_generate(Endpoint::kChat, q, b, r);
              }));
  http_->Post("/v1/glassbox/analyze", with_body([this](const httplib::Request& q, const std::string& b,
                                                       httplib::Response& r) { handle_analyze(q, b, r); }));
  http_->Get("/v1/models", guard([this](const httplib::Request& q, httplib::Response& r) { handle_models(q, r, ""); }));
  http_->Get(R"(/v1/models/(.+))", guard([this](const httplib::Request& q, httplib::Response& r) {
               handle_models(q, r, q.matches[1].str());
             }));
  http_->Get("/health", guard([](const httplib::Request&, httplib::Response& r) {
               r.set_content(R"({"status":"ok"})", "application/json");
             }));
  http_->Get("/ready", guard([this](const httplib::Request&, httplib::Response& r) { handle_ready(r); }));
  http_->Get("/metrics", guard([this](const httplib::Request&, httplib::Response& r) { handle_metrics(r); }));
  http_->Get("/admin/config",
             guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_config(q, r); }));
  auto admin_glass = with_body(
      [this](const httplib::Request& q, const std::string& b, httplib::Response& r) { handle_admin_glass(q, b, r); });
  http_->Get("/admin/glassbox",
             guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_glass(q, "", r); }));
  http_->Put("/admin/glassbox/policy", admin_glass);
  http_->Patch("/admin/glassbox/policy", admin_glass);
  http_->Put("/admin/glassbox/default", admin_glass);
  http_->Post("/admin/glassbox/default/rollback", admin_glass);
  http_->Put(R"(/admin/glassbox/(presets|vectors|sessions)/([^/]+))", admin_glass);
  http_->Delete(R"(/admin/glassbox/(presets|vectors|sessions)/([^/]+))", admin_glass);
  auto admin_variants = with_body([this](const httplib::Request& q, const std::string& b, httplib::Response& r) {
    handle_admin_variants(q, b, r);
  });
  http_->Get("/admin/variants",
             guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_variants(q, "", r); }));
  http_->Put(R"(/admin/variants/([^/]+))", admin_variants);
  http_->Delete(R"(/admin/variants/([^/]+))", admin_variants);
  http_->Post(R"(/admin/variants/([^/]+)/rollback)", admin_variants);
  auto admin_routes = with_body(
      [this](const httplib::Request& q, const std::string& b, httplib::Response& r) { handle_admin_routes(q, b, r); });
  http_->Get("/admin/routes",
             guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_routes(q, "", r); }));
  http_->Put(R"(/admin/(routes|shadow)/([^/]+))", admin_routes);
  http_->Delete(R"(/admin/(routes|shadow)/([^/]+))", admin_routes);
  http_->Get("/admin/audit",
             guard([this](const httplib::Request& q, httplib::Response& r) { handle_admin_audit(q, r); }));
  install_dashboard_routes();

  // Before any body is read: authentication (and the role for /admin), the declared body size,
  // and an empty body for a request that declares none (else httplib reads until the client
  // closes). What is refused here is answered with its body unread, and the connection closes.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return admit_before_body(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                       : httplib::Server::HandlerResponse::Handled;
  });
  http_->set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    return admit_before_body(req, res) ? 100 : res.status;
  });

  install_error_handlers();
}

void Server::install_error_handlers() {
  // httplib's own errors (unknown route, body over max_body_bytes, malformed HTTP) get an
  // OpenAI error body; our handlers' errors already have one.
  http_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e = make_error(404, "not_found_error", "not_found", "no route for " + req.method + " " + quote_input(req.path));
    } else if (res.status == 413) {
      e = body_too_large();
    } else if (res.status >= 500) {
      e = make_error(res.status, "server_error", "internal_error", "internal error");
    } else {
      e = make_error(res.status, "invalid_request_error", "", "malformed HTTP request");
    }
    send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, make_error(500, "server_error", "internal_error", "internal error"));
  });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_
        .counter("glassbox_http_requests_total", "HTTP requests by route and status code",
                 {{"endpoint", route_label(req.path)}, {"status", std::to_string(res.status)}})
        .inc();
  });
}

bool Server::read_body(const httplib::ContentReader& reader, httplib::Response& res, std::string* body) {
  bool over = false;
  const size_t max = static_cast<size_t>(cfg_.max_body_bytes);
  const bool read = reader([&](const char* data, size_t n) {
    if (body->size() + n > max) {
      over = true;
      return false;  // stop reading: a chunked body is not bounded by httplib 0.11
    }
    body->append(data, n);
    return true;
  });
  if (read && !over) return true;
  // The rest of the body is unread: answer, then close the connection.
  if (ConnectionContext* conn = current_connection()) conn->close_after = true;
  res.set_header("Connection", "close");
  send_error(res, over ? body_too_large()
                       : make_error(408, "invalid_request_error", "request_timeout",
                                    "the request body did not arrive whole within body_timeout_s = " +
                                        std::to_string(cfg_.body_timeout_s) + " s"));
  return false;
}

ApiError Server::body_too_large() const {
  return make_error(413, "invalid_request_error", "request_too_large",
                    "the request body is larger than max_body_bytes = " + std::to_string(cfg_.max_body_bytes));
}

bool Server::admit_before_body(const httplib::Request& req, httplib::Response& res) {
  const bool api = req.path.rfind("/v1/", 0) == 0 || req.path.rfind("/admin/", 0) == 0;
  const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
  const bool has_length = req.has_header("Content-Length");
  const bool has_body = chunked || (has_length && req.get_header_value("Content-Length") != "0");
  auto refuse = [&](const ApiError& e) {
    if (has_body) {
      if (ConnectionContext* conn = current_connection()) conn->close_after = true;
      res.set_header("Connection", "close");
    }
    send_error(res, e);
    return false;
  };
  if (api) {
    Caller caller;
    ApiError err;
    if (!authorize(req, req.path.rfind("/admin/", 0) == 0 ? Role::kAdmin : Role::kUser, &caller, &err)) {
      const bool chat = req.path == "/v1/chat/completions";
      if (chat || req.path == "/v1/completions") {  // a generation request: logged and counted as refused
        const std::string id = new_request_id(chat ? "chatcmpl-" : "cmpl-");
        res.set_header("X-Request-Id", id);
        log_rejected(chat ? Endpoint::kChat : Endpoint::kCompletions, id, "-", Clock::now(), err,
                     err.status == 401 ? "unauthenticated" : "forbidden");
      }
      return refuse(err);
    }
  }
  if (has_length) {
    const std::string v = req.get_header_value("Content-Length");
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || errno == ERANGE || v[0] == '-')
      return refuse(make_error(400, "invalid_request_error", "", "malformed HTTP request: bad Content-Length"));
    if (n > static_cast<unsigned long long>(cfg_.max_body_bytes)) return refuse(body_too_large());
  } else if (!chunked &&
             (req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE")) {
    // No Content-Length and not chunked: the body is empty (RFC 9112 6.3). httplib 0.11 would
    // read until the client closes; the Request is ours (httplib's local) until routing ends.
    const_cast<httplib::Request&>(req).set_header("Content-Length", "0");
  }
  return true;
}

void Server::handle_ready(httplib::Response& res) {
  const State s = state();
  const char* name = s == State::kReady ? "ready" : s == State::kStarting ? "starting" : "draining";
  res.status = s == State::kReady ? 200 : 503;
  json body = {{"status", name}};
  // A store that stops accepting writes refuses intervention requests (503); plain ones go on, so
  // the server stays ready and says why it is degraded.
  if (s == State::kReady && audit_ != nullptr) {
    if (Status st = audit_->health(); !st.is_ok()) {
      body["status"] = "degraded";
      body["audit"] = st.message();
      body["interventions"] = "refused until the audit store accepts writes again";
    }
    // A change row this server could not apply: its admin state differs from the other servers'.
    if (sync_enabled_) {
      json sync = admin_sync_json();
      if (sync["failed_rows"].get<int64_t>() > 0) body["status"] = "degraded";
      body["admin_sync"] = std::move(sync);
    }
  }
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void Server::refresh_engine_gauges() {
  if (engine_ == nullptr) return;
  const EngineStats s = engine_->stats();
  auto& m = metrics_;
  m.gauge("glassbox_num_requests_running", "Sequences in the running batch").set(static_cast<double>(s.running));
  m.gauge("glassbox_num_requests_waiting", "Sequences waiting to be scheduled").set(static_cast<double>(s.waiting));
  m.gauge("glassbox_kv_cache_blocks_capacity", "KV cache blocks in all (a gauge, so not *_total)")
      .set(static_cast<double>(s.kv_blocks_total));
  m.gauge("glassbox_kv_cache_blocks_used", "KV cache blocks in use").set(static_cast<double>(s.kv_blocks_used));
  m.gauge("glassbox_kv_cache_blocks_free", "KV cache blocks free")
      .set(static_cast<double>(s.kv_blocks_total - s.kv_blocks_used));
  m.gauge("glassbox_kv_cache_usage_ratio", "Fraction of KV cache blocks in use")
      .set(s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total) : 0);
  m.counter("glassbox_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache")
      .set(static_cast<double>(s.prefix_cache_queries));
  m.counter("glassbox_prefix_cache_hits_total", "Prompt tokens found in the prefix cache")
      .set(static_cast<double>(s.prefix_cache_hits));
  m.gauge("glassbox_prefix_cache_hit_rate", "Prefix cache hits / queries since start")
      .set(s.prefix_cache_queries > 0
               ? static_cast<double>(s.prefix_cache_hits) / static_cast<double>(s.prefix_cache_queries)
               : 0);
  // Per variant (the base included), and what the Gateway API Inference Extension reads for
  // adapters (vLLM's lora_requests_info: the label values are the names; the value a timestamp).
  std::string running_variants, waiting_variants;
  int64_t n_variants = 0;
  for (const ServedModel& sm : models()) {
    const size_t v = static_cast<size_t>(sm.variant);
    const int64_t run = v < s.running_by_variant.size() ? s.running_by_variant[v] : 0;
    const int64_t wait = v < s.waiting_by_variant.size() ? s.waiting_by_variant[v] : 0;
    m.gauge("glassbox_model_requests_running", "Sequences in the running batch, by model (base or variant)",
            {{"model", sm.name}})
        .set(static_cast<double>(run));
    m.gauge("glassbox_model_requests_waiting", "Sequences waiting to be scheduled, by model (base or variant)",
            {{"model", sm.name}})
        .set(static_cast<double>(wait));
    if (sm.variant == 0) continue;
    ++n_variants;
    if (run > 0) running_variants += (running_variants.empty() ? "" : ",") + sm.name;
    if (wait > 0) waiting_variants += (waiting_variants.empty() ? "" : ",") + sm.name;
  }
  if (n_variants > 0) {
    m.replace_gauge("glassbox_lora_requests_info",
                    "Variants (adapters) with running / waiting requests, in the labels; value: unix time",
                    {{"max_lora", std::to_string(n_variants)},
                     {"running_lora_adapters", running_variants},
                     {"waiting_lora_adapters", waiting_variants}})
        .set(static_cast<double>(
            std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                .count()));
  }
  m.counter("glassbox_num_preemptions_total", "Sequences preempted (recomputed) for lack of KV blocks")
      .set(static_cast<double>(s.preemptions));
  static const std::vector<double> kStepBounds(StepHistogram::kBounds.begin(), StepHistogram::kBounds.end());
  m.histogram("glassbox_engine_step_duration_seconds", "Duration of engine steps (one forward + sampling)", kStepBounds)
      .load(s.step_seconds.buckets, s.step_seconds.count, s.step_seconds.sum);

  if (audit_ != nullptr)
    m.gauge("glassbox_audit_store_ok", "1 while the audit store accepts writes (else intervention requests get 503)")
        .set(audit_->health().is_ok() ? 1 : 0);
  if (http_ != nullptr) {
    const TransportStats t = http_->stats();
    m.gauge("glassbox_http_connections_open", "Open HTTP connections").set(static_cast<double>(t.open));
    m.counter("glassbox_http_connections_refused_total", "HTTP connections refused: max_connections reached")
        .set(static_cast<double>(t.refused_full));
    m.counter("glassbox_http_requests_refused_busy_total", "HTTP requests refused: every worker busy, queue full")
        .set(static_cast<double>(t.refused_busy));
    m.counter("glassbox_http_header_timeouts_total", "HTTP connections closed: headers did not arrive in time")
        .set(static_cast<double>(t.header_timeouts));
  }

  const MonitorSnapshot mon = engine_->monitor();
  if (mon.config.enabled) {
    m.counter("glassbox_monitor_steps_total", "Engine steps the massive-activation monitor sampled")
        .set(static_cast<double>(mon.steps_sampled));
    static const std::vector<double> kRatioBounds(MonitorSnapshot::kRatioBounds.begin(),
                                                  MonitorSnapshot::kRatioBounds.end());
    for (size_t l = 0; l < mon.events_per_layer.size(); ++l) {
      const Labels layer = {{"layer", std::to_string(l)}};
      m.counter("glassbox_massive_activation_events_total",
                "Massive activations seen by the monitor (|x| > min_abs and > min_ratio x the row's median |x|)", layer)
          .set(static_cast<double>(mon.events_per_layer[l]));
      m.histogram("glassbox_massive_activation_ratio",
                  "Per sampled step and layer: the largest max|x| / median|x| of a token row", kRatioBounds, layer)
          .load(mon.ratio_buckets[l], mon.ratio_count[l], mon.ratio_sum[l]);
    }
  }
}

void Server::handle_metrics(httplib::Response& res) {
  refresh_engine_gauges();
  res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
}

void Server::handle_models(const httplib::Request& req, httplib::Response& res, const std::string& id) {
  Caller caller;
  ApiError err;
  if (!authorize(req, Role::kUser, &caller, &err)) return send_error(res, err);
  // vLLM's shape: a variant has its base as `parent` (null for the base). Where the weights live
  // on the server (`root`) is for admins only.
  auto card = [&](const ServedModel& m) {
    json j = {{"id", m.name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "glassbox"},
              {"parent", m.variant == 0 ? json(nullptr) : json(cfg_.served_model_name)},
              {"max_model_len", max_model_len_},
              {"vocab_size", codec_ != nullptr ? codec_->vocab_size() : 0}};
    if (caller.role == Role::kAdmin) j["root"] = m.variant == 0 ? cfg_.model : m.info.path;
    if (m.variant != 0) {
      j["glassbox"] = {{"variant",
                        {{"source", m.info.source},
                         {"version", m.info.version},
                         {"sha256", m.info.sha256},
                         {"memory_bytes", m.info.bytes},
                         {"edited_matrices", m.info.edits}}}};
    }
    return j;
  };
  // A route alias is a model to clients; its arms say where its requests go.
  auto route_card = [&](const std::string& alias, const std::vector<RouteArm>& arms) {
    json a = json::array();
    for (const RouteArm& arm : arms) a.push_back({{"model", arm.model}, {"weight", arm.weight}});
    return json{{"id", alias},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "glassbox"},
                {"parent", nullptr},
                {"max_model_len", max_model_len_},
                {"glassbox", {{"route", a}}}};
  };
  if (id.empty()) {
    json data = json::array();
    for (const ServedModel& m : models()) data.push_back(card(m));
    for (const auto& [alias, arms] : routes()) data.push_back(route_card(alias, arms));
    return res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }
  if (std::vector<RouteArm> arms; find_route(id, &arms))
    return res.set_content(route_card(id, arms).dump(), "application/json");
  ServedModel m;
  if (!find_model(id, &m)) {
    ApiError e =
        make_error(404, "not_found_error", "model_not_found", "The model " + quote_input(id) + " does not exist");
    e.param = "model";
    return send_error(res, e);
  }
  res.set_content(card(m).dump(), "application/json");
}

}  // namespace gb::server

// The Server object: construction, listening, attaching the engine, the self-test, readiness,
// drain and stop; request ids, the request log and error answers. The parts: routes.cc,
// admission.cc, generation.cc (the per-request loop), streaming.cc, admin_api.cc.
#include "server/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <random>

#include "server/allocator.h"
#include "server/generation.h"
#include "server/http_transport.h"
#include "server/server_internal.h"

namespace gb::server {

using json = nlohmann::json;

ModelMetrics::ModelMetrics(MetricsRegistry& r, const std::string& model)
    : ttft(r.histogram("glassbox_time_to_first_token_seconds", "Time from arrival to the first generated token",
                       latency_buckets(), {{"model", model}})),
      inter_token(r.histogram("glassbox_inter_token_latency_seconds", "Time between generated tokens",
                              token_latency_buckets(), {{"model", model}})),
      e2e(r.histogram("glassbox_e2e_request_latency_seconds", "Time from arrival to the last token", latency_buckets(),
                      {{"model", model}})),
      queue_time(r.histogram("glassbox_request_queue_time_seconds",
                             "Time from submission until the engine first schedules the request", latency_buckets(),
                             {{"model", model}})),
      generation_tokens(r.histogram("glassbox_request_generation_tokens", "Generated tokens per choice",
                                    token_count_buckets(), {{"model", model}})),
      prompt_tokens(r.histogram("glassbox_request_prompt_tokens", "Prompt tokens per prompt", token_count_buckets(),
                                {{"model", model}})),
      repetition_rate(r.histogram("glassbox_request_repetition_rate",
                                  "Per choice: fraction of generated n-grams that repeat an earlier one (loops)",
                                  {0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0}, {{"model", model}})),
      prompt_tokens_total(
          r.counter("glassbox_prompt_tokens_total", "Prompt tokens of accepted requests", {{"model", model}})),
      generation_tokens_total(r.counter("glassbox_generation_tokens_total", "Generated tokens", {{"model", model}})),
      registry_(r),
      model_(model) {}

Counter& ModelMetrics::finished(const char* reason) {
  return registry_.counter("glassbox_request_finished_total",
                           "Finished choices by finish_reason and model (truncation rate: length / all)",
                           {{"finish_reason", reason}, {"model", model_}});
}

HotMetrics::HotMetrics(MetricsRegistry& r)
    : in_flight(r.gauge("glassbox_requests_in_flight", "Generation requests being served")),
      ready(r.gauge("glassbox_server_ready", "1 when the server accepts generation requests")) {}

Server::Server(ServerConfig cfg, std::function<void(const std::string&)> request_log)
    : cfg_(std::move(cfg)), request_log_(std::move(request_log)), keys_(cfg_), rate_limiter_(cfg_.rate_limit_burst) {
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (!request_log_) {
    request_log_ = [](const std::string& line) {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    };
  }
}

Server::~Server() { stop(); }

Status Server::start() {
  if (!cfg_.audit_db.empty()) {
    Result<std::unique_ptr<AuditStore>> store = AuditStore::open(cfg_.audit_db);
    if (!store.is_ok()) return store.status().with_context("audit_db");
    audit_ = std::move(store.value());
  }
  TransportLimits limits;
  limits.max_connections = static_cast<size_t>(cfg_.max_connections);
  limits.workers = cfg_.http_threads > 0 ? static_cast<size_t>(cfg_.http_threads)
                                         : static_cast<size_t>(cfg_.max_concurrent_requests + 8);
  limits.max_body_bytes = static_cast<size_t>(cfg_.max_body_bytes);
  auto ms = [](double s) { return std::chrono::duration_cast<std::chrono::milliseconds>(to_micros(s)); };
  limits.header_timeout = ms(cfg_.header_timeout_s);
  limits.body_timeout = ms(cfg_.body_timeout_s);
  limits.read_timeout = ms(cfg_.read_timeout_s);
  limits.write_timeout = ms(cfg_.write_timeout_s);
  http_ = std::make_unique<HttpTransport>(limits);
  http_->set_payload_max_length(static_cast<size_t>(cfg_.max_body_bytes));
  install_routes();
  port_ = http_->bind_listener(cfg_.host, static_cast<int>(cfg_.port));
  if (port_ <= 0)
    return Status::error("cannot listen on " + cfg_.host + ":" +
                         (cfg_.port == 0 ? "any port" : std::to_string(cfg_.port)) +
                         " (in use, or not an address of this machine)");
  http_->start_transport();
  listen_thread_ = std::thread([this] {
    http_->listen_after_bind();
    listen_returned_.store(true);
  });
  // stop() is a no-op until the listen loop runs, so do not return before it does.
  while (!http_->is_running() && !listen_returned_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (listen_returned_.load()) {
    listen_thread_.join();
    http_->stop_transport();
    return Status::error("cannot serve on " + cfg_.host + ":" + std::to_string(port_));
  }
  return Status::ok();
}

void Server::attach(EngineApi* engine, const TextCodec* codec, int32_t max_model_len) {
  engine_ = engine;
  codec_ = codec;
  max_model_len_ = max_model_len;
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    auto metrics_for = [this](const std::string& name) {
      std::unique_ptr<ModelMetrics>& m = model_metrics_[name];
      if (m == nullptr) m = std::make_unique<ModelMetrics>(metrics_, name);
      return m.get();
    };
    models_.clear();
    models_.push_back(ServedModel{cfg_.served_model_name, 0, {}, metrics_for(cfg_.served_model_name)});
    for (const VariantStatus& v : engine->variants()) {
      models_.push_back(ServedModel{v.name, v.id, v, metrics_for(v.name)});
    }
    routes_ = cfg_.routes;
    shadow_ = cfg_.shadow;
  }
  for (const ServedModel& m : models()) {
    if (m.variant != 0) set_variant_info(m.info, true);
  }
  glass_ = std::make_unique<GlassService>(cfg_, engine->model_config());
  monitor_thread_ = std::thread([this] { monitor_loop(); });
}

Status Server::init_glass() { return glass_->init(); }

void Server::monitor_loop() {
  std::unique_lock<std::mutex> lock(monitor_mutex_);
  bool was_idle = false;
  uint64_t trimmed_after = request_counter_.load();
  while (!monitor_wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return monitor_stop_; })) {
    // Idle for a whole tick (so the last answers' buffers are freed) after new requests: give the
    // heap's free pages back to the OS (allocator.h).
    const bool idle = in_flight_.load() == 0;
    if (idle && was_idle && request_counter_.load() != trimmed_after) {
      trimmed_after = request_counter_.load();
      if (const int64_t released = release_free_memory(); released > 0)
        spdlog::debug("idle: returned {} KiB of free heap to the OS", released >> 10);
    }
    was_idle = idle;
    drain_shadows(false);
    const MonitorSnapshot m = engine_->monitor();
    for (const MonitorSnapshot::Event& e : m.recent) {
      if (e.index <= monitor_logged_) continue;
      monitor_logged_ = e.index;
      const MassiveEvent& ev = e.event;
      write_log({{"event", "massive_activation"},
                 {"request_id", e.request_id},
                 {"layer", ev.layer},
                 {"point", std::string(hook_point_name(ev.point))},
                 {"token", ev.position},
                 {"dim", ev.dim},
                 {"value", ev.value},
                 {"median_abs", ev.median_abs},
                 {"median", std::string(massive_median_name(ev.median))},
                 {"ratio", std::isfinite(ev.ratio) ? json(ev.ratio) : json("inf")},
                 {"abs_test", ev.abs_test},
                 {"ratio_test", ev.ratio_test}});
    }
  }
}

Status Server::self_test(std::chrono::milliseconds timeout) {
  if (engine_ == nullptr || codec_ == nullptr) return Status::error("self-test: no engine attached");
  const Clock::time_point end = Clock::now() + timeout;
  // One token on the base and on each variant: each must produce finite logits.
  for (const ServedModel& m : models()) {
    GB_RETURN_IF_ERROR(test_variant(m, end));
  }
  return Status::ok();
}

std::vector<ServedModel> Server::models() const {
  std::lock_guard<std::mutex> lock(models_mutex_);
  return models_;
}

bool Server::find_model(const std::string& name, ServedModel* out) const {
  std::lock_guard<std::mutex> lock(models_mutex_);
  for (const ServedModel& m : models_) {
    if (m.name == name || (name.empty() && m.variant == 0)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::map<std::string, std::vector<RouteArm>> Server::routes() const {
  std::lock_guard<std::mutex> lock(models_mutex_);
  return routes_;
}

bool Server::find_route(const std::string& alias, std::vector<RouteArm>* arms) const {
  std::lock_guard<std::mutex> lock(models_mutex_);
  auto it = routes_.find(alias);
  if (it == routes_.end()) return false;
  *arms = it->second;
  return true;
}

bool Server::find_shadow(const std::string& model, ShadowConfig* out) const {
  std::lock_guard<std::mutex> lock(models_mutex_);
  auto it = shadow_.find(model);
  if (it == shadow_.end()) return false;
  *out = it->second;
  return true;
}

void Server::set_ready() {
  State expected = State::kStarting;
  if (engine_ != nullptr && state_.compare_exchange_strong(expected, State::kReady)) hot_.ready.set(1);
}

void Server::drain(std::chrono::milliseconds deadline) {
  State s = state_.load();
  if (s == State::kStopped) return;
  state_.store(State::kDraining, std::memory_order_release);
  hot_.ready.set(0);
  const Clock::time_point end = Clock::now() + deadline;
  while (in_flight_.load() > 0 && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (in_flight_.load() > 0) {
    spdlog::warn("drain: cancelling {} request(s) still running after {} ms", in_flight_.load(), deadline.count());
    std::lock_guard<std::mutex> lock(generations_mutex_);
    for (Generation* g : generations_) {
      g->abort.store(Generation::kDrainAbort);
      g->cancel_unfinished();
    }
  }
  // Handlers notice the abort within one poll interval; a stuck socket write is bounded by the
  // write timeout.
  const Clock::time_point hard_end = Clock::now() + std::chrono::seconds(1) + to_micros(cfg_.write_timeout_s);
  while (in_flight_.load() > 0 && Clock::now() < hard_end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void Server::stop() {
  if (http_) {
    http_->stop();
    if (listen_thread_.joinable()) listen_thread_.join();
    http_->stop_transport();
  }
  stop_admin_sync();  // it may replay a variant load, which needs the engine
  {
    std::lock_guard<std::mutex> lock(monitor_mutex_);
    monitor_stop_ = true;
  }
  monitor_wake_.notify_all();
  if (monitor_thread_.joinable()) monitor_thread_.join();
  drain_shadows(/*cancel=*/true);
  state_.store(State::kStopped, std::memory_order_release);
}

void Server::register_generation(Generation* g) {
  std::lock_guard<std::mutex> lock(generations_mutex_);
  generations_.insert(g);
}

void Server::unregister_generation(Generation* g) {
  std::lock_guard<std::mutex> lock(generations_mutex_);
  generations_.erase(g);
}

std::string Server::new_request_id(const char* prefix) {
  // Unique and unguessable enough for correlation; not a secret.
  uint64_t x = id_salt_ + 0x9E3779B97F4A7C15ull * (request_counter_.fetch_add(1) + 1);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016" PRIx64, prefix, x);
  return buf;
}

void Server::write_log(const json& line) {
  try {
    const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace);
    std::lock_guard<std::mutex> lock(log_mutex_);
    request_log_(text);
  } catch (const std::exception& e) {
    spdlog::error("request log: {}", e.what());
  }
}

void Server::send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  // Replace, never throw: a message may quote client text that is not valid UTF-8.
  res.set_content(error_body(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace gb::server

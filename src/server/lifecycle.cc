// run_server: ordered start-up, signal wait, drain.
#include "server/lifecycle.h"

#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "ops/cpu_features.h"
#include "server/allocator.h"
#include "server/server.h"

namespace gb::server {

namespace {

sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void block_shutdown_signals() {
  sigset_t set = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A client that vanishes mid-write must be an error on that socket, not the process's death.
  signal(SIGPIPE, SIG_IGN);
}

namespace {

// Diagnostics on stderr (stdout carries the JSON request log, or a tool's own output).
void configure_logging(const ServerConfig& cfg) {
  if (spdlog::get("glassbox") == nullptr) spdlog::set_default_logger(spdlog::stderr_color_mt("glassbox"));
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
}

}  // namespace

Result<std::unique_ptr<LocalServer>> LocalServer::start(const ServerConfig& cfg, const BackendFactory& make_backend,
                                                        std::function<void(const std::string&)> request_log) {
  configure_logging(cfg);
  std::unique_ptr<LocalServer> local(new LocalServer());
  local->server_ = std::make_unique<Server>(cfg, std::move(request_log));
  GB_RETURN_IF_ERROR(local->server_->start());
  Result<Backend> backend = make_backend(cfg);
  if (!backend.is_ok()) return backend.status().with_context("cannot start the engine");
  local->backend_ = std::move(backend).value();
  local->server_->attach(local->backend_.engine.get(), local->backend_.codec.get(), local->backend_.max_model_len);
  GB_RETURN_IF_ERROR(local->server_->init_glass().with_context("glass box"));
  GB_RETURN_IF_ERROR(local->server_->self_test(std::chrono::seconds(120)));
  GB_RETURN_IF_ERROR(local->server_->start_admin_sync());
  local->server_->set_ready();
  return local;
}

LocalServer::~LocalServer() {
  if (server_ != nullptr) {
    server_->drain(std::chrono::seconds(5));
    server_->stop();
  }
  server_.reset();  // before the backend it points into
}

int LocalServer::port() const { return server_->port(); }

int run_server(const ServerConfig& cfg, const BackendFactory& make_backend) {
  configure_allocator();  // before the HTTP and engine threads exist
  configure_logging(cfg);
  spdlog::info("effective config: {}", config_to_json(cfg).dump());

  Server server(cfg);
  if (Status st = server.start(); !st.is_ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  spdlog::info("listening on {}:{} (probes only until the model is ready)", cfg.host, server.port());

  Result<Backend> backend = make_backend(cfg);
  if (!backend.is_ok()) {
    spdlog::error("cannot start the engine: {}", backend.message());
    server.stop();
    return 1;
  }
  server.attach(backend->engine.get(), backend->codec.get(), backend->max_model_len);
  if (Status st = server.init_glass(); !st.is_ok()) {
    spdlog::error("glass box: {}", st.message());
    server.stop();
    return 1;
  }
  if (Status st = server.self_test(std::chrono::seconds(120)); !st.is_ok()) {
    spdlog::error("{}; refusing to serve", st.message());
    server.stop();
    return 1;
  }
  if (Status st = server.start_admin_sync(); !st.is_ok()) {
    spdlog::error("{}", st.message());
    server.stop();
    return 1;
  }
  server.set_ready();
  spdlog::info("ready: serving '{}' (context {} tokens, {} kernels) on {}:{}", cfg.served_model_name,
               backend->max_model_len, ops::isa_name(ops::active_isa()), cfg.host, server.port());

  sigset_t set = shutdown_signals();
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("received {}, draining (up to {} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT", cfg.drain_timeout_s);
  server.drain(std::chrono::milliseconds(static_cast<int64_t>(std::llround(cfg.drain_timeout_s * 1000))));
  server.stop();
  spdlog::info("stopped");
  spdlog::default_logger()->flush();
  std::fflush(stdout);
  return 0;
}

}  // namespace gb::server

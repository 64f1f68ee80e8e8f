// The life of a serving process, in order: config -> listen (probes only) -> engine and
// tokenizer -> self-test -> ready -> SIGTERM/SIGINT -> drain -> flush logs -> exit 0. Never
// serves half-initialised: generation endpoints answer 503 until the self-test has passed.
#pragma once

#include <functional>
#include <memory>

#include "core/status.h"
#include "engine/request.h"
#include "server/config.h"
#include "server/text_codec.h"

namespace gb::server {

// What a loaded model gives the server. Destroyed after the server has stopped.
struct Backend {
  // Declared first so it is destroyed last: what the engine or codec point into (the model).
  std::shared_ptr<void> keep_alive;
  std::unique_ptr<TextCodec> codec;
  std::unique_ptr<EngineApi> engine;  // destroyed first: its thread may still use the rest
  int32_t max_model_len = 0;          // the effective context (config's max_model_len, or the model's)
};

using BackendFactory = std::function<Result<Backend>(const ServerConfig&)>;

// Blocks SIGTERM and SIGINT in the calling thread; call first thing in main (before any
// thread starts) so every thread inherits the mask and only run_server() receives them.
void block_shutdown_signals();

// Runs the whole lifecycle; returns the process exit code (0 after a clean drain, 1 when
// start-up failed, with the reason logged).
int run_server(const ServerConfig& cfg, const BackendFactory& make_backend);

class Server;

// A server inside this process for a tool that talks to it over HTTP as any client would
// (`glassbox eval`): the same start-up as run_server (listen, backend, glass box, self-test),
// ready when start() returns; drained and stopped by the destructor, before the backend goes.
class LocalServer {
 public:
  static Result<std::unique_ptr<LocalServer>> start(const ServerConfig& cfg, const BackendFactory& make_backend,
                                                    std::function<void(const std::string&)> request_log);
  ~LocalServer();
  int port() const;

 private:
  LocalServer() = default;
  Backend backend_;
  std::unique_ptr<Server> server_;
};

}  // namespace gb::server

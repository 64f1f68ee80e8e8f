// `glassbox serve`: the OpenAI-compatible server. Flags come from the ServerConfig field table
// (src/server/config.h); the lifecycle is gb::server::run_server; make_backend builds what it
// serves: the model, the engine and the text codec (tokenizer + chat template).
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/config.h"
#include "server/lifecycle.h"

namespace gb::cli {

namespace {

// The tokenizer and chat template behind server::TextCodec: encode / token_text / a
// StreamDecoder per sequence / render_chat with the template from cfg.chat_template (a file)
// if set, else the model's (tokenizer_config.json), else kDefaultChatTemplate. Until
// gb_tokenizer and gb_chat are merged there is nothing to adapt.
Result<std::unique_ptr<server::TextCodec>> make_codec(const server::ServerConfig& cfg) {
  return Status::error("the tokenizer and chat templates (gb_tokenizer, gb_chat) are not in this build yet; "
                       "make_codec in src/cli/serve_cmd.cc adapts them to server::TextCodec");
}

int64_t kv_cache_bytes(const server::ServerConfig& cfg) {
  if (cfg.kv_cache_bytes > 0) return cfg.kv_cache_bytes;
  if (cfg.kv_cache_fraction > 0) {
    const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    return static_cast<int64_t>(ram * cfg.kv_cache_fraction);
  }
  return 0;  // the engine's default: max_num_seqs full-length sequences, capped
}

Result<server::Backend> make_backend(const server::ServerConfig& cfg) {
  server::Backend backend;
  GB_ASSIGN_OR_RETURN(backend.codec, make_codec(cfg));

  LoadOptions load;
  load.max_batch_tokens = static_cast<int32_t>(cfg.max_num_batched_tokens);
  load.n_threads = static_cast<int32_t>(cfg.threads);
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load_model(cfg.model, load));

  EngineConfig ec;
  ec.scheduler.max_num_seqs = static_cast<int32_t>(cfg.max_num_seqs);
  ec.scheduler.max_num_batched_tokens = static_cast<int32_t>(cfg.max_num_batched_tokens);
  ec.max_model_len = static_cast<int32_t>(cfg.max_model_len);
  ec.kv_cache_bytes = kv_cache_bytes(cfg);
  ec.max_queue = static_cast<int32_t>(cfg.max_queue_length);
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(model.get(), ec));
  engine->start();
  backend.max_model_len = engine->max_model_len();
  backend.engine = std::move(engine);
  backend.keep_alive = std::shared_ptr<Model>(std::move(model));
  return backend;
}

}  // namespace

void register_serve(CLI::App& app, Action* action) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  auto flags = std::make_shared<server::ConfigOverrides>();
  auto config_file = std::make_shared<std::string>();
  server::add_config_flags(*cmd, flags.get(), config_file.get());
  cmd->callback([action, flags, config_file] {
    *action = [flags, config_file]() -> int {
      // Before any thread exists, so SIGTERM/SIGINT reach only run_server's wait.
      server::block_shutdown_signals();
      auto cfg = server::load_config(*config_file, server::process_env(), *flags);
      if (!cfg.is_ok()) {
        std::fprintf(stderr, "glassbox serve: invalid config: %s\n", cfg.message().c_str());
        return 2;
      }
      return server::run_server(*cfg, make_backend);
    };
  });
}

}  // namespace gb::cli

// `glassbox serve`: the OpenAI-compatible server. Flags come from the ServerConfig field table
// (src/server/config.h); the lifecycle is gb::server::run_server. make_backend is where the
// engine, tokenizer and chat template are built.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "server/config.h"
#include "server/lifecycle.h"

namespace gb::cli {

namespace {

// Builds what the server serves: the engine (EngineApi), a TextCodec over the model's
// tokenizer and chat template (cfg.chat_template, when set, is a file overriding the model's
// template; a model without one gets kDefaultChatTemplate), and the effective context length
// (cfg.max_model_len, or the model's when 0). The engine gets cfg.max_num_seqs,
// max_num_batched_tokens, kv_cache_bytes / kv_cache_fraction, threads and max_queue_length.
Result<server::Backend> make_backend(const server::ServerConfig& cfg) {
  return Status::error("the engine is not available in this build yet (issue 4: the engine loop, gb_tokenizer and "
                       "gb_chat must be merged and wired into make_backend in src/cli/serve_cmd.cc); cannot serve " +
                       cfg.model);
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

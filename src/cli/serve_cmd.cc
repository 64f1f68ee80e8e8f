// `glassbox serve`: the OpenAI-compatible server. Flags come from the ServerConfig field table
// (src/server/config.h); the lifecycle is gb::server::run_server; make_backend builds what it
// serves: the model, the engine and the text codec (tokenizer + chat template).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/config.h"
#include "server/lifecycle.h"
#include "tokenizer/tokenizer.h"

namespace gb::cli {

namespace {

// The tokenizer and chat template behind server::TextCodec.
class TokenizerCodec : public server::TextCodec {
 public:
  TokenizerCodec(std::unique_ptr<Tokenizer> tokenizer, chat::ChatTemplate tmpl)
      : tokenizer_(std::move(tokenizer)), template_(std::move(tmpl)) {}

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    return tokenizer_->encode(text, add_special);
  }
  std::string token_text(int32_t id) const override {
    return tokenizer_->decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false);
  }
  std::unique_ptr<server::StreamDetokenizer> stream(std::span<const int32_t> prompt) const override {
    return std::make_unique<Detokenizer>(*tokenizer_, prompt);
  }
  Result<std::string> render_chat(const nlohmann::json& messages, bool add_generation_prompt) const override {
    chat::ChatTemplateOptions options;
    options.add_generation_prompt = add_generation_prompt;
    options.bos_token = tokenizer_->bos_token();
    options.eos_token = tokenizer_->eos_token();
    return chat::apply_chat_template(template_, nlohmann::ordered_json::parse(messages.dump()), options);
  }
  int32_t vocab_size() const override { return tokenizer_->vocab_size(); }

 private:
  class Detokenizer : public server::StreamDetokenizer {
   public:
    Detokenizer(const Tokenizer& t, std::span<const int32_t> prompt) : decoder_(t, /*skip_special=*/true) {
      decoder_.prime(prompt);
    }
    std::string push(int32_t id) override { return decoder_.push(id); }
    std::string flush() override { return decoder_.flush(); }

   private:
    StreamDecoder decoder_;
  };

  std::unique_ptr<Tokenizer> tokenizer_;
  chat::ChatTemplate template_;
};

// The chat template: --chat-template FILE, else the model's, else kDefaultChatTemplate.
Result<std::unique_ptr<server::TextCodec>> make_codec(const server::ServerConfig& cfg) {
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::load(cfg.model));
  std::string source;
  if (!cfg.chat_template.empty()) {
    std::ifstream in(cfg.chat_template, std::ios::binary);
    if (!in) return Status::error("chat_template: cannot read " + cfg.chat_template);
    source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else if (!tokenizer->chat_template().empty()) {
    source = tokenizer->chat_template();
  } else {
    source = std::string(chat::kDefaultChatTemplate);
  }
  auto tmpl = chat::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return tmpl.status().with_context("chat template");
  return std::unique_ptr<server::TextCodec>(new TokenizerCodec(std::move(tokenizer), std::move(tmpl.value())));
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
  // The always-on massive-activation monitor: resid_post of every layer, one step in N.
  ec.monitor.enabled = cfg.monitor_every_steps > 0;
  ec.monitor.every_steps = static_cast<int32_t>(std::max<int64_t>(1, cfg.monitor_every_steps));
  ec.monitor.rule.min_abs = static_cast<float>(cfg.monitor_min_abs);
  ec.monitor.rule.min_ratio = static_cast<float>(cfg.monitor_min_ratio);
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

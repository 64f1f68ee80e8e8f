// `glassbox serve`: the OpenAI-compatible server. Flags come from the ServerConfig field table
// (src/server/config.h); the lifecycle is gb::server::run_server; make_backend builds what it
// serves: the model, the engine and the text codec (tokenizer + chat template).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>

#include "chat/chat_template.h"
#include "cli/backend.h"
#include "cli/commands.h"
#include "cli/common_flags.h"
#include "core/mapped_file.h"
#include "engine/engine.h"
#include "model/model.h"
#include "patch/patch.h"
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
  std::string token_text(int32_t id) const override {
    return tokenizer_->decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false);
  }

 private:
  class Detokenizer : public server::StreamDetokenizer {
   public:
    Detokenizer(const Tokenizer& t, std::span<const int32_t> prompt) : decoder_(t, /*skip_special=*/true) {
      decoder_.prime(prompt);
    }
    std::string push(int32_t id) override { return decoder_.push(id); }
    std::string flush() override { return decoder_.flush(); }
    std::string peek(int32_t id) const override { return decoder_.peek(id); }

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
    Result<std::string> text = read_file(cfg.chat_template);
    if (!text.is_ok()) return Status::error("chat_template: " + text.message());
    source = std::move(text).value();
  } else if (!tokenizer->chat_template().empty()) {
    source = tokenizer->chat_template();
  } else {
    source = std::string(chat::kDefaultChatTemplate);
  }
  auto tmpl = chat::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return tmpl.status().with_context("chat template");
  return std::unique_ptr<server::TextCodec>(new TokenizerCodec(std::move(tokenizer), std::move(tmpl.value())));
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// Bytes in the unit that shows them (a small adapter's deltas are KiB).
std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes < (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
    return buf;
  }
  return mib(bytes);
}

// The KV cache serve takes and the context it serves.
struct KvPlan {
  int64_t bytes;
  int32_t max_model_len;
};

// The KV cache's size in bytes: kv_cache_bytes or kv_cache_fraction when set, else room for
// max_num_seqs sequences of max_model_len within the kv_cache_memory budget. It must hold at least
// one sequence of max_model_len. When max_model_len is not set and the model's full context does
// not fit (Qwen3's 40960 positions take 8.75 GiB of f32 K/V at 0.6B), the context is what the
// budget holds, said at start — as llama-server serves a context smaller than the model's by
// default and vLLM's auto-fit clamps it; a max_model_len that was asked for is never shortened:
// then the error names the settings to change.
Result<KvPlan> plan_kv_cache(const server::ServerConfig& cfg, const ModelConfig& mc, int32_t block_size, DType dtype) {
  const int64_t block_bytes = kv_block_bytes(mc, block_size, dtype);
  int64_t max_len = cfg.max_model_len > 0 ? cfg.max_model_len : mc.max_pos;
  int64_t seq_blocks = (max_len + block_size - 1) / block_size;
  const char* setting = "--kv-cache-memory";
  const char* key = "kv_cache_memory";
  int64_t budget = cfg.kv_cache_memory;
  if (cfg.kv_cache_bytes > 0 || cfg.kv_cache_fraction > 0) {
    setting = cfg.kv_cache_bytes > 0 ? "--kv-cache-bytes" : "--kv-cache-fraction";
    key = cfg.kv_cache_bytes > 0 ? "kv_cache_bytes" : "kv_cache_fraction";
    budget = cfg.kv_cache_bytes;
    if (budget <= 0) {
      const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
      budget = static_cast<int64_t>(ram * cfg.kv_cache_fraction);
    }
  }
  const int64_t budget_blocks = budget / block_bytes;
  if (budget_blocks < seq_blocks && cfg.max_model_len <= 0 && budget_blocks > 0) {
    std::fprintf(stderr,
                 "glassbox: max_model_len %lld: the model's %lld positions take %s of %s K/V, more than %s gives "
                 "(%s); set --max-model-len to choose the context, or raise %s for the full one\n",
                 static_cast<long long>(budget_blocks * block_size), static_cast<long long>(max_len),
                 mib(seq_blocks * block_bytes).c_str(), std::string(dtype_name(dtype)).c_str(), setting,
                 mib(budget).c_str(), setting);
    max_len = budget_blocks * block_size;
    seq_blocks = budget_blocks;
  }
  if (budget_blocks < seq_blocks) {
    const int64_t fits = budget_blocks * block_size;
    return Status::error("KV cache: one sequence of max_model_len " + std::to_string(max_len) + " tokens takes " +
                         mib(seq_blocks * block_bytes) + ", more than " + std::string(setting) + " gives (" +
                         mib(budget) + "): raise " + setting + " to at least " +
                         std::to_string(seq_blocks * block_bytes) + " bytes, or lower --max-model-len to at most " +
                         std::to_string(fits) + " (in the config file: " + key + ", max_model_len)");
  }
  const int64_t n_blocks = cfg.kv_cache_bytes > 0 || cfg.kv_cache_fraction > 0
                               ? budget_blocks
                               : std::min(seq_blocks * cfg.max_num_seqs, budget_blocks);
  std::fprintf(stderr,
               "glassbox: KV cache %s: %lld blocks of %d tokens (%lld tokens of %s K/V; max_num_seqs %lld x "
               "max_model_len %lld; %s %s)\n",
               mib(n_blocks * block_bytes).c_str(), static_cast<long long>(n_blocks), block_size,
               static_cast<long long>(n_blocks * block_size), std::string(dtype_name(dtype)).c_str(),
               static_cast<long long>(cfg.max_num_seqs), static_cast<long long>(max_len), setting, mib(budget).c_str());
  return KvPlan{n_blocks * block_bytes, static_cast<int32_t>(max_len)};
}

// The configured weight variants, registered on the model before the engine starts.
Status add_variants(const server::ServerConfig& cfg, Model* model) {
  for (const server::VariantConfig& v : cfg.variants) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string what = "variant '" + v.name + "' (" + v.path + ")";
    Result<patch::Patch> p = patch::load_patch(v.path, cfg.model);
    if (!p.is_ok()) return p.status().with_context(what);
    Result<int32_t> id = model->add_variant(*p, v.name, static_cast<float>(v.scale));
    if (!id.is_ok()) return id.status().with_context(what);
    const VariantInfo& info = model->variants().back();
    std::fprintf(stderr, "glassbox: %s: %s, %d edited matrices, %s beside the base, loaded in %.2f s\n", what.c_str(),
                 info.source.c_str(), info.n_edits, size_text(info.bytes).c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return Status::ok();
}

}  // namespace

Result<server::Backend> make_backend(const server::ServerConfig& cfg) {
  server::Backend backend;
  GB_ASSIGN_OR_RETURN(backend.codec, make_codec(cfg));

  LoadOptions load;
  load.max_batch_tokens = static_cast<int32_t>(cfg.max_num_batched_tokens);
  load.n_threads = static_cast<int32_t>(cfg.threads);
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load_model(cfg.model, load));
  GB_RETURN_IF_ERROR(add_variants(cfg, model.get()));

  EngineConfig ec;
  ec.scheduler.max_num_seqs = static_cast<int32_t>(cfg.max_num_seqs);
  ec.scheduler.max_num_batched_tokens = static_cast<int32_t>(cfg.max_num_batched_tokens);
  if (!parse_kv_cache_dtype(cfg.kv_cache_dtype, &ec.kv_cache_dtype)) {
    return Status::error("kv_cache_dtype: must be f32, bf16 or f16, got '" + cfg.kv_cache_dtype + "'");
  }
  GB_ASSIGN_OR_RETURN(const KvPlan kv, plan_kv_cache(cfg, model->config(), ec.block_size, ec.kv_cache_dtype));
  ec.kv_cache_bytes = kv.bytes;
  ec.max_model_len = kv.max_model_len;
  ec.max_queue = static_cast<int32_t>(cfg.max_queue_length);
  // The always-on massive-activation monitor: resid_post of every layer, one step in N.
  ec.monitor.enabled = cfg.monitor_every_steps > 0;
  ec.monitor.every_steps = static_cast<int32_t>(std::max<int64_t>(1, cfg.monitor_every_steps));
  ec.monitor.rule.min_abs = static_cast<float>(cfg.monitor_min_abs);
  ec.monitor.rule.min_ratio = static_cast<float>(cfg.monitor_min_ratio);
  ec.monitor.rule.median = parse_massive_median(cfg.monitor_median).value_or(MassiveMedian::kLayer);
  ec.monitor.rule.fire_on = parse_massive_fire(cfg.monitor_fire_on).value_or(MassiveFire::kBoth);
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(model.get(), ec));
  engine->start();
  backend.max_model_len = engine->max_model_len();
  backend.engine = std::move(engine);
  backend.keep_alive = std::shared_ptr<Model>(std::move(model));
  return backend;
}

void register_serve(CLI::App& app, Action* action) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  auto flags = std::make_shared<server::ConfigOverrides>();
  auto config_file = std::make_shared<std::string>();
  server::add_config_flags(*cmd, flags.get(), config_file.get(), kServeShortFlags);
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

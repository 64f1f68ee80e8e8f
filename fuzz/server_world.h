// What the server fuzz targets serve from, built as `glassbox serve` builds it but without HTTP:
// the stories260K tokenizer and chat template behind a TextCodec (as serve_cmd.cc adapts them),
// its config.json as the ModelConfig, and a GlassService with interventions on, loaded with a
// control vector, a preset, an open and a restricted session and a default set through the same
// admin functions the routes call. The model directory is GB_FUZZ_MODEL_DIR (set by
// fuzz/CMakeLists.txt to ../shared/models/stories260K), or the environment's GB_FUZZ_MODEL_DIR.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/mapped_file.h"
#include "model/config.h"
#include "server/config.h"
#include "server/glass_api.h"
#include "server/json_input.h"
#include "server/text_codec.h"
#include "tokenizer/tokenizer.h"

namespace gb::fuzz {

[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "server fuzz world: %s\n", why.c_str());
  std::abort();
}

class FuzzCodec : public server::TextCodec {
 public:
  FuzzCodec(std::unique_ptr<Tokenizer> t, chat::ChatTemplate tmpl) : tok_(std::move(t)), tmpl_(std::move(tmpl)) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    return tok_->encode(text, add_special);
  }
  std::unique_ptr<server::StreamDetokenizer> stream(std::span<const int32_t> prompt) const override {
    return std::make_unique<Detok>(*tok_, prompt);
  }
  Result<std::string> render_chat(const nlohmann::json& messages, bool add_generation_prompt) const override {
    chat::ChatTemplateOptions options;
    options.add_generation_prompt = add_generation_prompt;
    options.bos_token = tok_->bos_token();
    options.eos_token = tok_->eos_token();
    return chat::apply_chat_template(tmpl_, nlohmann::ordered_json::parse(messages.dump()), options);
  }
  int32_t vocab_size() const override { return tok_->vocab_size(); }

 private:
  class Detok : public server::StreamDetokenizer {
   public:
    Detok(const Tokenizer& t, std::span<const int32_t> prompt) : d_(t, /*skip_special=*/true) { d_.prime(prompt); }
    std::string push(int32_t id) override { return d_.push(id); }
    std::string flush() override { return d_.flush(); }
    std::string peek(int32_t id) const override { return d_.peek(id); }

   private:
    StreamDecoder d_;
  };
  std::unique_ptr<Tokenizer> tok_;
  chat::ChatTemplate tmpl_;
};

inline std::string model_dir() {
  if (const char* e = std::getenv("GB_FUZZ_MODEL_DIR"); e != nullptr && *e != '\0') return e;
  return GB_FUZZ_MODEL_DIR;
}

inline ModelConfig load_model_config(const std::string& dir) {
  Result<std::string> text = read_file(dir + "/config.json");
  if (!text.is_ok()) die(text.message());
  Result<ModelConfig> c = parse_hf_config(nlohmann::json::parse(*text), nullptr);
  if (!c.is_ok()) die(c.message());
  return std::move(c).value();
}

inline std::unique_ptr<server::TextCodec> load_codec(const std::string& dir) {
  auto tok = Tokenizer::load(dir);
  if (!tok.is_ok()) die(tok.message());
  const std::string source =
      (*tok)->chat_template().empty() ? std::string(chat::kDefaultChatTemplate) : (*tok)->chat_template();
  auto tmpl = chat::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) die(tmpl.message());
  return std::make_unique<FuzzCodec>(std::move(tok).value(), std::move(tmpl).value());
}

inline server::ServerConfig fuzz_server_config() {
  server::ServerConfig cfg;
  cfg.served_model_name = "stories260K";
  cfg.interventions = true;
  cfg.max_request_observation_bytes = 1 << 20;  // small budgets, so both limits are reachable
  cfg.max_observation_bytes = 4 << 20;
  return cfg;
}

// A fresh service with a vector "v", a preset "p", sessions "s" (open) and "locked" (admin
// role only) and a default set. Each step must succeed: the target would fuzz nothing otherwise.
inline std::unique_ptr<server::GlassService> make_glass(const server::ServerConfig& cfg, const ModelConfig& m) {
  auto g = std::make_unique<server::GlassService>(cfg, &m);
  if (Status s = g->init(); !s.is_ok()) die(s.message());
  nlohmann::json change;
  nlohmann::json directions = nlohmann::json::object();
  for (int l = 1; l < m.n_layers; ++l) directions[std::to_string(l)] = std::vector<float>(m.n_embd, 0.125f);
  auto must = [](const std::optional<server::ApiError>& e, const char* what) {
    if (e) die(std::string(what) + ": " + e->message);
  };
  must(g->put_vector("v", {{"directions", directions}}, &change), "vector");
  must(g->put_preset("p", nlohmann::json::parse(R"({"interventions": [{"op": "scale", "point": "mlp_act", "layer": 2,
                                                             "dims": [5], "strength": 0.5}]})"),
                     &change),
       "preset");
  must(g->put_session("s", nlohmann::json::parse(R"({"interventions": [{"op": "add", "point": "resid_post", "layer": 1,
                                                              "vector": "v", "strength": 2}]})"),
                      &change),
       "session s");
  must(g->put_session("locked", nlohmann::json::parse(R"({"interventions": [{"preset": "p"}], "roles": ["admin"]})"),
                      &change),
       "session locked");
  must(g->put_default(nlohmann::json::parse(R"({"interventions": [{"op": "ablate", "point": "resid_post", "layer": 3,
                                                                    "vector": "v", "strength": 1}]})"),
                      &change),
       "default set");
  return g;
}

}  // namespace gb::fuzz

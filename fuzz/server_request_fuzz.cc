// libFuzzer target: a whole /v1/completions or /v1/chat/completions body (chat when it has
// "messages"), through what admission runs on it: parse_json_body (nesting limit, UTF-8),
// parse_request (every OpenAI field, tokenizing the prompt or rendering the chat template with
// the stories260K tokenizer; `model` may also name a variant or a canary route, whose arm is
// picked by `user` as admission picks it), then GlassService::resolve on its `glassbox` extension with the
// session header and caller role picked by the input's length (a user, researcher or admin key;
// no session, the open one, the restricted one, an unknown one), against a library vector, a
// preset, two sessions and a default set. What an answer would carry is built too: the error
// body, or the audit row's spec, a streamed decode of a few ids, the choice's glass-box report
// and the response JSON. Nothing may crash, hang or recurse without bound.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "glass/accumulator.h"
#include "server/openai_response.h"
#include "server/routing.h"
#include "server_world.h"

namespace {

using gb::server::ApiError;
using json = nlohmann::json;

struct World {
  std::string dir = gb::fuzz::model_dir();
  gb::ModelConfig model = gb::fuzz::load_model_config(dir);
  std::unique_ptr<gb::server::TextCodec> codec = gb::fuzz::load_codec(dir);
  gb::server::ServerConfig cfg = gb::fuzz::fuzz_server_config();
  std::unique_ptr<gb::server::GlassService> glass = gb::fuzz::make_glass(cfg, model);
};

void touch(const ApiError& e) { (void)gb::server::error_body(e).dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const World w;
  if (size > 256 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  json body;
  if (auto e = gb::server::parse_json_body(text, &body)) return touch(*e), 0;
  const auto endpoint =
      body.is_object() && body.contains("messages") ? gb::server::Endpoint::kChat : gb::server::Endpoint::kCompletions;
  gb::server::RequestLimits limits;
  limits.served_model_name = w.cfg.served_model_name;
  limits.max_model_len = w.model.max_pos;
  limits.max_n = static_cast<int32_t>(w.cfg.max_n);
  limits.max_stop = static_cast<int32_t>(w.cfg.max_stop);
  limits.max_logprobs = static_cast<int32_t>(w.cfg.max_logprobs);
  limits.other_models = {"lora", "canary"};
  gb::server::ParsedRequest req;
  if (auto e = gb::server::parse_request(endpoint, body, limits, *w.codec, &req)) return touch(*e), 0;
  if (req.model == "canary") {
    static const std::vector<gb::server::RouteArm> arms = {{"stories260K", 90}, {"lora", 10}};
    req.model = arms[gb::server::pick_arm(arms, "canary", req.user, size)].model;
  }

  const json* ext = body.is_object() && body.contains("glassbox") ? &body["glassbox"] : nullptr;
  static const char* kSessions[] = {"", "s", "locked", "nope"};
  const std::string session = kSessions[(size / 3) % 4];
  const gb::server::Caller caller{"k", static_cast<gb::server::Role>(size % 3), 0};
  const int64_t n_sequences = static_cast<int64_t>(req.prompts.size()) * req.n;
  gb::server::GlassRequest g;
  if (auto e = w.glass->resolve(ext, session, caller, n_sequences, &g)) return touch(*e), 0;

  (void)g.audit_spec.dump(-1, ' ', false, json::error_handler_t::replace);
  gb::server::ResponseMeta meta{endpoint, "cmpl-fuzz", 0, req.model};
  std::vector<gb::server::ChoiceOut> choices;
  for (size_t p = 0; p < req.prompts.size() && p < 4; ++p) {
    const std::vector<int32_t>& prompt = req.prompts[p].tokens;
    auto detok = w.codec->stream(prompt);
    gb::server::ChoiceOut c;
    c.index = static_cast<int32_t>(p);
    // The prompt's own ids as the "generated" ones: real ids, in an order the tokenizer made.
    for (size_t i = 0; i < prompt.size() && i < 16; ++i) {
      (void)detok->peek(prompt[i]);
      c.text += detok->push(prompt[i]);
    }
    c.text += detok->flush();
    c.finish_reason = "length";
    if (g.spec != nullptr) {
      gb::GlassAccumulator acc(g.spec, w.model);
      gb::RepetitionTracker rep(g.stop_on_repetition ? g.stop_on_repetition->ngram : 4,
                                g.stop_on_repetition ? g.stop_on_repetition->window : 64);
      for (int32_t id : prompt) rep.push(id);
      c.glassbox = gb::server::glass_choice_json(acc.report(), g, rep, g.stop_on_repetition.has_value());
    }
    (void)gb::server::stream_chunk(meta, c.index, true, c.text, nullptr, "", req.include_usage)
        .dump(-1, ' ', false, json::error_handler_t::replace);
    choices.push_back(std::move(c));
  }
  (void)gb::server::full_response(meta, choices, {1, 1, 0}).dump(-1, ' ', false, json::error_handler_t::replace);
  return 0;
}

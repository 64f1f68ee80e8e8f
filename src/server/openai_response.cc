// Builders for OpenAI's response JSON and SSE framing.
#include "server/openai_response.h"

namespace gb::server {

using json = nlohmann::json;

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::string sse_data(const json& payload) {
  // dump() escapes newlines inside strings, so one event is always one "data:" line.
  return "data: " + payload.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt},
          {"completion_tokens", u.completion},
          {"total_tokens", u.prompt + u.completion},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt}}}};
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Token strings can be partial UTF-8 (byte-fallback tokens); JSON needs valid UTF-8, so the
// text is made valid and the exact bytes go in "bytes" (chat) as OpenAI does.
std::string valid_utf8(const std::string& s) {
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

}  // namespace

json logprobs_json(Endpoint endpoint, const std::vector<GeneratedToken>& tokens, const TextCodec& codec,
                   int64_t* text_offset) {
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const GeneratedToken& t : tokens) {
      const std::string raw = codec.token_text(t.token);
      json top = json::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string alt_raw = codec.token_text(alt.token);
        top.push_back({{"token", valid_utf8(alt_raw)}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt_raw)}});
      }
      content.push_back(
          {{"token", valid_utf8(raw)}, {"logprob", t.logprob}, {"bytes", bytes_of(raw)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const GeneratedToken& t : tokens) {
    const std::string text = valid_utf8(codec.token_text(t.token));
    toks.push_back(text);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[valid_utf8(codec.token_text(alt.token))] = alt.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(text.size());
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json full_response(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const Usage& usage) {
  json out_choices = json::array();
  for (const ChoiceOut& c : choices) {
    if (meta.endpoint == Endpoint::kChat) {
      out_choices.push_back({{"index", c.index},
                             {"message", {{"role", "assistant"}, {"content", c.text}}},
                             {"logprobs", c.logprobs},
                             {"finish_reason", c.finish_reason}});
    } else {
      out_choices.push_back(
          {{"index", c.index}, {"text", c.text}, {"logprobs", c.logprobs}, {"finish_reason", c.finish_reason}});
    }
    if (!c.glassbox.is_null()) out_choices.back()["glassbox"] = c.glassbox;
  }
  return {{"id", meta.id},
          {"object", meta.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", out_choices},
          {"usage", usage_json(usage)}};
}

json stream_chunk(const ResponseMeta& meta, int32_t index, bool first, const std::string& text, const json& logprobs,
                  const std::string& finish_reason, bool include_usage) {
  json choice = {{"index", index}};
  if (meta.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  json chunk = {{"id", meta.id},
                {"object", meta.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({choice})}};
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  return {{"id", meta.id},
          {"object", meta.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array()},
          {"usage", usage_json(usage)}};
}

}  // namespace gb::server

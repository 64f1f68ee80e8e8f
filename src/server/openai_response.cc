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

// Characters (code points) of valid UTF-8 text: the bytes that do not continue a character.
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string valid_utf8(const std::string& s) {
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

json logprobs_json(Endpoint endpoint, const std::vector<GeneratedToken>& tokens, const std::vector<TokenText>& texts,
                   int64_t* text_offset, bool token_ids) {
  static const TokenText kNone;
  auto text_of = [&](size_t i) -> const TokenText& { return i < texts.size() ? texts[i] : kNone; };
  auto id_text = [](int32_t id) { return "token_id:" + std::to_string(id); };
  auto alt_text = [&](const TokenText& tt, const GeneratedToken& t, size_t k) {
    if (token_ids) return id_text(t.top[k].token);
    return k < tt.top.size() ? valid_utf8(tt.top[k]) : std::string();
  };
  auto token_text = [&](const TokenText& tt, const GeneratedToken& t) {
    return token_ids ? id_text(t.token) : valid_utf8(tt.text);
  };
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (size_t i = 0; i < tokens.size(); ++i) {
      const GeneratedToken& t = tokens[i];
      const TokenText& tt = text_of(i);
      json top = json::array();
      for (size_t k = 0; k < t.top.size(); ++k) {
        const std::string alt = alt_text(tt, t, k);
        top.push_back({{"token", alt}, {"logprob", t.top[k].logprob}, {"bytes", bytes_of(alt)}});
      }
      const std::string text = token_text(tt, t);
      content.push_back({{"token", text}, {"logprob", t.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const GeneratedToken& t = tokens[i];
    const TokenText& tt = text_of(i);
    toks.push_back(token_text(tt, t));
    lps.push_back(t.logprob);
    json top = json::object();
    for (size_t k = 0; k < t.top.size(); ++k) top[alt_text(tt, t, k)] = t.top[k].logprob;
    tops.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += code_points(valid_utf8(tt.text));
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
    if (!c.prompt_logprobs.is_null()) out_choices.back()["prompt_logprobs"] = c.prompt_logprobs;
  }
  return {
      {"id", meta.id},           {"object", meta.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
      {"created", meta.created}, {"model", meta.model},
      {"choices", out_choices},  {"usage", usage_json(usage)}};
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

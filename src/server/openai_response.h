// OpenAI response shapes: full responses, SSE chunks, logprobs, usage and errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/openai_request.h"
#include "server/text_stream.h"

namespace gb::server {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// {"error": {"message", "type", "param", "code"}}; empty param / code are null.
nlohmann::json error_body(const ApiError& e);

// JSON needs valid UTF-8. A token's text is whole characters (the detokenizer holds a split
// character back), but an alternative's may end mid-character; bad bytes become U+FFFD.
std::string valid_utf8(const std::string& s);

// One server-sent event: "data: <json>\n\n".
std::string sse_data(const nlohmann::json& payload);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// Logprobs of some tokens in the endpoint's shape, each token as the text it put into the
// choice's text (texts[i] for tokens[i], from ChoiceText). Completions: {tokens, token_logprobs,
// top_logprobs, text_offset}, offsets in characters (code points, as OpenAI and vLLM count)
// continuing from *text_offset; chat: {content: [...]}, "bytes" the UTF-8 of each token's text.
// token_ids (vLLM's return_tokens_as_token_ids): each token and alternative is "token_id:N"
// instead of its text (offsets still count the text).
nlohmann::json logprobs_json(Endpoint endpoint, const std::vector<GeneratedToken>& tokens,
                             const std::vector<TokenText>& texts, int64_t* text_offset, bool token_ids = false);

struct ChoiceOut {
  int32_t index = 0;
  std::string text;
  nlohmann::json logprobs;  // null when not requested
  std::string finish_reason;
  nlohmann::json glassbox = nullptr;         // the choice's glass-box report; null: omitted
  nlohmann::json prompt_logprobs = nullptr;  // vLLM's prompt_logprobs; null: omitted
};

// Token counts of a response. cached_prompt: prompt tokens served from the prefix cache
// (OpenAI's usage.prompt_tokens_details.cached_tokens).
struct Usage {
  int64_t prompt = 0;
  int64_t completion = 0;
  int64_t cached_prompt = 0;
};

// The non-streaming response: text_completion or chat.completion.
nlohmann::json full_response(const ResponseMeta& meta, const std::vector<ChoiceOut>& choices, const Usage& usage);

// A streaming chunk for one choice. Chat: the first chunk of a choice carries role
// "assistant" (first = true); finish_reason empty means null. include_usage adds "usage": null.
nlohmann::json stream_chunk(const ResponseMeta& meta, int32_t index, bool first, const std::string& text,
                            const nlohmann::json& logprobs, const std::string& finish_reason, bool include_usage);

// The last chunk with include_usage: empty choices and the usage.
nlohmann::json usage_chunk(const ResponseMeta& meta, const Usage& usage);

}  // namespace gb::server

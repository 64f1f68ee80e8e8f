// OpenAI request bodies -> validated, tokenized generation requests, and the API's error
// type. Every field is checked here; a bad one is a 400 naming it in `param` and the message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "server/text_codec.h"

namespace gb::server {

// An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;      // empty: null
  std::string code;       // empty: null
  int retry_after_s = 0;  // > 0: sent as Retry-After (429, 503)
};

ApiError invalid_field(const std::string& param, const std::string& message);

enum class Endpoint { kCompletions, kChat };

struct RequestLimits {
  std::string served_model_name;
  std::vector<std::string> other_models;  // weight variants and route aliases `model` may also name
  int32_t max_model_len = 0;
  int32_t max_n = 16;
  int32_t max_stop = 16;
  int32_t max_logprobs = 20;
};

// One prompt of the request; n choices are generated from each.
struct ParsedPrompt {
  std::vector<int32_t> tokens;
  std::string text;    // the text that was tokenized (chat: the rendered template); for log_prompts
  int32_t max_tokens;  // resolved: the request's, or what is left of the context
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<ParsedPrompt> prompts;
  int32_t n = 1;
  SamplingParams sampling;  // seed applies to choice 0; choice i gets seed + i
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int32_t top_logprobs = -1;                // -1: no logprobs; else alternatives per token
  bool echo = false;                        // completions: the answer's text (and logprobs) start with the prompt
  bool return_tokens_as_token_ids = false;  // vLLM: logprobs name tokens "token_id:N", not by text
  int32_t prompt_logprobs = -1;             // vLLM's prompt_logprobs: -1 none; else alternatives per prompt token
  bool stream = false;
  bool include_usage = false;
  std::string user;
};

// The most prompts one completions request may carry (each becomes n engine requests).
inline constexpr size_t kMaxPrompts = 256;

// Parses and validates a request body, tokenizes its prompt(s) (rendering the chat template
// for chat) and checks prompt + max_tokens against the context. Returns the error to answer,
// or nullopt with *out filled.
std::optional<ApiError> parse_request(Endpoint endpoint, const nlohmann::json& body, const RequestLimits& limits,
                                      const TextCodec& codec, ParsedRequest* out);

}  // namespace gb::server

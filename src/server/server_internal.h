// Small helpers shared by the server's parts (routes, admission, generation, streaming, admin).
// Internal to gb_server.
#pragma once

#include <chrono>
#include <string>

#include "engine/request.h"
#include "server/openai_request.h"

namespace gb::server {

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline std::chrono::microseconds to_micros(double seconds) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(seconds));
}

inline const char* endpoint_path(Endpoint e) {
  return e == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

inline ApiError make_error(int status, const std::string& type, const std::string& code, const std::string& message) {
  ApiError e;
  e.status = status;
  e.type = type;
  e.code = code;
  e.message = message;
  return e;
}

// The answer to an engine failure or refusal, by its code (never by its message).
inline ApiError engine_error(EngineErrorCode code, const std::string& message) {
  const std::string why = message.empty() ? std::string("unknown error") : message;
  switch (code) {
    case EngineErrorCode::kDraining:
      return make_error(503, "service_unavailable", "draining",
                        "the server is shutting down; retry on another replica");
    case EngineErrorCode::kCancelled:
      return make_error(503, "service_unavailable", "cancelled", "the engine cancelled the request");
    case EngineErrorCode::kNonFinite:
      return make_error(500, "server_error", "non_finite_activations",
                        "the model's activations became non-finite (NaN or Inf), so no output can be trusted: " + why);
    case EngineErrorCode::kInvalidRequest: return invalid_field("", "the engine refused the request: " + why);
    case EngineErrorCode::kQueueFull: {
      ApiError e = make_error(429, "rate_limit_error", "queue_full", "the engine refused the request: " + why);
      e.retry_after_s = 1;
      return e;
    }
    case EngineErrorCode::kTimeout:
      return make_error(504, "timeout_error", "request_timeout", "the request did not finish in time: " + why);
    case EngineErrorCode::kNone:
    case EngineErrorCode::kInternal: break;
  }
  return make_error(500, "server_error", "generation_failed", "generation failed: " + why);
}

}  // namespace gb::server

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

inline const char* endpoint_path(Endpoint e) { return e == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions"; }

inline ApiError make_error(int status, const std::string& type, const std::string& code, const std::string& message) {
  ApiError e;
  e.status = status;
  e.type = type;
  e.code = code;
  e.message = message;
  return e;
}

}  // namespace gb::server

// Untrusted JSON input: request bodies parsed with a nesting limit (deeper input would make every
// later recursive walk — copy, dump, a spec parser — a stack overflow), integers read with a range
// check (never a silent narrowing), and bounded quotes of client text for error messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace gb::server {

// The deepest nesting a request body may have (objects and arrays; the top level is 1).
inline constexpr int kMaxJsonDepth = 64;

// Parses a request body. Errors are a 400 that names the problem and its byte offset but never
// quotes the body: not valid JSON (or not UTF-8), a number beyond a double, or nested deeper than
// kMaxJsonDepth.
std::optional<ApiError> parse_json_body(std::string_view body, nlohmann::json* out);

// *out = v when v is an integer (or an integral float, as from a client that only has doubles)
// in [lo, hi]; false otherwise (a float with a fraction, a string, out of range, beyond 64 bits).
bool json_integer(const nlohmann::json& v, int64_t lo, int64_t hi, int64_t* out);

// Client text for an error message: in single quotes, at most max_bytes of it (cut at a UTF-8
// character boundary, then "..."), invalid UTF-8 replaced, so a message stays short and valid.
std::string quote_input(std::string_view text, size_t max_bytes = 100);

}  // namespace gb::server

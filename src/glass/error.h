// The glass box's request errors: which field is at fault and why, and whether it is a bound the
// admin set (403) or an invalid request (400). The server turns them into its HTTP errors.
#pragma once

#include <string>

namespace gb {

struct GlassError {
  bool forbidden = false;  // true: outside what the policy allows (403); false: invalid (400)
  std::string code;        // e.g. "cap_exceeded", "layer_not_allowed"; empty: none
  std::string param;       // the field at fault, as the request spells it (may be empty)
  std::string message;     // names the field; never echoes unbounded input
};

inline GlassError glass_invalid(std::string param, std::string message, std::string code = {}) {
  return {false, std::move(code), std::move(param), std::move(message)};
}
inline GlassError glass_forbidden(std::string code, std::string message) {
  return {true, std::move(code), {}, std::move(message)};
}

}  // namespace gb

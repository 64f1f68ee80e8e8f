#include "server/routing.h"

#include <cmath>

#include "server/config.h"
#include "server/json_input.h"

namespace gb::server {

namespace {

// FNV-1a, then splitmix64's finalizer so that nearby keys spread over the whole range.
uint64_t hash_key(std::string_view route, std::string_view key) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  mix(route);
  h = (h ^ 0xffu) * 1099511628211ull;  // a separator no UTF-8 text contains
  mix(key);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace

size_t pick_arm(const std::vector<RouteArm>& arms, std::string_view route, std::string_view key, uint64_t random) {
  double total = 0;
  for (const RouteArm& a : arms) total += a.weight;
  const uint64_t h = key.empty() ? random : hash_key(route, key);
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53 * total;  // [0, total)
  double cum = 0;
  for (size_t i = 0; i < arms.size(); ++i) {
    cum += arms[i].weight;
    if (u < cum) return i;
  }
  return arms.size() - 1;
}

std::optional<ApiError> parse_variant_load_body(std::string_view text, VariantLoadBody* out) {
  nlohmann::json body;
  if (std::optional<ApiError> e = parse_json_body(text, &body)) return e;
  if (!body.is_object()) return invalid_field("", "expected an object {path, sha256?, scale?}");
  VariantLoadBody v;
  for (const auto& [k, val] : body.items()) {
    if (k == "path" && val.is_string()) v.path = val.get<std::string>();
    else if (k == "sha256" && val.is_string()) v.sha256 = val.get<std::string>();
    else if (k == "scale" && val.is_number() && std::isfinite(val.get<double>())) v.scale = val.get<double>();
    else
      return invalid_field(
          k, "unknown or mistyped field " + quote_input(k) + " (expected path: string, sha256: string, scale: number)");
  }
  if (v.path.empty()) return invalid_field("path", "path: required (a patch, PEFT adapter, LoRA GGUF or checkpoint)");
  *out = std::move(v);
  return std::nullopt;
}

std::optional<ApiError> parse_route_body(std::string_view text, std::vector<RouteArm>* arms) {
  nlohmann::json body;
  if (std::optional<ApiError> e = parse_json_body(text, &body)) return e;
  if (!body.is_object() || !body.contains("arms") || body.size() != 1)
    return invalid_field("", "expected an object {arms: [{variant: NAME, weight: W}, ...]}");
  if (Status st = parse_route_arms(body["arms"], "arms", arms); !st.is_ok()) return invalid_field("arms", st.message());
  return std::nullopt;
}

std::optional<ApiError> parse_shadow_body(std::string_view text, ShadowConfig* out) {
  nlohmann::json body;
  if (std::optional<ApiError> e = parse_json_body(text, &body)) return e;
  if (Status st = parse_shadow_target(body, "shadow", out); !st.is_ok()) return invalid_field("", st.message());
  return std::nullopt;
}

}  // namespace gb::server

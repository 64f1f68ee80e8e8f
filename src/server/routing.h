// Canary routes (issue 12.3): `model: ALIAS` is split between served models by weight, sticky per
// client (the request's `user`, else its session header): the same key always lands on the same
// arm while the route stays as it is. A request with neither key is placed at random.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"

namespace gb::server {

struct RouteArm {
  std::string model;  // a served model: the base (its name, or "base") or a variant
  double weight = 0;  // > 0; shares are weight / the sum
};

// Shadow mode: a share of the requests sent to a model or route also runs on `model`.
struct ShadowConfig {
  std::string model;  // the served model the copies run on ("base": the base)
  double share = 0;   // in (0, 1]: the fraction of requests copied
};

// The bodies of the roll-out admin API (variants_api.cc), parsed and checked for shape (JSON
// nesting, types, ranges, unknown keys); the names in them are checked against the served models
// by the server. PUT /admin/variants/NAME {path, sha256?, scale?}:
struct VariantLoadBody {
  std::string path, sha256;
  double scale = 1.0;
};
std::optional<ApiError> parse_variant_load_body(std::string_view text, VariantLoadBody* out);
// PUT /admin/routes/ALIAS {arms: [{variant, weight}, ...]}
std::optional<ApiError> parse_route_body(std::string_view text, std::vector<RouteArm>* arms);
// PUT /admin/shadow/MODEL {variant, share}
std::optional<ApiError> parse_shadow_body(std::string_view text, ShadowConfig* out);

// The arm `key` lands on (uniform over the weights: a 64-bit hash of route and key, mapped onto
// the cumulative shares); an empty key uses `random` instead. arms must not be empty.
size_t pick_arm(const std::vector<RouteArm>& arms, std::string_view route, std::string_view key, uint64_t random);

}  // namespace gb::server

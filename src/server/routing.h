// Canary routes (issue 12.3): `model: ALIAS` is split between served models by weight, sticky per
// client (the request's `user`, else its session header): the same key always lands on the same
// arm while the route stays as it is. A request with neither key is placed at random.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gb::server {

struct RouteArm {
  std::string model;  // a served model: the base (its name, or "base") or a variant
  double weight = 0;  // > 0; shares are weight / the sum
};

// The arm `key` lands on (uniform over the weights: a 64-bit hash of route and key, mapped onto
// the cumulative shares); an empty key uses `random` instead. arms must not be empty.
size_t pick_arm(const std::vector<RouteArm>& arms, std::string_view route, std::string_view key, uint64_t random);

}  // namespace gb::server

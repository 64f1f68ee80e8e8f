#include "server/routing.h"

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

}  // namespace gb::server

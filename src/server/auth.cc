// Key lookup and token-bucket rate limiting.
#include "server/auth.h"

#include <algorithm>
#include <cmath>

namespace gb::server {

namespace {

// Constant time in the length of `secret` for equal lengths; length differences leak only
// the length.
bool equal_secret(std::string_view a, std::string_view secret) {
  if (a.size() != secret.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ secret[i]);
  return diff == 0;
}

}  // namespace

KeyStore::KeyStore(const ServerConfig& cfg)
    : allow_unauthenticated_(cfg.allow_unauthenticated), default_rpm_(cfg.rate_limit_rpm) {
  for (const KeyConfig& k : cfg.keys) {
    entries_.push_back({k.key, Caller{k.id, k.role, k.rate_limit_rpm >= 0 ? k.rate_limit_rpm : cfg.rate_limit_rpm}});
  }
  if (!cfg.api_key.empty()) entries_.push_back({cfg.api_key, Caller{"cli", Role::kAdmin, cfg.rate_limit_rpm}});
}

AuthResult KeyStore::authenticate(std::string_view authorization, Caller* caller) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.empty()) {
    if (!allow_unauthenticated_) return AuthResult::kMissing;
    *caller = Caller{"anonymous", Role::kUser, default_rpm_};
    return AuthResult::kOk;
  }
  if (authorization.size() <= kBearer.size() || authorization.substr(0, kBearer.size()) != kBearer)
    return AuthResult::kInvalid;
  std::string_view key = authorization.substr(kBearer.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    if (equal_secret(key, e.key)) found = &e;
  }
  if (found == nullptr) return AuthResult::kInvalid;
  *caller = found->caller;
  return AuthResult::kOk;
}

bool RateLimiter::try_acquire(const std::string& key_id, double rpm, TimePoint now, int* retry_after_s) {
  if (rpm <= 0) return true;
  const double capacity = burst_ > 0 ? static_cast<double>(burst_) : std::max(1.0, std::floor(rpm / 6.0));
  const double per_second = rpm / 60.0;
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = buckets_.try_emplace(key_id, Bucket{capacity, now});
  Bucket& b = it->second;
  const double elapsed = std::chrono::duration<double>(now - b.last).count();
  if (elapsed > 0) {
    b.tokens = std::min(capacity, b.tokens + elapsed * per_second);
    b.last = now;
  }
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return true;
  }
  *retry_after_s = std::max(1, static_cast<int>(std::ceil((1.0 - b.tokens) / per_second)));
  return false;
}

}  // namespace gb::server

// API keys, roles and per-key rate limits: who is calling and whether they may, decided
// before a request touches the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/config.h"

namespace gb::server {

struct Caller {
  std::string key_id;  // "anonymous" when unauthenticated
  Role role = Role::kUser;
  double rate_limit_rpm = 0;  // 0: unlimited
};

enum class AuthResult { kOk, kMissing, kInvalid };

class KeyStore {
 public:
  explicit KeyStore(const ServerConfig& cfg);
  // header: the Authorization header value (may be empty). Compares against every key in
  // constant time per key so the answer's timing does not reveal a key's prefix.
  AuthResult authenticate(std::string_view authorization, Caller* caller) const;

 private:
  struct Entry {
    std::string key;
    Caller caller;
  };
  std::vector<Entry> entries_;
  bool allow_unauthenticated_;
  double default_rpm_;
};

// Token buckets per key id: capacity `burst`, refilled at rpm/60 per second.
class RateLimiter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit RateLimiter(int64_t burst) : burst_(burst) {}
  // True if the request may go; otherwise *retry_after_s says when one token will be back.
  bool try_acquire(const std::string& key_id, double rpm, TimePoint now, int* retry_after_s);

 private:
  struct Bucket {
    double tokens;
    TimePoint last;
  };
  int64_t burst_;  // 0: max(1, rpm / 6)
  std::mutex mutex_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace gb::server

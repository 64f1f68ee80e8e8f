// API keys, roles and the per-key token bucket.
#include <gtest/gtest.h>

#include "server/auth.h"

namespace gb::server {
namespace {

ServerConfig with_keys() {
  ServerConfig cfg;
  cfg.keys = {{"alice", "sk-alice", "", Role::kUser, -1}, {"rita", "sk-rita", "", Role::kResearcher, 5}};
  cfg.api_key = "sk-root";
  cfg.rate_limit_rpm = 60;
  return cfg;
}

TEST(AuthTest, BearerKeysMapToIdsAndRoles) {
  KeyStore keys(with_keys());
  Caller c;
  ASSERT_EQ(keys.authenticate("Bearer sk-alice", &c), AuthResult::kOk);
  EXPECT_EQ(c.key_id, "alice");
  EXPECT_EQ(c.role, Role::kUser);
  EXPECT_EQ(c.rate_limit_rpm, 60);
  ASSERT_EQ(keys.authenticate("Bearer sk-rita", &c), AuthResult::kOk);
  EXPECT_EQ(c.role, Role::kResearcher);
  EXPECT_EQ(c.rate_limit_rpm, 5);
  ASSERT_EQ(keys.authenticate("Bearer sk-root", &c), AuthResult::kOk);
  EXPECT_EQ(c.key_id, "cli");
  EXPECT_EQ(c.role, Role::kAdmin);
}

TEST(AuthTest, MissingAndBadKeys) {
  KeyStore keys(with_keys());
  Caller c;
  EXPECT_EQ(keys.authenticate("", &c), AuthResult::kMissing);
  EXPECT_EQ(keys.authenticate("Bearer sk-alic", &c), AuthResult::kInvalid);
  EXPECT_EQ(keys.authenticate("Bearer sk-alicee", &c), AuthResult::kInvalid);
  EXPECT_EQ(keys.authenticate("Basic sk-alice", &c), AuthResult::kInvalid);
  EXPECT_EQ(keys.authenticate("Bearer ", &c), AuthResult::kInvalid);
}

TEST(AuthTest, UnauthenticatedOnlyWhenAllowed) {
  ServerConfig cfg;
  cfg.allow_unauthenticated = true;
  KeyStore keys(cfg);
  Caller c;
  ASSERT_EQ(keys.authenticate("", &c), AuthResult::kOk);
  EXPECT_EQ(c.key_id, "anonymous");
  EXPECT_EQ(c.role, Role::kUser);
  // A key that is present but wrong is still refused.
  EXPECT_EQ(keys.authenticate("Bearer nope", &c), AuthResult::kInvalid);
}

TEST(RateLimiterTest, TokenBucketRefillsAtTheRate) {
  RateLimiter limiter(/*burst=*/2);
  const auto t0 = std::chrono::steady_clock::now();
  int retry = 0;
  EXPECT_TRUE(limiter.try_acquire("a", 60, t0, &retry));
  EXPECT_TRUE(limiter.try_acquire("a", 60, t0, &retry));
  EXPECT_FALSE(limiter.try_acquire("a", 60, t0, &retry));
  EXPECT_EQ(retry, 1);                                    // one token per second at 60 rpm
  EXPECT_TRUE(limiter.try_acquire("b", 60, t0, &retry));  // buckets are per key
  EXPECT_FALSE(limiter.try_acquire("a", 60, t0 + std::chrono::milliseconds(500), &retry));
  EXPECT_TRUE(limiter.try_acquire("a", 60, t0 + std::chrono::milliseconds(1001), &retry));
  EXPECT_TRUE(limiter.try_acquire("a", 0, t0, &retry));  // 0: unlimited
}

TEST(RateLimiterTest, DefaultBurstIsTenSecondsWorth) {
  RateLimiter limiter(0);
  const auto t0 = std::chrono::steady_clock::now();
  int retry = 0, allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += limiter.try_acquire("k", 6, t0, &retry) ? 1 : 0;
  EXPECT_EQ(allowed, 1);  // max(1, 6 / 6)
  EXPECT_EQ(retry, 10);
}

}  // namespace
}  // namespace gb::server

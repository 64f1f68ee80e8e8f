// Canary routes: the arm a key lands on is sticky, the shares follow the weights, and the config
// names every arm it splits over.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "server/config.h"
#include "server/routing.h"

namespace gb::server {
namespace {

TEST(Routing, ArmsFollowTheWeightsAndStickToTheKey) {
  const std::vector<RouteArm> arms = {{"base", 90}, {"loopfix", 10}};
  std::map<size_t, int> counts;
  constexpr int kUsers = 100000;
  for (int i = 0; i < kUsers; ++i) {
    const std::string user = "user-" + std::to_string(i);
    const size_t arm = pick_arm(arms, "canary", user, 0);
    ++counts[arm];
    EXPECT_EQ(pick_arm(arms, "canary", user, 12345), arm) << user;  // the random draw is not used with a key
  }
  // Binomial(100000, 0.1): sd ≈ 95; 5 sd either side.
  EXPECT_NEAR(counts[1], 10000, 475) << counts[1];
  // Another route with the same arms places users independently of this one.
  int same = 0;
  for (int i = 0; i < 10000; ++i) {
    const std::string user = "user-" + std::to_string(i);
    same += pick_arm(arms, "canary", user, 0) == 1 && pick_arm(arms, "other", user, 0) == 1;
  }
  EXPECT_NEAR(same, 100, 60);  // 10000 · 0.1 · 0.1
  // No key: the random draw decides, over its whole range.
  EXPECT_EQ(pick_arm(arms, "canary", "", 0), 0u);
  EXPECT_EQ(pick_arm(arms, "canary", "", ~uint64_t{0}), 1u);
  EXPECT_EQ(pick_arm({{"only", 1}}, "r", "k", 0), 0u);
}

TEST(Routing, ConfigNamesEveryArm) {
  auto load = [](const std::string& routes) {
    ServerConfig cfg;
    Status st = apply_yaml("model: /m/qwen3\napi_key: k\nvariants: [{name: fix, path: /p}]\n" + routes, &cfg);
    if (st.is_ok()) st = validate_config([](const std::string&) { return std::nullopt; }, &cfg);
    return std::make_pair(st, cfg);
  };
  auto [ok, cfg] = load("routes:\n  canary: [{variant: base, weight: 90}, {variant: fix, weight: 10}]\n");
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  ASSERT_EQ(cfg.routes.at("canary").size(), 2u);
  EXPECT_EQ(cfg.routes.at("canary")[0].model, "qwen3") << "'base' is the base model";
  EXPECT_EQ(cfg.routes.at("canary")[1].weight, 10);
  EXPECT_EQ(config_to_json(cfg)["routes"]["canary"][1]["variant"], "fix");
  auto error = [&](const std::string& routes) {
    auto [st, c] = load(routes);
    return st.is_ok() ? std::string("ok") : st.message();
  };
  EXPECT_NE(error("routes: {c: [{variant: nope, weight: 1}]}").find("arm 'nope' is neither the base"),
            std::string::npos);
  EXPECT_NE(error("routes: {fix: [{variant: base, weight: 1}]}").find("already a served model"), std::string::npos);
  EXPECT_NE(error("routes: {c: [{variant: base, weight: 0}]}").find("weight"), std::string::npos);
  EXPECT_NE(error("routes: {c: []}").find("expected a list of 1 to 16 arms"), std::string::npos);
  EXPECT_NE(error("routes: {c: [{variant: base, weight: 1, sticky: no}]}").find("unknown key"), std::string::npos);
  EXPECT_NE(error("routes: [a]").find("expected a map"), std::string::npos);
  // Shadow copies: from a served model or route, onto the base or a variant, a share in (0, 1].
  auto [shadow_ok, with_shadow] = load("shadow: {qwen3: {variant: fix, share: 0.25}}\n");
  ASSERT_TRUE(shadow_ok.is_ok()) << shadow_ok.message();
  EXPECT_EQ(with_shadow.shadow.at("qwen3").model, "fix");
  EXPECT_EQ(with_shadow.shadow.at("qwen3").share, 0.25);
  EXPECT_EQ(config_to_json(with_shadow)["shadow"]["qwen3"]["share"], 0.25);
  EXPECT_NE(error("shadow: {nope: {variant: fix, share: 1}}").find("not a served model or route"), std::string::npos);
  EXPECT_NE(error("shadow: {fix: {variant: nope, share: 1}}").find("neither the base nor a variant"),
            std::string::npos);
  EXPECT_NE(error("shadow: {fix: {variant: base, share: 2}}").find("share"), std::string::npos);
  EXPECT_EQ(error("shadow: {fix: {variant: base, share: 1}}"), "ok");
}

}  // namespace
}  // namespace gb::server

// Sampling: greedy ties, seeds, truncation rules, penalties and bias against hand-computed values.
#include <gtest/gtest.h>

#include "ops/argmax.h"

#include <cmath>
#include <set>
#include <vector>

#include "engine/sampler.h"

namespace gb {
namespace {

std::vector<float> logits_of_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double v : p) l.push_back(static_cast<float>(std::log(v)));
  return l;
}

TEST(Sampler, GreedyPicksLowestIdOnTies) {
  EXPECT_EQ(ops::argmax(std::vector<float>{1, 3, 3, 2}), 1);
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, 4);
  std::vector<float> l{0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(l.data()), 1);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  auto run = [](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.has_seed = true;
    Sampler s(p, 64);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l(64, 0.0f);  // uniform: every draw is pure randomness
      out.push_back(s.sample(l.data()));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  SamplingParams p;
  p.seed = 1;
  p.has_seed = true;
  Sampler s(p, 3);
  const std::vector<double> probs{0.2, 0.3, 0.5};
  std::vector<int> counts(3, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto l = logits_of_probs(probs);
    ++counts[s.sample(l.data())];
  }
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(counts[i] / double(n), probs[i], 0.015) << i;
}

TEST(Sampler, TemperatureSharpens) {
  SamplingParams p;
  p.temperature = 0.5f;  // p^(1/T) renormalised: 0.2^2 : 0.8^2 = 1 : 16
  p.seed = 3;
  p.has_seed = true;
  Sampler s(p, 2);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto l = logits_of_probs({0.2, 0.8});
    ones += s.sample(l.data());
  }
  EXPECT_NEAR(ones / double(n), 16.0 / 17.0, 0.01);
}

TEST(Sampler, TopKTopPMinPTruncate) {
  const std::vector<double> probs{0.05, 0.4, 0.1, 0.3, 0.15};
  auto draw_set = [&](SamplingParams p) {
    p.seed = 11;
    p.has_seed = true;
    Sampler s(p, 5);
    std::set<int32_t> seen;
    for (int i = 0; i < 3000; ++i) {
      auto l = logits_of_probs(probs);
      seen.insert(s.sample(l.data()));
    }
    return seen;
  };
  SamplingParams k;
  k.top_k = 2;
  EXPECT_EQ(draw_set(k), (std::set<int32_t>{1, 3}));
  SamplingParams tp;
  tp.top_p = 0.8f;  // 0.4 + 0.3 = 0.7 < 0.8, + 0.15 = 0.85 >= 0.8
  EXPECT_EQ(draw_set(tp), (std::set<int32_t>{1, 3, 4}));
  SamplingParams mp;
  mp.min_p = 0.5f;  // p >= 0.2
  EXPECT_EQ(draw_set(mp), (std::set<int32_t>{1, 3}));
  SamplingParams one;
  one.top_k = 1;
  one.temperature = 5.0f;
  EXPECT_EQ(draw_set(one), (std::set<int32_t>{1}));
}

TEST(Sampler, TopPOverLargeVocabularyFallsBackToFullSort) {
  // A flat distribution over 4096 tokens: the nucleus for top_p = 0.9 needs ~3687 tokens,
  // far more than the 256-candidate fast path holds.
  SamplingParams p;
  p.top_p = 0.9f;
  p.seed = 5;
  p.has_seed = true;
  Sampler s(p, 4096);
  std::set<int32_t> seen;
  for (int i = 0; i < 4000; ++i) {
    std::vector<float> l(4096, 0.0f);
    seen.insert(s.sample(l.data()));
  }
  EXPECT_GT(seen.size(), 1500u);
}

TEST(Sampler, PenaltiesAndBias) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{3, 10.0f}};
  Sampler s(p, 5);
  const std::vector<int32_t> prompt{0, 1};
  s.set_prompt(prompt);
  s.accept(2);
  s.accept(2);
  std::vector<float> l{4.0f, -1.0f, 3.0f, -20.0f, 1.0f};
  s.sample(l.data());
  EXPECT_FLOAT_EQ(l[0], 2.0f);                // prompt token: 4 / 2
  EXPECT_FLOAT_EQ(l[1], -2.0f);               // prompt token, negative: -1 * 2
  EXPECT_FLOAT_EQ(l[2], 1.5f - 0.5f - 0.5f);  // output twice: 3/2 - presence - 2 * frequency
  EXPECT_FLOAT_EQ(l[3], -10.0f);              // bias only
  EXPECT_FLOAT_EQ(l[4], 1.0f);                // untouched
}

TEST(Sampler, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_NE(p.validate(10).message().find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_NE(p.validate(10).message().find("temperature"), std::string::npos);
  p = {};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_NE(p.validate(10).message().find("logit_bias"), std::string::npos);
  p = {};
  EXPECT_TRUE(p.validate(10).is_ok());
}

TEST(Sampler, LogSoftmaxNormalises) {
  std::vector<float> l{1, 2, 3}, out(3);
  log_softmax(l, out);
  double sum = 0;
  for (float v : out) sum += std::exp(v);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR(out[2] - out[1], 1.0f, 1e-6);
}

}  // namespace
}  // namespace gb

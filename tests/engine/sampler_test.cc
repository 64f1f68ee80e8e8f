// Sampling: greedy ties, seeds, truncation rules, penalties and bias against hand-computed values.
#include <gtest/gtest.h>

#include "ops/argmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/sampler.h"
#include "support/test_support.h"

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

// The truncated distribution by its definition: every token with a finite logit as (logit / T,
// id), sorted most likely first (then the lower id); top-k, then min-p, then top-p over the mass
// after top-k; probabilities of what is kept. Plain double arithmetic over a full sort.
std::map<int32_t, double> reference_nucleus(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<std::pair<double, int32_t>> c;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i])) c.emplace_back(static_cast<double>(logits[i] / p.temperature), i);
  }
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) c.resize(p.top_k);
  const double mx = c[0].first;
  double total = 0;
  for (const auto& x : c) total += std::exp(x.first - mx);
  size_t keep = c.size();
  if (p.min_p > 0) {
    size_t k = 0;
    while (k < keep && c[k].first - mx >= std::log(p.min_p)) ++k;
    keep = std::max<size_t>(k, 1);
  }
  if (p.top_p < 1) {
    double cum = 0;
    size_t k = 0;
    while (k < keep) {
      cum += std::exp(c[k].first - mx) / total;
      ++k;
      if (cum >= p.top_p) break;
    }
    keep = k;
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += std::exp(c[i].first - mx);
  std::map<int32_t, double> out;
  for (size_t i = 0; i < keep; ++i) out[c[i].second] = std::exp(c[i].first - mx) / kept;
  return out;
}

// Draws n tokens from one row with a seeded sampler: every token drawn must be in the reference
// nucleus, and every kept token of probability >= 0.01 drawn at its rate (within 5 sigma).
void expect_draws_follow_reference(const std::vector<float>& logits, SamplingParams p, int n, const char* what) {
  SCOPED_TRACE(what);
  const auto want = reference_nucleus(logits, p);
  p.seed = 17;
  p.has_seed = true;
  Sampler s(p, static_cast<int32_t>(logits.size()));
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    const int32_t t = s.sample(l.data());
    ASSERT_TRUE(want.count(t)) << "token " << t << " is outside the nucleus of " << want.size();
    ++counts[t];
  }
  // Each likely token at its rate, and the unlikely ones together at theirs.
  double tail_prob = 0;
  int tail_count = 0;
  for (const auto& [id, prob] : want) {
    if (prob < 0.01) {
      tail_prob += prob;
      tail_count += counts[id];
      continue;
    }
    const double sigma = std::sqrt(prob * (1 - prob) / n);
    EXPECT_NEAR(counts[id] / double(n), prob, 5 * sigma + 1e-9) << "token " << id;
  }
  const double sigma = std::sqrt(tail_prob * (1 - tail_prob) / n);
  EXPECT_NEAR(tail_count / double(n), tail_prob, 5 * sigma + 1e-9) << "the tokens below 1% together";
}

TEST(Sampler, EveryPathDrawsFromTheReferenceNucleus) {
  // A peaked row: a few leading tokens over a Gaussian tail of 3000.
  std::vector<float> peaked = test::random_vec(3000, 23, 1.0f);
  for (int i = 0; i < 6; ++i) peaked[100 + 37 * i] = 6.0f - 0.5f * i;
  SamplingParams p;
  expect_draws_follow_reference(peaked, p, 20000, "temperature only: the whole row");
  p.temperature = 0.7f;
  p.top_k = 3;
  expect_draws_follow_reference(peaked, p, 20000, "top_k by heap");
  p.top_k = 400;  // above kHeapTopK: the sorted copy
  expect_draws_follow_reference(peaked, p, 20000, "top_k by sort");
  p.top_k = 0;
  p.min_p = 0.1f;
  expect_draws_follow_reference(peaked, p, 20000, "min_p");
  p.min_p = 0;
  p.top_p = 0.8f;
  expect_draws_follow_reference(peaked, p, 20000, "top_p, head within 8 nats");
  p.top_k = 5;
  p.min_p = 0.05f;
  expect_draws_follow_reference(peaked, p, 20000, "top_k, min_p and top_p");
  p.top_k = 0;
  expect_draws_follow_reference(peaked, p, 20000, "min_p and top_p");

  // A flat row: 10 tokens at 0 and 4000 spread just below -9 hold 4.7% of the mass together, so
  // top_p = 0.99 ends among them, past the 8-nat head: the binned path, cut inside a bin.
  std::vector<float> flat(4010);
  for (int i = 0; i < 10; ++i) flat[400 * i] = 0.0f;
  for (size_t i = 0, j = 0; i < flat.size(); ++i) {
    if (i % 400 != 0 || i >= 4000) flat[i] = -9.0f - 1e-4f * static_cast<float>(j++ * 7919 % 4000);  // not in id order
  }
  SamplingParams f;
  f.top_p = 0.99f;
  const auto nucleus = reference_nucleus(flat, f);
  ASSERT_GT(nucleus.size(), 1000u);
  ASSERT_LT(nucleus.size(), 4000u);
  expect_draws_follow_reference(flat, f, 4000, "top_p over a flat row");

  // Ties: equal logits are ordered by id, so top_k and top_p keep the lowest ids.
  std::vector<float> ties(50, 1.0f);
  SamplingParams t;
  t.top_k = 4;
  expect_draws_follow_reference(ties, t, 4000, "top_k over ties");
  t.top_k = 0;
  t.top_p = 0.1f;  // 5 of 50
  expect_draws_follow_reference(ties, t, 4000, "top_p over ties");
}

TEST(Sampler, NanAndInfinityAreNeverDrawnAndInfinityWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int path = 0; path < 3; ++path) {
    SamplingParams p;
    if (path == 1) p.top_k = 2;
    if (path == 2) p.top_p = 0.5f;
    Sampler s(p, 4);
    for (int i = 0; i < 200; ++i) {
      std::vector<float> l{nan, 1.0f, -inf, 1.0f};
      const int32_t t = s.sample(l.data());
      EXPECT_TRUE(t == 1 || t == 3) << t;
      std::vector<float> w{0.0f, inf, 2.0f, inf};
      EXPECT_EQ(s.sample(w.data()), 1);  // +inf: the first, as greedy
    }
  }
}

TEST(Sampler, TopLogprobsAreTheLargestInOrder) {
  std::vector<float> l = test::random_vec(5000, 5, 2.0f), lp(l.size());
  l[4999] = l[7] = 30.0f;  // a tie: the lower id first
  log_softmax(l, lp);
  std::vector<TokenLogprob> top;
  top_logprobs(lp, 5, &top);
  std::vector<std::pair<float, int32_t>> want;
  for (size_t i = 0; i < lp.size(); ++i) want.emplace_back(lp[i], static_cast<int32_t>(i));
  std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  ASSERT_EQ(top.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(top[i].token, want[i].second) << i;
    EXPECT_EQ(top[i].logprob, want[i].first) << i;
  }
  EXPECT_EQ(top[0].token, 7);
  EXPECT_EQ(top[1].token, 4999);
  // Against log-softmax in double.
  double mx = *std::max_element(l.begin(), l.end()), sum = 0;
  for (float v : l) sum += std::exp(v - mx);
  for (size_t i = 0; i < l.size(); i += 97) EXPECT_NEAR(lp[i], l[i] - mx - std::log(sum), 1e-5) << i;
}

}  // namespace
}  // namespace gb

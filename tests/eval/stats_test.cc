// The report's statistics against values computed independently: Wilson bounds as the roots of
// the score-test equation (bisection in Python), McNemar p-values as exact binomial sums (Python
// fractions with math.comb), percentiles and histograms and repetition counts by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "eval/stats.h"

namespace gb::eval {
namespace {

// Wilson 95% bounds: the p solving (k/n - p)^2 = z^2 p (1 - p) / n on each side of k/n, found by
// 200 bisection steps in Python 3 (no scipy on this machine), z = 1.959963984540054.
TEST(StatsWilson, MatchesTheScoreTestRoots) {
  struct Row {
    int64_t k, n;
    double lo, hi;
  };
  const Row rows[] = {
      {0, 10, 0.0, 0.27753279986288926},
      {5, 10, 0.236593090512564, 0.7634069094874361},
      {10, 10, 0.7224672001371109, 1.0},
      {81, 100, 0.7222115462093563, 0.8748524849023127},
  };
  for (const Row& r : rows) {
    Interval i = wilson_interval(r.k, r.n);
    EXPECT_NEAR(i.lo, r.lo, 1e-12) << r.k << "/" << r.n;
    EXPECT_NEAR(i.hi, r.hi, 1e-12) << r.k << "/" << r.n;
  }
  EXPECT_EQ(wilson_interval(0, 10).lo, 0.0);  // exact at the ends
  EXPECT_EQ(wilson_interval(10, 10).hi, 1.0);
}

TEST(StatsWilson, DegenerateInputs) {
  Interval none = wilson_interval(0, 0);
  EXPECT_EQ(none.lo, 0.0);
  EXPECT_EQ(none.hi, 1.0);
  none = wilson_interval(3, -1);
  EXPECT_EQ(none.lo, 0.0);
  EXPECT_EQ(none.hi, 1.0);
  Interval over = wilson_interval(12, 10);  // clamped to 10 / 10
  EXPECT_NEAR(over.lo, 0.7224672001371109, 1e-12);
  EXPECT_EQ(over.hi, 1.0);
  Interval narrow = wilson_interval(500, 1000, 1.0);  // a smaller z gives a narrower interval
  Interval wide = wilson_interval(500, 1000);
  EXPECT_GT(narrow.lo, wide.lo);
  EXPECT_LT(narrow.hi, wide.hi);
}

// McNemar exact: 2 * sum_{k <= min(b, c)} C(b + c, k) / 2^(b + c), capped at 1, as Python
// fractions (exact integers), then converted to float.
TEST(StatsMcnemar, MatchesExactBinomialSums) {
  struct Row {
    int64_t b, c;
    double p;
  };
  const Row rows[] = {
      {0, 0, 1.0},
      {0, 5, 0.0625},
      {1, 9, 0.021484375},
      {10, 30, 0.0022214337732293643},
      {30, 10, 0.0022214337732293643},
      {3, 3, 1.0},
      {0, 1, 1.0},
      {2, 3, 1.0},
      {0, 20, 1.9073486328125e-06},
      {100, 140, 0.011664092317677663},
      {500, 560, 0.06990955946026933},
      {5000, 5600, 5.9021615638058395e-09},
  };
  for (const Row& r : rows) {
    double p = mcnemar_exact_p(r.b, r.c);
    EXPECT_NEAR(p, r.p, r.p * 1e-9) << r.b << ", " << r.c;
  }
}

TEST(StatsMcnemar, LargeAndBadCounts) {
  double p = mcnemar_exact_p(1000000, 1005000);  // no overflow or underflow to NaN
  EXPECT_TRUE(std::isfinite(p));
  EXPECT_GT(p, 0.0);
  EXPECT_LT(p, 1.0);
  EXPECT_EQ(mcnemar_exact_p(0, 100000), 2 * std::pow(0.5, 100000.0));  // underflows to 0, not NaN
  EXPECT_EQ(mcnemar_exact_p(1000000, 1000000), 1.0);
  EXPECT_TRUE(std::isnan(mcnemar_exact_p(-1, 3)));
}

// Percentiles as numpy's default ("linear"): index (n - 1) q between the sorted values, by hand.
TEST(StatsPercentile, NumpyLinear) {
  const std::vector<double> four = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(four, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(four, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(percentile(four, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile(four, 0.9), 3.7);
  EXPECT_DOUBLE_EQ(percentile(four, 1), 4);
  EXPECT_DOUBLE_EQ(percentile({5, 1, 3}, 0.99), 4.96);
  EXPECT_DOUBLE_EQ(percentile({10}, 0.99), 10);
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(hundred, 0.5), 50.5);
  EXPECT_DOUBLE_EQ(percentile(hundred, 0.9), 90.1);
  EXPECT_DOUBLE_EQ(percentile(hundred, 0.99), 99.01);
}

TEST(StatsPercentile, UndefinedCasesAreNaN) {
  EXPECT_TRUE(std::isnan(percentile({}, 0.5)));
  EXPECT_TRUE(std::isnan(percentile({1, 2}, 1.5)));
  EXPECT_TRUE(std::isnan(percentile({1, 2}, -0.1)));
  EXPECT_TRUE(std::isnan(percentile({1, 2}, NAN)));
  EXPECT_TRUE(std::isnan(percentile({1, NAN, 2}, 0.5)));
}

TEST(StatsHistogram, EdgesAndClamping) {
  Histogram h = histogram({0, 0.5, 1, 9.99, 10, -5, 15, NAN}, 0, 10, 10);
  EXPECT_EQ(h.lo, 0.0);
  EXPECT_EQ(h.width, 1.0);
  EXPECT_EQ(h.counts, (std::vector<int64_t>{3, 1, 0, 0, 0, 0, 0, 0, 0, 3}));
  // Every value lands in the bin whose edges (lo + i * width) hold it, however the division rounds.
  for (int k = 0; k <= 1000; ++k) {
    double v = k / 1000.0;
    Histogram one = histogram({v}, 0, 1, 10);
    size_t bin = 0;
    while (bin < one.counts.size() && one.counts[bin] == 0) ++bin;
    ASSERT_LT(bin, one.counts.size());
    EXPECT_LE(one.lo + static_cast<double>(bin) * one.width, v) << v;
    if (bin + 1 < one.counts.size()) {
      EXPECT_LT(v, one.lo + static_cast<double>(bin + 1) * one.width) << v;
    }
  }
  EXPECT_EQ(histogram({}, 0, 1, 10).counts, std::vector<int64_t>(10, 0));
}

TEST(StatsHistogram, BadRangesGiveNoCounts) {
  EXPECT_TRUE(histogram({1, 2}, 0, 10, 0).counts.empty());
  EXPECT_TRUE(histogram({1, 2}, 5, 5, 4).counts.empty());
  EXPECT_TRUE(histogram({1, 2}, 5, 1, 4).counts.empty());
  EXPECT_TRUE(histogram({1, 2}, 0, INFINITY, 4).counts.empty());
  Histogram h = histogram({-INFINITY, INFINITY}, 0, 4, 2);
  EXPECT_EQ(h.counts, (std::vector<int64_t>{1, 1}));
}

// Repetition rates counted by hand.
TEST(StatsRepetition, HandCountedSequences) {
  // 4-grams: 1234 2341 3412 4123 1234(again) 2345 -> 1 of 6.
  EXPECT_DOUBLE_EQ(ngram_repetition_rate({1, 2, 3, 4, 1, 2, 3, 4, 5}), 1.0 / 6);
  // 7777 three times: the 2nd and 3rd repeat the 1st -> 2 of 3.
  EXPECT_DOUBLE_EQ(ngram_repetition_rate({7, 7, 7, 7, 7, 7}), 2.0 / 3);
  // bigrams 12 21 12 21 -> 2 of 4.
  EXPECT_DOUBLE_EQ(ngram_repetition_rate({1, 2, 1, 2, 1}, 2), 0.5);
  EXPECT_EQ(ngram_repetition_rate({1, 2, 3, 4, 5, 6, 7, 8}), 0.0);  // all distinct
  EXPECT_EQ(ngram_repetition_rate({1, 2, 3, 4}), 0.0);              // shorter than n + 1
  EXPECT_EQ(ngram_repetition_rate({}), 0.0);
  EXPECT_EQ(ngram_repetition_rate({1, 1, 1}, 0), 0.0);
  // Period 10 over 1000 tokens: 997 4-grams, the first 10 new, every later one a repeat.
  std::vector<int32_t> periodic;
  for (int i = 0; i < 1000; ++i) periodic.push_back(i % 10);
  EXPECT_DOUBLE_EQ(ngram_repetition_rate(periodic), 987.0 / 997);
  // n = 1: the share of tokens seen before.
  EXPECT_DOUBLE_EQ(ngram_repetition_rate({3, 1, 3, 3, 2}, 1), 2.0 / 5);
}

}  // namespace
}  // namespace gb::eval

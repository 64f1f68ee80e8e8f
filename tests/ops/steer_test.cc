// The glass box's row kernels against plain definitions: the bisection median equals a full
// sort's (odd and even widths, ties, zeros, huge outliers, NaN), the vector max |x| and its dim a
// plain scan's, top-k, clip_massive.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "ops/steer.h"

namespace gb::ops {
namespace {

float sorted_median_abs(const std::vector<float>& x) {
  std::vector<double> a;
  for (float v : x) a.push_back(std::fabs(v));
  std::sort(a.begin(), a.end());
  const size_t n = a.size(), m = n / 2;
  return n % 2 ? static_cast<float>(a[m]) : static_cast<float>((a[m - 1] + a[m]) / 2);
}

// The first max |x| by a left-to-right scan (NaN never wins: `>` is false for it).
std::pair<float, int32_t> scanned_max_abs(const std::vector<float>& x) {
  float m = 0;
  int32_t d = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) > m) {
      m = std::fabs(x[i]);
      d = static_cast<int32_t>(i);
    }
  }
  return {m, d};
}

TEST(Steer, MedianEqualsSortedMedian) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t width : {1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 33, 64, 172, 1023, 1024, 3072}) {
    for (int kind = 0; kind < 7; ++kind) {
      std::vector<float> x(static_cast<size_t>(width));
      for (auto& v : x) v = nd(rng);
      if (kind == 1) {
        for (auto& v : x) v = std::round(v * 2) / 2;  // many ties, zeros of both signs
      } else if (kind == 2) {
        x[0] = 2000.0f;  // a massive activation
        if (width > 2) x[1] = -1e30f;
      } else if (kind == 3) {
        for (auto& v : x) v = (rng() % 3 == 0) ? 0.0f : -0.0f;
      } else if (kind == 4) {
        // Far more equal values than the bracket gathers (32): the bisection runs to a width of 1.
        for (auto& v : x) v = (rng() % 4 == 0) ? nd(rng) : ((rng() % 2) ? 1.5f : -1.5f);
      } else if (kind == 5) {
        x[static_cast<size_t>(width) - 1] = std::numeric_limits<float>::quiet_NaN();  // ordered above +inf
        if (width > 3) x[2] = std::numeric_limits<float>::infinity();
      } else if (kind == 6) {
        for (auto& v : x) v = std::ldexp(nd(rng), static_cast<int>(rng() % 200) - 100);  // exponents far apart
        x[static_cast<size_t>(width) / 2] = std::numeric_limits<float>::denorm_min();
      }
      std::vector<float> finite;
      for (float v : x)
        if (!std::isnan(v)) finite.push_back(v);
      const RowStats s = row_stats(x.data(), width);
      if (finite.size() == x.size()) {
        EXPECT_EQ(s.median_abs, sorted_median_abs(x)) << width << " kind " << kind;
      } else {  // NaN orders above every value: the median of the rest with NaN as the largest
        std::vector<float> with_big = finite;
        with_big.push_back(std::numeric_limits<float>::infinity());
        if (width > 2) {  // (below 3 the NaN is itself a middle value)
          EXPECT_EQ(s.median_abs, sorted_median_abs(with_big)) << width;
        }
      }
      const auto [m, d] = scanned_max_abs(x);
      EXPECT_EQ(s.max_abs, m) << width << " kind " << kind;
      EXPECT_EQ(s.max_dim, d) << width << " kind " << kind;
      const RowStats c = row_max_median(x.data(), width);
      auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
      EXPECT_TRUE(same(c.median_abs, s.median_abs)) << width << " kind " << kind;
      EXPECT_EQ(c.max_abs, m);
      EXPECT_EQ(c.max_dim, d);
      EXPECT_TRUE(same(median_abs(x.data(), width), s.median_abs)) << width << " kind " << kind;
    }
  }
}

// The layer median (many rows, no workspace) against a full sort over every value of the rows.
TEST(Steer, ManyRowMedianEqualsSortedMedian) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t rows : {1, 2, 3, 17, 64}) {
    for (int64_t width : {1, 4, 7, 64, 160}) {
      std::vector<float> x(static_cast<size_t>(rows * width));
      for (auto& v : x) v = nd(rng) * (rng() % 5 == 0 ? 1e-3f : 1.0f);
      x[0] = 2500.0f;
      if (x.size() > 3) x[3] = -std::numeric_limits<float>::infinity();
      EXPECT_EQ(median_abs(x.data(), rows * width), sorted_median_abs(x)) << rows << " x " << width;
      for (auto& v : x) v = std::round(v);  // ties, zeros of both signs
      EXPECT_EQ(median_abs(x.data(), rows * width), sorted_median_abs(x)) << rows << " x " << width << " rounded";
    }
  }
  EXPECT_EQ(median_abs(nullptr, 0), 0.0f);
}

TEST(Steer, TopKAndClipMassive) {
  std::vector<float> x = {0.5f, -3.0f, 2.0f, 3.0f, -0.1f, 1000.0f, 0.2f, -0.3f};
  int32_t dims[4];
  float vals[4];
  ASSERT_EQ(row_top_k(x.data(), 8, 4, dims, vals), 4);
  EXPECT_EQ(dims[0], 5);
  EXPECT_EQ(dims[1], 1);  // |−3| = |3|: the lower dim first
  EXPECT_EQ(dims[2], 3);
  EXPECT_EQ(dims[3], 2);
  // median |x| = (0.5 + 2) / 2 = 1.25; threshold 100 → only 1000 is clipped.
  std::vector<float> y = x;
  EXPECT_EQ(clip_massive(y.data(), 1, 8, 100.0f, 0.0f, nullptr), 1);
  EXPECT_EQ(y[5], 0.0f);
  const std::vector<float> mean = {9, 9, 9, 9, 9, 7.5f, 9, 9};
  y = x;
  EXPECT_EQ(clip_massive(y.data(), 1, 8, 2.0f, 0.0f, mean.data()), 3);  // > 2.5: 3, −3, 1000
  EXPECT_EQ(y[5], 7.5f);
  EXPECT_EQ(y[1], 9.0f);
  EXPECT_EQ(y[2], 2.0f);
}

}  // namespace
}  // namespace gb::ops

// The glass box's row kernels against plain definitions: the radix-select median equals a full
// sort's (odd and even widths, ties, zeros, huge outliers), top-k, clip_massive.
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

TEST(Steer, MedianEqualsSortedMedian) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t width : {1, 2, 3, 4, 7, 64, 172, 1023, 1024, 3072}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<float> x(static_cast<size_t>(width));
      for (auto& v : x) v = nd(rng);
      if (kind == 1) {
        for (auto& v : x) v = std::round(v * 2) / 2;  // many ties, zeros of both signs
      } else if (kind == 2) {
        x[0] = 2000.0f;  // a massive activation
        if (width > 2) x[1] = -1e30f;
      } else if (kind == 3) {
        for (auto& v : x) v = (rng() % 3 == 0) ? 0.0f : -0.0f;
      }
      std::vector<float> scratch(static_cast<size_t>(width));
      const RowStats s = row_stats(x.data(), width, scratch.data());
      EXPECT_EQ(s.median_abs, sorted_median_abs(x)) << width << " kind " << kind;
      EXPECT_EQ(row_max_median(x.data(), width, scratch.data()).median_abs, s.median_abs);
      EXPECT_EQ(median_abs(x.data(), width), s.median_abs) << "the workspace-free median, one row";
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
  std::vector<float> scratch(8);
  // median |x| = (0.5 + 2) / 2 = 1.25; threshold 100 → only 1000 is clipped.
  std::vector<float> y = x;
  EXPECT_EQ(clip_massive(y.data(), 1, 8, 100.0f, 0.0f, nullptr, scratch.data()), 1);
  EXPECT_EQ(y[5], 0.0f);
  const std::vector<float> mean = {9, 9, 9, 9, 9, 7.5f, 9, 9};
  y = x;
  EXPECT_EQ(clip_massive(y.data(), 1, 8, 2.0f, 0.0f, mean.data(), scratch.data()), 3);  // > 2.5: 3, −3, 1000
  EXPECT_EQ(y[5], 7.5f);
  EXPECT_EQ(y[1], 9.0f);
  EXPECT_EQ(y[2], 2.0f);
}

}  // namespace
}  // namespace gb::ops

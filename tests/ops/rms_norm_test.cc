// RMSNorm against plain scalar double-precision references, on odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "support/test_support.h"

namespace gb::ops {
namespace {

using test::max_rel_err;
using test::random_vec;

TEST(RmsNorm, MatchesReferenceOnOddWidthsAndMassiveValues) {
  for (int64_t width : {1, 7, 8, 9, 64, 128, 173, 1024}) {
    const int64_t n = 5;
    auto x = random_vec(n * width, 1 + width);
    x[0] = 3000.0f;  // a massive activation must not swamp the other dims' sum
    const auto w = random_vec(width, 2, 0.1f);
    std::vector<float> got(n * width), want(n * width);
    rms_norm(x.data(), w.data(), n, width, 1e-5f, got.data());
    rms_norm_ref(x.data(), w.data(), n, width, 1e-5f, want.data());
    EXPECT_LE(max_rel_err(got, want), 1e-6) << width;
    rms_norm(x.data(), w.data(), n, width, 1e-5f, x.data());  // in place
    EXPECT_EQ(x, got);
  }
}

// A row's result is the same alone or among others, first or last (the sum of squares runs in a
// fixed order within the row).
TEST(RmsNorm, ARowDoesNotDependOnItsBatch) {
  const int64_t n = 6, width = 1027;
  auto x = random_vec(n * width, 21, 4.0f);
  x[5] = -2500.0f;
  const auto w = random_vec(width, 22);
  std::vector<float> all(n * width), one(width);
  rms_norm(x.data(), w.data(), n, width, 1e-6f, all.data());
  for (int64_t t = 0; t < n; ++t) {
    rms_norm(x.data() + t * width, w.data(), 1, width, 1e-6f, one.data());
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + t * width)) << t;
  }
}

}  // namespace
}  // namespace gb::ops

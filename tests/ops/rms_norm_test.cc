// RMSNorm against plain scalar double-precision references, on odd sizes.
#include <gtest/gtest.h>

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
  for (int64_t width : {1, 7, 64, 173}) {
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

}  // namespace
}  // namespace gb::ops

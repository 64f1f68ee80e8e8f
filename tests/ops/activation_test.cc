// SwiGLU activation and the elementwise adds against plain scalar double-precision references, on odd sizes.
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

TEST(SiluMul, MatchesReference) {
  const int64_t n = 1001;
  auto g = random_vec(n, 8, 4.0f), u = random_vec(n, 9);
  g[0] = -100.0f;  // exp overflow side: silu -> -0
  g[1] = 100.0f;
  std::vector<float> got(n), want(n);
  silu_mul(g.data(), u.data(), n, got.data());
  silu_mul_ref(g.data(), u.data(), n, want.data());
  EXPECT_LE(max_rel_err(got, want), 1e-6);
  std::vector<float> x = {1, 2, 3}, b = {0.5f, -1, 2};
  add_bias(x.data(), b.data(), 1, 3);
  EXPECT_EQ(x, (std::vector<float>{1.5f, 1, 5}));
  add_inplace(x.data(), b.data(), 3);
  EXPECT_EQ(x, (std::vector<float>{2, 0, 7}));
}

}  // namespace
}  // namespace gb::ops

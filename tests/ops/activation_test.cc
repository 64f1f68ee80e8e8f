// SwiGLU activation and the elementwise adds against plain scalar double-precision references, on odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cpu_features.h"
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

TEST(ExpN, WithinOneUlpOfExpInDoubleOverTheWholeRange) {
  // Every 1/64 from -87 to 88 plus random points: the result's error in units of its last place.
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 1.0f / 64) x.push_back(v);
  for (float v : random_vec(10001, 3, 30.0f)) {
    if (v > -87.0f && v < 88.0f) x.push_back(v);
  }
  std::vector<float> got(x.size());
  exp_n(x.data(), static_cast<int64_t>(x.size()), got.data());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    int e;
    std::frexp(want, &e);
    const double ulp = std::ldexp(1.0, e - 24);
    worst = std::max(worst, std::fabs(got[i] - want) / ulp);
  }
  EXPECT_LE(worst, 1.05);
  // Out of range: clamped, NaN kept; a tail element equals the same value inside a full vector.
  std::vector<float> edge = {-1000.0f, 1000.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, 1.5f};
  std::vector<float> e(edge.size());
  exp_n(edge.data(), 5, e.data());
  EXPECT_GT(e[0], 0.0f);
  EXPECT_LT(e[0], 1.2e-38f);
  EXPECT_GT(e[1], 1e38f);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 1.0f);
  float one;
  exp_n(&edge[4], 1, &one);
  EXPECT_EQ(one, e[4]);
}

TEST(SiluMul, AnElementDoesNotDependOnTheLengthOrSplit) {
  const int64_t n = 37;
  const auto g = random_vec(n, 4, 6.0f), u = random_vec(n, 5);
  std::vector<float> whole(n), parts(n);
  silu_mul(g.data(), u.data(), n, whole.data());
  for (int64_t b = 0; b < n; b += 5)
    silu_mul(g.data() + b, u.data() + b, std::min<int64_t>(5, n - b), parts.data() + b);
  EXPECT_EQ(whole, parts);
}

// The AVX2 and AVX-512 copies of the loops run the portable code's lane operations, so every
// element is bitwise what the 4-lane baseline gives: on odd lengths (every tail width) and on
// the edges of exp's range, infinities, NaN and subnormal inputs.
TEST(SiluMul, EveryIsaGivesThePortableBits) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> g = random_vec(3001, 11, 12.0f), u = random_vec(3001, 12, 3.0f);
  const std::vector<float> edge = {-1000.0f, 1000.0f, -87.4f, 88.4f,   inf,   -inf,   nan,
                                   0.0f,     -0.0f,   1e-42f, -1e-42f, 30.0f, -30.0f, 88.37f};
  for (size_t i = 0; i < edge.size(); ++i) g[7 * i] = edge[i];
  // A bit pattern compare: NaNs included, -0 told from +0.
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * 4);
    return b;
  };
  for (int64_t n : {1, 3, 7, 8, 15, 16, 17, 31, 33, 1001, 3001}) {
    std::vector<float> want_silu(n), want_exp(n);
    {
      ScopedIsa scoped(Isa::kScalar);
      silu_mul(g.data(), u.data(), n, want_silu.data());
      exp_n(g.data(), n, want_exp.data());
    }
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
      if (!isa_supported(isa)) continue;
      ScopedIsa scoped(isa);
      std::vector<float> got_silu(n), got_exp(n);
      silu_mul(g.data(), u.data(), n, got_silu.data());
      exp_n(g.data(), n, got_exp.data());
      EXPECT_EQ(bits(got_silu), bits(want_silu)) << isa_name(isa) << " n " << n;
      EXPECT_EQ(bits(got_exp), bits(want_exp)) << isa_name(isa) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace gb::ops

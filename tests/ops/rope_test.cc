// RoPE (both pair layouts, partial rotary, tables) against plain scalar double-precision references, on odd sizes.
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

TEST(Rope, BothStylesMatchReferenceIncludingPartialRotary) {
  const int64_t n = 3, heads = 3;
  const int32_t positions[n] = {0, 17, 301};
  for (auto style : {RopeStyle::kNeox, RopeStyle::kPairs}) {
    for (auto [hd, n_rot] : {std::pair<int64_t, int64_t>{8, 8}, {16, 16}, {32, 8}, {6, 6}}) {
      std::vector<double> inv(n_rot / 2);
      for (int64_t i = 0; i < n_rot / 2; ++i) inv[i] = std::pow(10000.0, -2.0 * i / n_rot) / (i % 3 == 0 ? 8.0 : 1.0);
      const int64_t stride = heads * hd + 5;  // a row stride wider than the heads
      auto x = random_vec(n * stride, 3);
      auto want = x;
      std::vector<float> c(n * n_rot / 2), s(n * n_rot / 2);
      rope_tables(positions, n, inv.data(), n_rot / 2, c.data(), s.data());
      rope(x.data(), n, stride, heads, hd, n_rot, c.data(), s.data(), style);
      rope_ref(want.data(), positions, n, stride, heads, hd, n_rot, inv.data(), style);
      EXPECT_LE(max_rel_err(x, want), 1e-6) << "hd " << hd << " rot " << n_rot;
    }
  }
}

TEST(Rope, PairStyleOnPermutedRowsEqualsNeoxOnHfRows) {
  // The GGUF converter permutes q/k rows so that adjacent pairs hold (i, i + hd/2); rotating the
  // permuted head with kPairs must equal rotating the HF head with kNeox, then permuting.
  const int64_t hd = 8;
  const int32_t pos[1] = {5};
  std::vector<double> inv(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) inv[i] = std::pow(10000.0, -2.0 * i / hd);
  auto hf = random_vec(hd, 4);
  std::vector<float> perm(hd);
  for (int64_t i = 0; i < hd / 2; ++i) {
    perm[2 * i] = hf[i];
    perm[2 * i + 1] = hf[i + hd / 2];
  }
  std::vector<float> c(hd / 2), s(hd / 2);
  rope_tables(pos, 1, inv.data(), hd / 2, c.data(), s.data());
  rope(hf.data(), 1, hd, 1, hd, hd, c.data(), s.data(), RopeStyle::kNeox);
  rope(perm.data(), 1, hd, 1, hd, hd, c.data(), s.data(), RopeStyle::kPairs);
  for (int64_t i = 0; i < hd / 2; ++i) {
    EXPECT_FLOAT_EQ(perm[2 * i], hf[i]);
    EXPECT_FLOAT_EQ(perm[2 * i + 1], hf[i + hd / 2]);
  }
}

}  // namespace
}  // namespace gb::ops

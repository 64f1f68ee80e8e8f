// The blocked argmax against the plain left-to-right scan that defines it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/argmax.h"

namespace gb::ops {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Argmax, MatchesTheScanOnEverySizeAndTiePosition) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(-3, 3);  // few distinct values: ties everywhere
  for (size_t n : {size_t{1}, size_t{2}, size_t{15}, size_t{16}, size_t{17}, size_t{31}, size_t{33}, size_t{64},
                   size_t{100}, size_t{1000}, size_t{151936}}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> v(n);
      for (auto& x : v) x = static_cast<float>(level(rng));
      ASSERT_EQ(argmax(v), argmax_ref(v)) << "n " << n << " trial " << trial;
    }
    // A single maximum at every position of the first blocks and the tail.
    for (size_t at = 0; at < n; at += (n > 200 ? 997 : 1)) {
      std::vector<float> v(n, -1.0f);
      v[at] = 2.0f;
      ASSERT_EQ(argmax(v), static_cast<int32_t>(at)) << "n " << n;
    }
  }
  EXPECT_EQ(argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax(std::span<const float>{}), 0);
}

TEST(Argmax, NansInfinitiesAndSignedZerosAsTheScan) {
  const std::vector<std::vector<float>> cases = {
      {kNan, 5, 7, 1},                                   // NaN at 0 is kept
      {1, kNan, 7, kNan, 7},                             // NaNs skipped
      {-kInf, -kInf, -kInf},                             // all -inf: 0
      {-kInf, -kInf, -1, -kInf},                         //
      {-0.0f, 0.0f, -0.0f},                              // equal zeros: the first
      {-1, 0.0f, -0.0f, -1},                             //
      {1, kInf, 3, kInf},                                // +inf wins, the first
      {kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan,   //
       kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan,   //
       kNan, 4},                                         // NaN at 0 beats a later 4
      {3,    kNan, kNan, kNan, kNan, kNan, kNan, kNan,   //
       kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan,   //
       kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan},  // all NaN after a number: 0
  };
  for (size_t c = 0; c < cases.size(); ++c) EXPECT_EQ(argmax(cases[c]), argmax_ref(cases[c])) << "case " << c;
  // The same in a long row: NaNs and -inf everywhere, the maximum past the blocked part.
  std::vector<float> v(4099, -kInf);
  for (size_t i = 1; i < v.size(); i += 3) v[i] = kNan;
  v[4097] = -5.0f;
  EXPECT_EQ(argmax(v), 4097);
  EXPECT_EQ(argmax(v), argmax_ref(v));
}

}  // namespace
}  // namespace gb::ops

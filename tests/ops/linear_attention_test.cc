// Gated DeltaNet ops against plain scalar references: the chunked delta rule equals the
// token-by-token recurrence for lengths that are and are not multiples of the chunk size, a
// sequence split across calls equals one call (prefill then decode), conv1d carries its window.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ops/cpu_features.h"
#include "ops/linear_attention.h"
#include "support/test_support.h"

namespace gb::ops {
namespace {

using test::random_vec;

double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - b[i]));
  return m;
}

// Inputs of one head over n tokens, shaped like the model's: q/k L2-normalised, g = -A·softplus(·) <= 0,
// beta = sigmoid(·) in (0, 1).
struct HeadInputs {
  int64_t n, dk, dv;
  std::vector<float> q, k, v, g, beta, state0;
  HeadInputs(int64_t n_, int64_t dk_, int64_t dv_, uint32_t seed) : n(n_), dk(dk_), dv(dv_) {
    q = random_vec(n * dk, seed);
    k = random_vec(n * dk, seed + 1);
    v = random_vec(n * dv, seed + 2);
    l2_norm(q.data(), n, dk, 1e-6f);
    l2_norm(k.data(), n, dk, 1e-6f);
    auto a = random_vec(n, seed + 3), b = random_vec(n, seed + 4);
    for (int64_t t = 0; t < n; ++t) {
      g.push_back(-0.5f * softplus(a[t]));
      beta.push_back(1.0f / (1.0f + std::exp(-b[t])));
    }
    state0 = random_vec(dk * dv, seed + 5, 0.3f);
  }
  DeltaHead head(std::vector<float>& out, int64_t from = 0) {
    return {q.data() + from * dk, k.data() + from * dk, dk, v.data() + from * dv,   dv,
            g.data() + from,      beta.data() + from,   1,  out.data() + from * dv, dv};
  }
};

// Every ISA level this CPU runs (the loops are compiled per ISA: linear_attention_inl.h).
class GatedDeltaIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
    scoped_.emplace(GetParam());
  }
  std::optional<ScopedIsa> scoped_;
};

TEST_P(GatedDeltaIsa, ChunkedEqualsRecurrentAndReference) {
  struct Shape {
    int64_t dk, dv, chunk;
  };
  double worst_chunked = 0, worst_rec = 0;
  // dk 13 and dv 75 leave tails at every register tile (4-row groups, vectors of 8 and 16, strips
  // of four vectors); 128 × 128 is Qwen3.5's head.
  for (Shape s : {Shape{16, 24, 8}, Shape{16, 16, 64}, Shape{13, 75, 8}, Shape{36, 40, 16}, Shape{128, 128, 64}}) {
    for (int64_t n : {1, 5, 8, 9, 16, 33, 64, 65, 130}) {
      if (s.dk == 128 && n > 65) continue;  // keeps the double reference quick
      SCOPED_TRACE("dk " + std::to_string(s.dk) + " dv " + std::to_string(s.dv) + " chunk " + std::to_string(s.chunk) +
                   " n " + std::to_string(n));
      HeadInputs in(n, s.dk, s.dv, static_cast<uint32_t>(7 * n + s.dk));
      std::vector<float> o_rec(n * s.dv), o_chk(n * s.dv), o_ref(n * s.dv);
      auto st_rec = in.state0, st_chk = in.state0, st_ref = in.state0;
      std::vector<float> scratch(gated_delta_chunk_scratch(s.chunk, s.dv));
      gated_delta_recurrent(in.head(o_rec), n, s.dk, s.dv, st_rec.data());
      gated_delta_chunked(in.head(o_chk), n, s.dk, s.dv, st_chk.data(), s.chunk, scratch.data());
      gated_delta_ref(in.head(o_ref), n, s.dk, s.dv, st_ref.data());
      const double e1 = std::max(max_abs(o_chk, o_rec), max_abs(st_chk, st_rec));
      const double e2 = std::max(max_abs(o_rec, o_ref), max_abs(st_rec, st_ref));
      EXPECT_LE(e1, 1e-5) << "chunked vs recurrent";
      EXPECT_LE(e2, 1e-5) << "recurrent vs double reference";
      worst_chunked = std::max(worst_chunked, e1);
      worst_rec = std::max(worst_rec, e2);
    }
  }
  std::printf("%s gated delta rule: max |chunked - recurrent| %.3g, max |recurrent - f64 reference| %.3g\n",
              std::string(isa_name(GetParam())).c_str(), worst_chunked, worst_rec);
}

// Prefill in chunks, then decode token by token from the state it left: same as one pass.
TEST_P(GatedDeltaIsa, PrefillThenDecodeEqualsOnePass) {
  const int64_t n = 21, dk = 16, dv = 8, split = 13;
  HeadInputs in(n, dk, dv, 99);
  std::vector<float> o_one(n * dv), o_two(n * dv);
  auto st_one = in.state0, st_two = in.state0;
  std::vector<float> scratch(gated_delta_chunk_scratch(4, dv));
  gated_delta_ref(in.head(o_one), n, dk, dv, st_one.data());
  gated_delta_chunked(in.head(o_two), split, dk, dv, st_two.data(), 4, scratch.data());
  for (int64_t t = split; t < n; ++t) gated_delta_recurrent(in.head(o_two, t), 1, dk, dv, st_two.data());
  EXPECT_LE(max_abs(o_one, o_two), 1e-5);
  EXPECT_LE(max_abs(st_one, st_two), 1e-5);
}

// Kernels 1, 2 (lane by lane) and 4 (vectors of channels and the last ones lane by lane: 37
// channels leave a tail at every width); inputs up to ±1 and scaled ×60 (SiLU's exp near the ends
// of its range: e^±120 clamps). Errors relative to the inputs' scale (f32 sums of ±60 terms).
TEST_P(GatedDeltaIsa, CausalConv1dMatchesReferenceAndCarriesTheWindow) {
  for (float amp : {1.0f, 60.0f}) {
    for (int64_t kernel : {1, 2, 4}) {
      const int64_t n = 11, channels = 37;
      auto x = random_vec(n * channels, 3);
      for (float& e : x) e *= amp;
      const auto w = random_vec(channels * kernel, 4, 0.5f);
      std::vector<float> st_ref((kernel - 1) * channels, 0.0f), st((kernel - 1) * channels, 0.0f);
      std::vector<float> want(n * channels), got(n * channels);
      causal_conv1d_silu_ref(x.data(), n, channels, w.data(), kernel, st_ref.data(), want.data());
      // Split 1 + 2 + 8 tokens: the window crosses calls shorter than the kernel.
      int64_t done = 0;
      for (int64_t len : {1, 2, 8}) {
        causal_conv1d_silu(x.data() + done * channels, len, channels, channels, w.data(), kernel, st.data(),
                           got.data() + done * channels);
        done += len;
      }
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::fabs(double{got[i]} - want[i]) / std::max<double>(amp, std::fabs(want[i])));
      EXPECT_LE(worst, 1e-6) << "kernel " << kernel << " amplitude " << amp;
      EXPECT_EQ(st, st_ref) << kernel;
    }
  }
}

// Channels in blocks (offset pointers, rows `stride` apart, as the engine splits them over threads)
// give the same outputs and window as one call over all channels.
TEST_P(GatedDeltaIsa, CausalConv1dChannelBlocksEqualOneCall) {
  const int64_t n = 7, channels = 45, kernel = 4, hist = kernel - 1;
  const auto x = random_vec(n * channels, 8);
  const auto w = random_vec(channels * kernel, 9, 0.5f);
  const auto st0 = random_vec(hist * channels, 10);
  auto st_one = st0, st_blk = st0;
  std::vector<float> one(n * channels), blk(n * channels, -1.0f);
  causal_conv1d_silu(x.data(), n, channels, channels, w.data(), kernel, st_one.data(), one.data());
  for (int64_t c0 = 0; c0 < channels; c0 += 16) {
    const int64_t width = std::min<int64_t>(16, channels - c0);
    causal_conv1d_silu(x.data() + c0, n, width, channels, w.data() + c0 * kernel, kernel, st_blk.data() + c0,
                       blk.data() + c0);
  }
  EXPECT_EQ(blk, one);
  EXPECT_EQ(st_blk, st_one);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, GatedDeltaIsa, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

TEST(GatedRmsNorm, MatchesReference) {
  const int64_t n = 3, width = 37;
  const auto x = random_vec(n * width, 5), z = random_vec(n * width, 6), w = random_vec(width, 7);
  std::vector<float> got(n * width), want(n * width);
  gated_rms_norm(x.data(), z.data(), w.data(), n, width, 1e-6f, got.data());
  gated_rms_norm_ref(x.data(), z.data(), w.data(), n, width, 1e-6f, want.data());
  EXPECT_LE(test::max_rel_err(got, want), 1e-6);
}

TEST(L2NormAndSigmoid, Basics) {
  auto x = random_vec(2 * 9, 8);
  l2_norm(x.data(), 2, 9, 1e-6f);
  for (int r = 0; r < 2; ++r) {
    double s = 0;
    for (int i = 0; i < 9; ++i) s += double{x[r * 9 + i]} * x[r * 9 + i];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  std::vector<float> a = {2.0f, -1.0f}, gate = {0.0f, 100.0f};
  sigmoid_mul(a.data(), gate.data(), 2);
  EXPECT_FLOAT_EQ(a[0], 1.0f);
  EXPECT_FLOAT_EQ(a[1], -1.0f);
  EXPECT_FLOAT_EQ(softplus(30.0f), 30.0f);
  EXPECT_NEAR(softplus(0.0f), std::log(2.0f), 1e-7);
}

}  // namespace
}  // namespace gb::ops

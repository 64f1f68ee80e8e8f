// Observers: per-token statistics checked by hand on small rows and on stories260K's residual
// stream (float64 values dumped by an independent numpy forward pass, activations.json).
#include <gtest/gtest.h>

#include <algorithm>

#include "observers.h"
#include "reference_util.h"
#include "sequence_feed.h"

namespace gb {
namespace {

TEST(TokenStats, ByHand) {
  const float x[] = {0.5f, -4.0f, 1.0f, 4.0f, -2.0f};  // odd width; |x| tie 4 at dims 1 and 3
  TokenStats s = token_stats(x, 5);
  EXPECT_EQ(s.max_abs, 4.0f);
  EXPECT_EQ(s.max_dim, 1);        // lowest dim on ties
  EXPECT_EQ(s.median_abs, 2.0f);  // |x| sorted: 0.5 1 2 4 4
  EXPECT_NEAR(s.rms, std::sqrt((0.25 + 16 + 1 + 16 + 4) / 5.0), 1e-6);
  const float y[] = {-3.0f, 1.0f, 0.0f, 2.0f};  // even width: mean of the two middle |x|
  s = token_stats(y, 4);
  EXPECT_EQ(s.median_abs, 1.5f);
  EXPECT_EQ(s.max_dim, 0);
}

TEST(StatsObserver, MatchesStatsComputedOnIndependentResiduals) {
  std::ifstream in(test::shared_path("models/stories260K/activations.json"));
  const auto act = nlohmann::json::parse(in);
  const auto ids = act["prompt_ids"].get<std::vector<int32_t>>();
  auto m = load_model(test::shared_path("models/stories260K"), {.n_threads = 1});
  ASSERT_TRUE(m.is_ok());
  const int32_t n_layers = (*m)->config().n_layers;
  Hooks hooks(n_layers);
  StatsObserver stats;
  CaptureObserver capture;
  hooks.watch(HookPoint::kResidPost, -1, &stats);
  hooks.watch(HookPoint::kResidPost, -1, &capture);
  hooks.watch(HookPoint::kEmbed, -1, &capture);
  hooks.watch(HookPoint::kFinalNorm, -1, &capture);
  auto cache = KvCache::create((*m)->config(), 2, 16);
  test::SequenceFeed s(**m, **cache);
  ASSERT_TRUE(s.feed(ids, &hooks, true).is_ok());
  ASSERT_EQ(stats.records().size(), size_t(n_layers) * ids.size());
  double worst_value = 0;
  for (const auto& r : stats.records()) {
    EXPECT_EQ(r.point, HookPoint::kResidPost);
    EXPECT_EQ(r.seq, 0);
    // By hand, in double, on the reference residual after layer r.layer at this position.
    const auto ref = act["residual"][r.layer + 1][r.position].get<std::vector<double>>();
    std::vector<double> a(ref.size());
    double sum_sq = 0;
    for (size_t i = 0; i < ref.size(); ++i) a[i] = std::fabs(ref[i]), sum_sq += ref[i] * ref[i];
    const size_t arg = std::max_element(a.begin(), a.end()) - a.begin();
    std::vector<double> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    const double median = (sorted[31] + sorted[32]) / 2;  // width 64
    SCOPED_TRACE("layer " + std::to_string(r.layer) + " pos " + std::to_string(r.position));
    EXPECT_NEAR(r.stats.max_abs, a[arg], 1e-4 * a[arg]);
    EXPECT_EQ(static_cast<size_t>(r.stats.max_dim), arg);
    EXPECT_NEAR(r.stats.median_abs, median, 1e-4);
    EXPECT_NEAR(r.stats.rms, std::sqrt(sum_sq / 64), 1e-4);
    // The captured tensor itself equals the independent residual.
    const auto* t = capture.find(0, hook_key(HookPoint::kResidPost, r.layer));
    ASSERT_NE(t, nullptr);
    for (size_t i = 0; i < ref.size(); ++i) {
      worst_value = std::max(worst_value, std::fabs(t->data[r.position * 64 + i] - ref[i]));
    }
  }
  EXPECT_LE(worst_value, 1e-5);
  const auto* fn = capture.find(0, "final_norm");
  ASSERT_NE(fn, nullptr);
  double worst_norm = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    const auto ref = act["final_norm"][p].get<std::vector<double>>();
    for (size_t i = 0; i < ref.size(); ++i) worst_norm = std::max(worst_norm, std::fabs(fn->data[p * 64 + i] - ref[i]));
  }
  EXPECT_LE(worst_norm, 1e-4);
  std::printf("stories260K vs numpy float64: resid_post max |diff| %.2g, final_norm %.2g\n", worst_value, worst_norm);
}

}  // namespace
}  // namespace gb

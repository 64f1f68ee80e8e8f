// stories260K (real weights) against llama2.c's run.c: greedy ids, step-0 logits, top-5 at steps 0-2.
#include <gtest/gtest.h>

#include "ops/argmax.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "sequence_feed.h"
#include "support/test_support.h"

namespace gb {
namespace {

nlohmann::json load_reference() {
  std::ifstream in(test::shared_path("models/stories260K/reference.json"));
  return nlohmann::json::parse(in);
}

std::vector<int32_t> top5(std::span<const float> v) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(5);
  return idx;
}

TEST(Stories260K, GreedyIdsLogitsAndTop5MatchLlama2c) {
  auto model = load_model(test::shared_path("models/stories260K"), {.max_batch_tokens = 64, .n_threads = 1});
  ASSERT_TRUE(model.is_ok()) << model.message();
  auto cache = KvCache::create((*model)->config(), 8, 16);
  ASSERT_TRUE(cache.is_ok()) << cache.message();
  const nlohmann::json ref = load_reference();
  double worst = 0;
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    test::SequenceFeed s(**model, **cache);
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["continuation_ids"].get<std::vector<int32_t>>();
    ASSERT_TRUE(s.feed(prompt).is_ok());
    // Step 0: every logit.
    const auto step0 = c["step0_logits"].get<std::vector<float>>();
    auto logits = s.last_logits();
    ASSERT_EQ(logits.size(), step0.size());
    double max_err = 0;
    for (size_t i = 0; i < step0.size(); ++i) max_err = std::max(max_err, std::fabs(double(logits[i]) - step0[i]));
    EXPECT_LE(max_err, 1e-4);
    worst = std::max(worst, max_err);
    std::vector<int32_t> got;
    for (int step = 0; step < static_cast<int>(want.size()); ++step) {
      logits = s.last_logits();
      for (const auto& t : c["top5_logits"]) {
        if (t["step"].get<int>() != step) continue;
        EXPECT_EQ(top5(logits), t["ids"].get<std::vector<int32_t>>()) << "step " << step;
        const auto values = t["values"].get<std::vector<float>>();
        const auto ids = t["ids"].get<std::vector<int32_t>>();
        for (size_t k = 0; k < ids.size(); ++k) EXPECT_NEAR(logits[ids[k]], values[k], 1e-4) << "step " << step;
      }
      const int32_t next = ops::argmax(logits);
      got.push_back(next);
      if (step + 1 < static_cast<int>(want.size())) {
        const int32_t one[] = {next};
        ASSERT_TRUE(s.feed(one).is_ok());
      }
    }
    EXPECT_EQ(got, want);
  }
  std::printf("stories260K: max |step-0 logit error| over all prompts = %.3g\n", worst);
}

}  // namespace
}  // namespace gb

// The engine on the Qwen3.5 hybrid fixture (Gated DeltaNet + full attention): greedy ids equal the
// llama.cpp reference; 8 concurrent requests (prompts across delta-rule chunk boundaries and
// prefills split over steps) equal their sequential results, also under preemption; cancel and
// preemption leave no KV blocks or recurrent-state slots behind, and no state leaks into the
// next request; prefix caching is off.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine_fixture.h"

namespace gb {
namespace {

const std::string kFixture = "testdata/reference/qwen35-hybrid";

using test::collect;
using test::Output;
using test::run_together;

class HybridEngineTest : public test::EngineFixture {
 protected:
  static void SetUpTestSuite() { load(kFixture + "/hf", kFixture, {.max_batch_tokens = 128, .n_threads = 2}); }
  static std::unique_ptr<Engine> make_engine(int32_t max_seqs = 8, int32_t batched = 64, int64_t kv_bytes = 0) {
    return engine(max_seqs, batched, kv_bytes);
  }

  // block_bytes of this model: K and V of its one attention layer, 2 kv heads × 32, 16 slots, f32.
  static constexpr int64_t kBlockBytes = int64_t{2} * 1 * 64 * 16 * 4;
};

// Prompts of 5 .. 150 tokens: under, across and over the delta rule's 64-token chunk, and longer
// than max_num_batched_tokens (64), so their prefill spans several steps.
std::vector<GenerationRequest> eight_requests() {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt;
    const int len = 5 + (i * 41) % 150;
    for (int k = 0; k < len; ++k) prompt.push_back((i * 37 + k * 11) % 556);
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 6 + (i * 7) % 20;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

TEST_F(HybridEngineTest, GreedyMatchesReferenceUpToTheFirstNearTie) {
  auto e = make_engine();
  const auto& seqs = (*ref_)["sequences"];
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto want = (*ref_)["greedy"]["f32"][s].get<std::vector<int32_t>>();
    const auto margin = (*ref_)["greedy_margin"]["f32"][s].get<std::vector<double>>();
    const auto got = run_together(*e, {greedy(seqs[s].get<std::vector<int32_t>>(), 24)})[0].tokens;
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size() && margin[k] >= 2e-4; ++k)
      EXPECT_EQ(got[k], want[k]) << "seq " << s << " step " << k;
  }
}

TEST_F(HybridEngineTest, EightConcurrentRequestsEqualSequentialResults) {
  const auto reqs = eight_requests();
  auto e = make_engine();
  std::vector<Output> alone;
  for (const auto& r : reqs) alone.push_back(run_together(*e, {r})[0]);
  auto fresh = make_engine();
  const auto together = run_together(*fresh, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(reqs[i].max_tokens));
    EXPECT_EQ(together[i].finish, FinishReason::kLength);
  }
  const EngineStats st = fresh->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.state_slots_used, 0);
  EXPECT_EQ(st.prefix_cache_hits, 0);
}

TEST_F(HybridEngineTest, ExactUnderPreemption) {
  const auto reqs = eight_requests();
  auto e = make_engine();
  std::vector<Output> alone;
  for (const auto& r : reqs) alone.push_back(run_together(*e, {r})[0]);
  // 32 blocks = 512 slots: the longest request (171 tokens) fits, the eight together (~700) do not.
  auto small = make_engine(8, 64, 32 * kBlockBytes);
  const auto together = run_together(*small, reqs);
  EXPECT_GT(small->stats().preemptions, 0);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
  EXPECT_EQ(small->stats().kv_blocks_used, 0);
  EXPECT_EQ(small->stats().state_slots_used, 0);
}

TEST_F(HybridEngineTest, CancelLeavesNoStateBehind) {
  const auto reqs = eight_requests();
  const auto expect = run_together(*make_engine(1), {reqs[2]})[0].tokens;
  // One state slot: the cancelled request's slot is the one the next request gets.
  auto e = make_engine(1);
  auto ch = std::make_shared<RequestChannel>();
  ASSERT_TRUE(e->submit(greedy(reqs[5].prompt, 100), ch).is_ok());
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(e->step().is_ok());
  EXPECT_GT(e->stats().kv_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 1);
  ch->cancel();
  ASSERT_TRUE(e->run_until_idle().is_ok());
  EXPECT_EQ(collect(*ch).finish, FinishReason::kCancelled);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  EXPECT_EQ(e->stats().state_slots_used, 0);
  EXPECT_EQ(run_together(*e, {reqs[2]})[0].tokens, expect);
}

TEST_F(HybridEngineTest, PrefixCachingIsOff) {
  auto e = make_engine();
  std::vector<int32_t> prompt;
  for (int k = 0; k < 70; ++k) prompt.push_back(3 + k * 7 % 500);
  const auto first = run_together(*e, {greedy(prompt, 5)})[0];
  const auto second = run_together(*e, {greedy(prompt, 5)})[0];
  EXPECT_EQ(second.cached, 0);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_EQ(e->stats().prefix_cache_hits, 0);
}

}  // namespace
}  // namespace gb

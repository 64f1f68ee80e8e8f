// The engine end to end on stories260K: continuous batching is exact (each request's tokens
// equal what it produces alone, also under preemption), prefix-cache hits, stop rules,
// cancellation, seeded sampling, errors and the background thread.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "engine/engine_fixture.h"

namespace gb {
namespace {

const std::string kModel = "models/stories260K";

using test::collect;
using test::Output;
using test::run_together;

class EngineTest : public test::EngineFixture {
 protected:
  static void SetUpTestSuite() { load(kModel, kModel, {.max_batch_tokens = 256, .n_threads = 2}); }
  static std::unique_ptr<Engine> make_engine(int32_t max_seqs = 16, int32_t batched = 64, int64_t kv_bytes = 0) {
    return engine(max_seqs, batched, kv_bytes);
  }
};

TEST_F(EngineTest, GreedyMatchesReference) {
  auto e = make_engine();
  for (const auto& c : (*ref_)["cases"]) {
    auto outs = run_together(*e, {greedy(c["prompt_ids"].get<std::vector<int32_t>>(), 64)});
    EXPECT_EQ(outs[0].tokens, c["continuation_ids"].get<std::vector<int32_t>>()) << c["prompt"];
    EXPECT_EQ(outs[0].finish, FinishReason::kLength);
  }
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

std::vector<GenerationRequest> sixteen_requests() {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> prompt{1};
    for (int k = 0; k < 3 + 7 * i % 41; ++k) prompt.push_back(3 + (i * 37 + k * 11) % 500);
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 8 + (i * 13) % 40;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

TEST_F(EngineTest, ContinuousBatchingIsExact) {
  const auto reqs = sixteen_requests();
  auto e = make_engine(16, 64);
  std::vector<Output> alone;
  for (const auto& r : reqs) alone.push_back(run_together(*e, {r})[0]);
  auto fresh = make_engine(16, 64);  // no prefix-cache state from the solo runs
  const auto together = run_together(*fresh, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(reqs[i].max_tokens));
  }
}

TEST_F(EngineTest, ExactUnderPreemption) {
  const auto reqs = sixteen_requests();
  auto e = make_engine(16, 64);
  std::vector<Output> alone;
  for (const auto& r : reqs) alone.push_back(run_together(*e, {r})[0]);
  // A cache of 32 blocks (512 slots) cannot hold the 16 sequences at once: the newest are
  // preempted and recomputed, and nobody's tokens change.
  const int64_t block_bytes = int64_t{2} * 5 * 32 * 16 * 4;
  auto small = make_engine(16, 64, 32 * block_bytes);
  const auto together = run_together(*small, reqs);
  EXPECT_GT(small->stats().preemptions, 0);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
  EXPECT_EQ(small->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, RepeatedPromptHitsPrefixCache) {
  auto e = make_engine();
  std::vector<int32_t> prompt{1};
  for (int k = 0; k < 70; ++k) prompt.push_back(3 + k * 7 % 500);
  const auto first = run_together(*e, {greedy(prompt, 10)})[0];
  const auto second = run_together(*e, {greedy(prompt, 10)})[0];
  EXPECT_EQ(first.cached, 0);
  EXPECT_EQ(second.cached, 64);  // 4 full blocks of 16; the last token is always recomputed
  EXPECT_EQ(first.tokens, second.tokens);
  const auto st = e->stats();
  EXPECT_EQ(st.prefix_cache_hits, 64);
  EXPECT_EQ(st.prefix_cache_queries, 2 * 71);
  // Another salt (e.g. an intervention) does not reuse those blocks.
  auto salted = greedy(prompt, 10);
  salted.cache_salt = 99;
  EXPECT_EQ(run_together(*e, {salted})[0].cached, 0);
}

TEST_F(EngineTest, StopsOnStopTokenAndEos) {
  auto e = make_engine();
  const auto& c = (*ref_)["cases"][0];
  const auto expect = c["continuation_ids"].get<std::vector<int32_t>>();
  auto r = greedy(c["prompt_ids"].get<std::vector<int32_t>>(), 64);
  r.stop_token_ids = {expect[5]};
  const auto out = run_together(*e, {r})[0];
  EXPECT_EQ(out.finish, FinishReason::kStop);
  ASSERT_LE(out.tokens.size(), 6u);
  EXPECT_EQ(out.tokens.back(), expect[5]);
  // With EOS honoured the model stops on BOS (generation_config lists [2, 1]) eventually or
  // runs to the limit; either way the last token of a "stop" finish is an EOS id.
  auto r2 = greedy({1}, 200);
  r2.ignore_eos = false;
  const auto out2 = run_together(*e, {r2})[0];
  if (out2.finish == FinishReason::kStop) {
    EXPECT_TRUE(out2.tokens.back() == 1 || out2.tokens.back() == 2);
  } else {
    EXPECT_EQ(out2.finish, FinishReason::kLength);
  }
}

TEST_F(EngineTest, CancelFreesBlocks) {
  auto e = make_engine();
  auto ch = std::make_shared<RequestChannel>();
  ASSERT_TRUE(e->submit(greedy({1, 403, 407}, 100), ch).is_ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(e->step().is_ok());
  EXPECT_GT(e->stats().kv_blocks_used, 0);
  ch->cancel();
  ASSERT_TRUE(e->run_until_idle().is_ok());
  const auto out = collect(*ch);
  EXPECT_EQ(out.finish, FinishReason::kCancelled);
  EXPECT_LT(out.tokens.size(), 100u);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, SeededSamplingIsReproducibleAloneAndBatched) {
  auto e = make_engine();
  GenerationRequest r;
  r.prompt = {1, 403, 407, 261, 378};
  r.max_tokens = 30;
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 1234;
  r.sampling.has_seed = true;
  r.ignore_eos = true;
  const auto a = run_together(*e, {r})[0];
  auto reqs = sixteen_requests();
  reqs.insert(reqs.begin() + 3, r);
  const auto b = run_together(*make_engine(), reqs)[3];
  EXPECT_EQ(a.tokens, b.tokens);
  r.sampling.seed = 4321;
  EXPECT_NE(run_together(*e, {r})[0].tokens, a.tokens);
}

// A step's samples are drawn on the pool (two threads here), in whatever order its tasks claim
// them: sixteen seeded sequences with different settings, batched, draw exactly what each draws
// alone — tokens and logprobs.
TEST_F(EngineTest, SeededSamplesOfABatchEqualEachAlone) {
  auto reqs = sixteen_requests();
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto& sp = reqs[i].sampling;
    sp.temperature = 0.6f + 0.1f * static_cast<float>(i % 5);
    sp.top_p = i % 2 == 0 ? 0.9f : 1.0f;
    sp.top_k = i % 3 == 0 ? 40 : 0;
    sp.min_p = i % 4 == 1 ? 0.05f : 0.0f;
    sp.seed = 100 + i;
    sp.has_seed = true;
    reqs[i].top_logprobs = static_cast<int32_t>(i % 3);
  }
  reqs[5].sampling.temperature = 0;  // a greedy one among them
  auto e = make_engine(16, 64);
  std::vector<Output> alone;
  for (const auto& r : reqs) alone.push_back(run_together(*e, {r})[0]);
  const auto together = run_together(*make_engine(16, 64), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].logprobs, alone[i].logprobs) << "request " << i;
    EXPECT_EQ(together[i].tokens.size(), static_cast<size_t>(reqs[i].max_tokens));
  }
}

TEST_F(EngineTest, LogprobsAreNormalisedAndIncludeTheSampledToken) {
  auto e = make_engine();
  auto r = greedy({1, 403, 407}, 3);
  r.top_logprobs = 5;
  auto ch = std::make_shared<RequestChannel>();
  ASSERT_TRUE(e->submit(r, ch).is_ok());
  ASSERT_TRUE(e->run_until_idle().is_ok());
  GenerationEvent ev;
  int n = 0;
  while (ch->pop(&ev, std::chrono::milliseconds(0))) {
    for (const auto& t : ev.tokens) {
      ASSERT_EQ(t.top.size(), 5u);
      EXPECT_EQ(t.top[0].token, t.token);  // greedy: the sampled token is the most likely
      EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
      EXPECT_LT(t.logprob, 0.0f);
      for (size_t i = 1; i < t.top.size(); ++i) EXPECT_LE(t.top[i].logprob, t.top[i - 1].logprob);
      ++n;
    }
  }
  EXPECT_EQ(n, 3);
}

TEST_F(EngineTest, RejectsImpossibleRequests) {
  auto e = make_engine();
  auto ch = std::make_shared<RequestChannel>();
  auto too_long = greedy(std::vector<int32_t>(500, 5), 100);
  const Status s = e->submit(too_long, ch);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("500"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("100"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("512"), std::string::npos) << s.message();
  EXPECT_FALSE(e->submit(greedy({1, 600}, 4), ch).is_ok());  // id outside the vocabulary
  EXPECT_FALSE(e->submit(greedy({}, 4), ch).is_ok());
  auto bad = greedy({1}, 4);
  bad.sampling.top_p = 2;
  EXPECT_NE(e->submit(bad, ch).message().find("top_p"), std::string::npos);
}

TEST_F(EngineTest, BackgroundThreadServesConcurrentSubmitters) {
  auto e = make_engine();
  e->start();
  const auto reqs = sixteen_requests();
  std::vector<std::shared_ptr<RequestChannel>> chans(reqs.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < reqs.size(); ++i) {
    clients.emplace_back([&, i] {
      chans[i] = std::make_shared<RequestChannel>();
      ASSERT_TRUE(e->submit(reqs[i], chans[i]).is_ok());
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> toks;
    GenerationEvent ev;
    FinishReason fin = FinishReason::kNone;
    while (fin == FinishReason::kNone && chans[i]->pop(&ev, std::chrono::seconds(60))) {
      for (const auto& t : ev.tokens) toks.push_back(t.token);
      fin = ev.finish;
    }
    EXPECT_EQ(fin, FinishReason::kLength);
    EXPECT_EQ(toks.size(), static_cast<size_t>(reqs[i].max_tokens));
  }
  e->drain(Clock::now() + std::chrono::seconds(5));
  EXPECT_FALSE(e->submit(greedy({1}, 2), std::make_shared<RequestChannel>()).is_ok());
}

}  // namespace
}  // namespace gb

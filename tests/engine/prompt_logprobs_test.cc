// Prompt logprobs (scoring a text): the engine returns, for every prompt token after the first,
// its log-probability given the tokens before it, with top-k alternatives — exact against the
// independent reference where it gives full logits, consistent with greedy decoding everywhere
// else, unchanged by chunking and by the per-step row budget, and invisible to the requests
// beside it.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine_fixture.h"

namespace gb {
namespace {

const std::string kModel = "models/stories260K";

using test::Output;
using test::run_together;

class PromptLogprobs : public test::EngineFixture {
 protected:
  static void SetUpTestSuite() { load(kModel, kModel, {.max_batch_tokens = 256, .n_threads = 2}); }
  static std::unique_ptr<Engine> make_engine(int32_t batched = 256, int32_t logprob_rows = 64) {
    EngineConfig ec;
    ec.scheduler.max_num_seqs = 8;
    ec.scheduler.max_num_batched_tokens = batched;
    ec.scheduler.max_prompt_logprob_rows = logprob_rows;
    auto e = Engine::create(model_, ec);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(e).value();
  }
  // prompt + its 64 greedy reference tokens, scored with k alternatives and nothing generated.
  static GenerationRequest score(const nlohmann::json& c, int32_t k, int32_t max_tokens = 0) {
    std::vector<int32_t> ids = c["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t t : c["continuation_ids"].get<std::vector<int32_t>>()) ids.push_back(t);
    GenerationRequest r = greedy(ids, max_tokens);
    r.prompt_logprobs = k;
    return r;
  }
};

TEST_F(PromptLogprobs, MatchReferenceLogitsAndGreedyDecoding) {
  auto e = make_engine();
  const int32_t vocab = model_->config().vocab;
  for (const auto& c : (*ref_)["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    const GenerationRequest r = score(c, vocab);  // k = vocab: the whole distribution
    const Output out = run_together(*e, {r})[0];
    ASSERT_EQ(out.finish, FinishReason::kLength) << out.error;
    EXPECT_TRUE(out.tokens.empty());
    ASSERT_EQ(out.prompt_logprobs.size(), r.prompt.size() - 1);
    const size_t n_prompt = c["prompt_ids"].size();
    for (size_t i = 0; i < out.prompt_logprobs.size(); ++i) {
      const GeneratedToken& t = out.prompt_logprobs[i];
      ASSERT_EQ(t.token, r.prompt[i + 1]);
      ASSERT_EQ(t.top.size(), static_cast<size_t>(vocab));
      // The alternatives are a distribution: they sum to 1 and include the token itself.
      double sum = 0;
      for (const TokenLogprob& a : t.top) {
        sum += std::exp(static_cast<double>(a.logprob));
        if (a.token == t.token) {
          EXPECT_EQ(a.logprob, t.logprob);
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-4);
      // Where the text continues greedily, the scored token is the most likely one.
      if (i + 1 >= n_prompt) {
        EXPECT_EQ(t.top[0].token, t.token) << "position " << i;
      }
    }
    // The row after the prompt against llama2.c's full logits at step 0: log-softmax, every id.
    const std::vector<float> ref = c["step0_logits"].get<std::vector<float>>();
    double mx = -INFINITY, z = 0;
    for (float v : ref) mx = std::max(mx, static_cast<double>(v));
    for (float v : ref) z += std::exp(v - mx);
    std::vector<float> got(static_cast<size_t>(vocab));
    for (const TokenLogprob& a : out.prompt_logprobs[n_prompt - 1].top) got[static_cast<size_t>(a.token)] = a.logprob;
    double worst = 0;
    for (int32_t id = 0; id < vocab; ++id) {
      worst =
          std::max(worst, std::abs(got[static_cast<size_t>(id)] - (ref[static_cast<size_t>(id)] - mx - std::log(z))));
    }
    EXPECT_LT(worst, 1e-4);
  }
}

TEST_F(PromptLogprobs, SameUnderChunkingAndTheRowBudget) {
  const auto& c = (*ref_)["cases"][1];
  const Output whole = run_together(*make_engine(), {score(c, 3)})[0];
  // 16-token chunks and 5 rows per step: many steps, chunks cut by the row budget.
  const Output cut = run_together(*make_engine(16, 5), {score(c, 3)})[0];
  ASSERT_EQ(cut.prompt_logprobs.size(), whole.prompt_logprobs.size());
  for (size_t i = 0; i < whole.prompt_logprobs.size(); ++i) {
    EXPECT_EQ(cut.prompt_logprobs[i].token, whole.prompt_logprobs[i].token);
    EXPECT_NEAR(cut.prompt_logprobs[i].logprob, whole.prompt_logprobs[i].logprob, 1e-5) << i;
    ASSERT_EQ(cut.prompt_logprobs[i].top.size(), 3u);
    EXPECT_EQ(cut.prompt_logprobs[i].top[0].token, whole.prompt_logprobs[i].top[0].token) << i;
  }
}

TEST_F(PromptLogprobs, ScoringThenGeneratingAndNeighboursUnchanged) {
  const auto& cases = (*ref_)["cases"];
  const std::vector<int32_t> prompt = cases[2]["prompt_ids"].get<std::vector<int32_t>>();
  GenerationRequest both = greedy(prompt, 8);
  both.prompt_logprobs = 0;
  const GenerationRequest plain = greedy(cases[3]["prompt_ids"].get<std::vector<int32_t>>(), 24);
  const Output plain_alone = run_together(*make_engine(), {plain})[0];
  const auto outs = run_together(*make_engine(32, 4), {both, plain, score(cases[4], 1)});
  // The scoring request generates what it would have without scoring, after its prompt logprobs.
  EXPECT_EQ(outs[0].tokens, run_together(*make_engine(), {greedy(prompt, 8)})[0].tokens);
  EXPECT_EQ(outs[0].prompt_logprobs.size(), prompt.size() - 1);
  EXPECT_FALSE(outs[0].prompt_logprobs_after_token);
  for (const GeneratedToken& t : outs[0].prompt_logprobs) {
    EXPECT_TRUE(t.top.empty());
    EXPECT_LE(t.logprob, 0.0f);
  }
  // The plain request beside them: bitwise the same tokens and logprobs as alone.
  EXPECT_EQ(outs[1].tokens, plain_alone.tokens);
  EXPECT_EQ(outs[1].logprobs, plain_alone.logprobs);
  EXPECT_TRUE(outs[1].prompt_logprobs.empty());
  EXPECT_EQ(outs[2].prompt_logprobs.size(), cases[4]["prompt_ids"].size() + 63);
}

TEST_F(PromptLogprobs, ScoringReadsNoPrefixCacheAndIsChecked) {
  auto e = make_engine();
  const auto& c = (*ref_)["cases"][0];
  run_together(*e, {greedy(score(c, 0).prompt, 1)});  // publishes the text's blocks
  const Output scored = run_together(*e, {score(c, 0)})[0];
  EXPECT_EQ(scored.cached, 0);
  EXPECT_EQ(scored.prompt_logprobs.size(), score(c, 0).prompt.size() - 1);
  GenerationRequest bad = greedy(c["prompt_ids"].get<std::vector<int32_t>>(), 0);
  EngineErrorCode code = EngineErrorCode::kNone;
  const Status st = e->submit(bad, std::make_shared<RequestChannel>(), &code);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("max_tokens"), std::string::npos);
  EXPECT_EQ(code, EngineErrorCode::kInvalidRequest);
}

}  // namespace
}  // namespace gb

// Non-finite activations: a request whose hidden states or logits become NaN/Inf fails with a
// kNonFinite error naming the layer and point where it first happened — never a token sampled
// from NaN — and the requests beside it in the same batches finish exactly as they would alone.
#include <gtest/gtest.h>

#include "engine/engine_fixture.h"
#include "support/test_support.h"

namespace gb {
namespace {

using test::Output;
using test::run_together;

class NonFinite : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto m = load_model(test::shared_path(GetParam()), {.max_batch_tokens = 64, .n_threads = 2});
    ASSERT_TRUE(m.is_ok()) << m.message();
    model_ = std::move(*m);
  }
  std::unique_ptr<Engine> engine(int32_t batched) {
    EngineConfig ec;
    ec.scheduler.max_num_seqs = 8;
    ec.scheduler.max_num_batched_tokens = batched;
    ec.max_model_len = 128;
    auto e = Engine::create(model_.get(), ec);
    EXPECT_TRUE(e.is_ok()) << e.message();
    return std::move(e).value();
  }
  GenerationRequest greedy(int32_t n_prompt, int32_t max_tokens, std::shared_ptr<const GlassSpec> glass = nullptr) {
    GenerationRequest r;
    for (int32_t i = 0; i < n_prompt; ++i) r.prompt.push_back(1 + (i * 37) % (model_->config().vocab - 1));
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.top_logprobs = 2;
    r.glass = std::move(glass);
    return r;
  }
  // Two stacked x · (1 + 3e38) at resid_post of `layer` for the tokens in `scope` (each within any
  // per-item cap of a finite strength): every non-zero value becomes ±Inf.
  std::shared_ptr<const GlassSpec> blow_up(int32_t layer, TokenScope scope) {
    GlassSpec spec;
    for (int k = 0; k < 2; ++k) {
      spec.interventions.push_back({.op = InterventionOp::kScale,
                                    .point = HookPoint::kResidPost,
                                    .layer_first = layer,
                                    .layer_last = layer,
                                    .strength = 3e38f,
                                    .tokens = {.scope = scope}});
    }
    auto r = resolve_glass_spec(spec, model_->config());
    EXPECT_TRUE(r.is_ok()) << r.message();
    return *r;
  }
  std::unique_ptr<Model> model_;
};

TEST_P(NonFinite, RequestFailsNamingLayerAndPointWhileOthersComplete) {
  auto e = engine(/*batched=*/16);  // the 40-token prompts are prefilled in chunks, beside decode steps
  const GenerationRequest plain = greedy(40, 12);
  const auto alone = run_together(*e, {plain});
  ASSERT_EQ(alone[0].finish, FinishReason::kLength);
  ASSERT_EQ(alone[0].tokens.size(), 12u);

  // Steered over the prompt at layer 1: its first (and only) sampling step finds NaN logits.
  const auto outs = run_together(*e, {plain, greedy(40, 12, blow_up(1, TokenScope::kAll)), plain});
  EXPECT_EQ(outs[1].finish, FinishReason::kError);
  EXPECT_EQ(outs[1].code, EngineErrorCode::kNonFinite);
  EXPECT_TRUE(outs[1].tokens.empty());  // never a token sampled from NaN
  EXPECT_NE(outs[1].error.find("non-finite activations (NaN or Inf) first at layer 1 resid_post"), std::string::npos)
      << outs[1].error;
  EXPECT_NE(outs[1].error.find("interventions[0] (scale)"), std::string::npos) << outs[1].error;
  std::printf("%s: %s\n", GetParam(), outs[1].error.c_str());
  for (int i : {0, 2}) {
    EXPECT_EQ(outs[i].finish, FinishReason::kLength);
    EXPECT_EQ(outs[i].code, EngineErrorCode::kNone);
    EXPECT_EQ(outs[i].tokens, alone[0].tokens) << "plain request " << i;
  }
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  EXPECT_EQ(e->stats().running, 0);
}

TEST_P(NonFinite, FailureAfterTokensWereSentIsStillAnError) {
  auto e = engine(/*batched=*/64);
  // Only generated tokens are steered: the first token comes from the clean prompt; the row of
  // that token (position 10) is blown up at the next step, so the request fails there.
  const auto outs = run_together(*e, {greedy(10, 8, blow_up(0, TokenScope::kGenerated)), greedy(10, 8)});
  EXPECT_EQ(outs[0].tokens.size(), 1u);
  EXPECT_EQ(outs[0].finish, FinishReason::kError);
  EXPECT_EQ(outs[0].code, EngineErrorCode::kNonFinite);
  EXPECT_NE(outs[0].error.find("first at layer 0 resid_post, token position 10"), std::string::npos) << outs[0].error;
  EXPECT_EQ(outs[1].finish, FinishReason::kLength);
  EXPECT_EQ(outs[1].tokens.size(), 8u);
  // The engine keeps serving: the same plain request again gives the same tokens.
  EXPECT_EQ(run_together(*e, {greedy(10, 8)})[0].tokens, outs[1].tokens);
}

TEST(NonFiniteCheck, AllFiniteFindsNaNAndInfOnly) {
  std::vector<float> x(1000, 1.0f);
  x[3] = 3.4e38f;
  x[4] = -1e-45f;  // denormal
  EXPECT_TRUE(all_finite(x.data(), 1000));
  x[999] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite(x.data(), 1000));
  EXPECT_TRUE(all_finite(x.data(), 999));
  x[999] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite(x.data(), 1000));
  x[999] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(all_finite(x.data(), 1000));
}

INSTANTIATE_TEST_SUITE_P(
    Models, NonFinite, ::testing::Values("models/stories260K", "testdata/reference/qwen35-hybrid/gguf/model-q8_0.gguf"),
    [](const auto& info) { return std::string(info.index == 0 ? "stories260K" : "qwen35_hybrid"); });

}  // namespace
}  // namespace gb

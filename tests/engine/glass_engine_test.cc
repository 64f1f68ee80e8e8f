// The glass box through the engine: steered and plain requests share batches without touching
// each other, intervention KV never leaks through the prefix cache, the final event carries the
// request's report, and the engine-wide monitor counts massive activations.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>

#include "engine/engine_fixture.h"
#include "support/glass_fixtures.h"
#include "support/test_support.h"

namespace gb {
namespace {

using test::Output;
using test::run_together;

std::unique_ptr<Model> load(const std::string& path) {
  auto m = load_model(path, {.max_batch_tokens = 256, .n_threads = 2});
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(*m) : nullptr;
}

std::unique_ptr<Engine> make_engine(Model* m, int32_t batched = 64, MonitorConfig monitor = {}) {
  EngineConfig ec;
  ec.scheduler.max_num_seqs = 16;
  ec.scheduler.max_num_batched_tokens = batched;
  ec.max_model_len = 256;
  ec.monitor = monitor;
  auto e = Engine::create(m, ec);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return std::move(e).value();
}

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens,
                         std::shared_ptr<const GlassSpec> glass = nullptr, std::string id = "r") {
  GenerationRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.top_logprobs = 0;
  r.glass = std::move(glass);
  return r;
}

std::shared_ptr<const GlassSpec> resolve(GlassSpec spec, const Model& m) {
  auto r = resolve_glass_spec(std::move(spec), m.config());
  EXPECT_TRUE(r.is_ok()) << r.message();
  return r.is_ok() ? *r : nullptr;
}

// A strong steer on stories260K: a neuron scaled on every layer plus a vector added at layer 2.
std::shared_ptr<const GlassSpec> steer(const Model& m, float strength, uint32_t seed) {
  GlassSpec s;
  s.interventions.push_back({.op = InterventionOp::kScale,
                             .point = HookPoint::kMlpAct,
                             .layer_first = -1,
                             .layer_last = -1,
                             .dims = {7, 11},
                             .strength = strength});
  s.interventions.push_back({.op = InterventionOp::kAdd,
                             .point = HookPoint::kResidPost,
                             .layer_first = 2,
                             .layer_last = 2,
                             .strength = strength,
                             .vector = test::random_vec(m.config().n_embd, seed)});
  s.observe.enabled = true;
  s.observe.top_k = 3;
  return resolve(s, m);
}

const std::vector<int32_t> kPromptA = {1, 403, 407, 261, 378, 6,   83, 40, 7,  91,
                                       2, 97,  300, 41,  12,  420, 55, 60, 31, 77};
const std::vector<int32_t> kPromptB = {1, 201, 33, 89, 150, 270, 9, 14};
const std::vector<int32_t> kPromptC = {1, 403, 407, 261, 378, 5, 17, 99, 120, 310, 44};

TEST(GlassEngine, SteeredAndPlainRequestsShareBatchesWithoutInterference) {
  auto m = load(test::shared_path("models/stories260K"));
  ASSERT_NE(m, nullptr);
  const auto sa = steer(*m, 3.0f, 1), sc = steer(*m, -0.9f, 2);
  // Alone, each in a fresh engine.
  const Output a = run_together(*make_engine(m.get()), {greedy(kPromptA, 24, sa)})[0];
  const Output b = run_together(*make_engine(m.get()), {greedy(kPromptB, 24)})[0];
  const Output c = run_together(*make_engine(m.get()), {greedy(kPromptC, 24, sc)})[0];
  const Output a_plain = run_together(*make_engine(m.get()), {greedy(kPromptA, 24)})[0];
  EXPECT_NE(a.tokens, a_plain.tokens);  // the steer changes the text, so equality below means something
  // Together, with a small token budget so prefill chunks and decode tokens mix in steps.
  for (int32_t budget : {64, 8}) {
    SCOPED_TRACE(budget);
    auto e = make_engine(m.get(), budget);
    const auto outs = run_together(*e, {greedy(kPromptA, 24, sa), greedy(kPromptB, 24), greedy(kPromptC, 24, sc)});
    EXPECT_EQ(outs[0].tokens, a.tokens);
    EXPECT_EQ(outs[1].tokens, b.tokens);
    EXPECT_EQ(outs[2].tokens, c.tokens);
    EXPECT_EQ(0, std::memcmp(outs[0].logprobs.data(), a.logprobs.data(), a.logprobs.size() * 4));
    EXPECT_EQ(0, std::memcmp(outs[1].logprobs.data(), b.logprobs.data(), b.logprobs.size() * 4));
    EXPECT_EQ(0, std::memcmp(outs[2].logprobs.data(), c.logprobs.data(), c.logprobs.size() * 4));
    EXPECT_EQ(outs[1].glass, nullptr);
    ASSERT_NE(outs[0].glass, nullptr);
    // Observation accumulates across chunks and decode steps to the same figures as alone.
    ASSERT_EQ(outs[0].glass->stats.size(), a.glass->stats.size());
    for (size_t i = 0; i < a.glass->stats.size(); ++i) {
      const PointStats &x = outs[0].glass->stats[i], &y = a.glass->stats[i];
      EXPECT_EQ(x.n_tokens, static_cast<int64_t>(kPromptA.size()) + 24 - 1);  // the last token is never fed
      EXPECT_EQ(x.max_abs, y.max_abs);
      EXPECT_EQ(x.max_position, y.max_position);
      EXPECT_FLOAT_EQ(x.rms, y.rms);
      EXPECT_FLOAT_EQ(x.median_abs, y.median_abs);
      ASSERT_EQ(x.top.size(), 3u);
      EXPECT_EQ(x.top[0].dim, y.top[0].dim);
    }
    EXPECT_EQ(outs[0].glass->applied[0].rows, a.glass->applied[0].rows);
  }
  // The background thread with concurrent submitters gives the same.
  auto e = make_engine(m.get());
  e->start();
  std::vector<std::shared_ptr<RequestChannel>> chans(3);
  std::vector<std::thread> threads;
  const std::vector<GenerationRequest> reqs = {greedy(kPromptA, 24, sa), greedy(kPromptB, 24),
                                               greedy(kPromptC, 24, sc)};
  for (int i = 0; i < 3; ++i) {
    chans[i] = std::make_shared<RequestChannel>();
    threads.emplace_back([&, i] { EXPECT_TRUE(e->submit(reqs[i], chans[i]).is_ok()); });
  }
  for (auto& t : threads) t.join();
  std::vector<Output> outs(3);
  for (int i = 0; i < 3; ++i) {
    GenerationEvent ev;
    while (outs[i].finish == FinishReason::kNone && chans[i]->pop(&ev, std::chrono::seconds(30))) {
      for (const auto& t : ev.tokens) outs[i].tokens.push_back(t.token);
      outs[i].finish = ev.finish;
    }
  }
  e->stop();
  EXPECT_EQ(outs[0].tokens, a.tokens);
  EXPECT_EQ(outs[1].tokens, b.tokens);
  EXPECT_EQ(outs[2].tokens, c.tokens);
  EXPECT_EQ(e->stats().glass_requests, 2);
}

TEST(GlassEngine, PrefixCacheNeverSharesBlocksAcrossInterventions) {
  auto m = load(test::shared_path("models/stories260K"));
  ASSERT_NE(m, nullptr);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(1 + (i * 37) % 500);
  auto interv = [&](float s) {
    GlassSpec g;
    g.interventions.push_back({.op = InterventionOp::kScale,
                               .point = HookPoint::kMlpAct,
                               .layer_first = 1,
                               .layer_last = 1,
                               .dims = {5},
                               .strength = s});
    return resolve(g, *m);
  };
  auto e = make_engine(m.get());
  EXPECT_EQ(run_together(*e, {greedy(prompt, 4)})[0].cached, 0);
  // Same prompt under an intervention: nothing from the plain request's blocks.
  EXPECT_EQ(run_together(*e, {greedy(prompt, 4, interv(0.5f))})[0].cached, 0);
  // The same intervention again (a separately resolved, equal spec): its blocks are shared.
  EXPECT_EQ(run_together(*e, {greedy(prompt, 4, interv(0.5f))})[0].cached, 32);
  // Another strength: not shared.
  EXPECT_EQ(run_together(*e, {greedy(prompt, 4, interv(0.6f))})[0].cached, 0);
  // Plain again: the plain blocks, never the steered ones.
  const Output plain = run_together(*e, {greedy(prompt, 4)})[0];
  EXPECT_EQ(plain.cached, 32);
  EXPECT_EQ(plain.tokens, run_together(*make_engine(m.get()), {greedy(prompt, 4)})[0].tokens);
  // Observation alone does not change KV, but it computes its prompt: no hits, full statistics.
  GlassSpec obs;
  obs.observe.enabled = true;
  const Output observed = run_together(*e, {greedy(prompt, 4, resolve(obs, *m))})[0];
  EXPECT_EQ(observed.cached, 0);
  ASSERT_NE(observed.glass, nullptr);
  EXPECT_EQ(observed.glass->stats[0].n_tokens, 40 + 3);
  EXPECT_EQ(observed.tokens, plain.tokens);
}

TEST(GlassEngine, RefusesASpecResolvedForAnotherModel) {
  auto m = load(test::shared_path("models/stories260K"));
  auto other = load(test::shared_path("testdata/reference/llama-gqa/hf"));
  ASSERT_NE(m, nullptr);
  ASSERT_NE(other, nullptr);
  GlassSpec g;
  g.observe.enabled = true;
  auto e = make_engine(m.get());
  const Status st = e->submit(greedy(kPromptB, 4, resolve(g, *other)), std::make_shared<RequestChannel>());
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("not resolved for this model"), std::string::npos) << st.message();
}

TEST(GlassEngine, MonitorCountsMassiveActivationsPerLayer) {
  using F = test::MassiveFixture;
  auto m = load(F::make());
  ASSERT_NE(m, nullptr);
  MonitorConfig mc;
  mc.enabled = true;
  auto e = make_engine(m.get(), 64, mc);
  std::vector<int32_t> p1 = {1, 20, 30, 40, 50, 60}, p2 = {1, 70, 80, 90};
  // A request that also asks for its own detection, and one that does not.
  GlassSpec g;
  g.observe.enabled = true;
  const auto outs = run_together(*e, {greedy(p1, 5, resolve(g, *m), "with-spec"), greedy(p2, 5, nullptr, "plain")});
  const MonitorSnapshot snap = e->monitor();
  const int32_t n_layers = m->config().n_layers;
  // Token 0 of each request, on every layer from kLayer on; decode tokens never fire.
  EXPECT_EQ(snap.events_total, 2 * (n_layers - F::kLayer));
  EXPECT_EQ(snap.events_per_layer[0], 0);
  for (int32_t l = F::kLayer; l < n_layers; ++l) EXPECT_EQ(snap.events_per_layer[l], 2);
  ASSERT_EQ(snap.recent.size(), static_cast<size_t>(snap.events_total));
  EXPECT_EQ(snap.recent.front().index, 1u);
  std::set<std::string> ids;
  for (const auto& ev : snap.recent) {
    ids.insert(ev.request_id);
    EXPECT_EQ(ev.event.position, 0);
    EXPECT_EQ(ev.event.dim, F::kDim);
  }
  EXPECT_EQ(ids, (std::set<std::string>{"with-spec", "plain"}));
  EXPECT_GT(snap.peak_max_ratio[F::kLayer], 1000.0f);
  EXPECT_LT(snap.peak_max_ratio[0], 1000.0f);
  EXPECT_EQ(snap.steps_sampled, 5);  // one prefill step + 4 decode steps, each sampled
  const EngineStats st = e->stats();
  EXPECT_EQ(st.monitor_steps, 5);
  EXPECT_EQ(st.massive_events, snap.events_total);
  // The request's own report has its events, at its own positions.
  ASSERT_NE(outs[0].glass, nullptr);
  ASSERT_EQ(outs[0].glass->events.size(), static_cast<size_t>(n_layers - F::kLayer));
  EXPECT_EQ(outs[0].glass->events[0].layer, F::kLayer);

  // Sampling every 3rd step; switched at run time.
  mc.every_steps = 3;
  e->set_monitor(mc);
  run_together(*e, {greedy(p2, 7)});  // 1 prefill + 6 decode steps = 7 steps: sampled 0, 3, 6
  EXPECT_EQ(e->monitor().steps_sampled, 5 + 3);
  // Off by default: no counters move.
  auto quiet = make_engine(m.get());
  run_together(*quiet, {greedy(p1, 3)});
  EXPECT_EQ(quiet->monitor().steps_sampled, 0);
  EXPECT_EQ(quiet->stats().massive_events, 0);
}

}  // namespace
}  // namespace gb

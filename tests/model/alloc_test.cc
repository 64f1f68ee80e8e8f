// "Nothing allocates in the layer loop": a warmed-up forward step (decode and prefill, hooks off,
// and with an observer that keeps nothing; the glass box with the layer-median massive rule and
// layer timing) performs no heap allocation at all.
#include <gtest/gtest.h>

#include "glass/glass.h"
#include "model/model.h"
#include "support/alloc_counter.h"
#include "support/test_support.h"

namespace gb {
namespace {

class NullObserver : public Observer {
 public:
  void observe(const HookTensor& t) override { rows += t.n_rows; }
  int64_t rows = 0;
};

TEST(Allocation, WarmForwardStepsDoNotAllocate) {
  for (int threads : {1, 2}) {
    for (const char* rel : {"models/stories260K", "testdata/reference/qwen2-bias/gguf/model-q4_0.gguf",
                            "testdata/reference/qwen35-hybrid/gguf/model-q8_0.gguf"}) {
      SCOPED_TRACE(std::string(rel) + " threads " + std::to_string(threads));
      auto m = load_model(test::shared_path(rel), {.max_batch_tokens = 32, .n_threads = threads});
      ASSERT_TRUE(m.is_ok()) << m.message();
      auto cache = KvCache::create((*m)->config(), 8, 16);
      std::vector<int32_t> table = {0, 1, 2, 3};
      Hooks hooks((*m)->config().n_layers);
      NullObserver obs;
      hooks.watch(HookPoint::kMlpAct, 1, &obs);
      hooks.watch(HookPoint::kLogits, -1, &obs);
      std::vector<float> logits(32 * (*m)->config().vocab);
      Batch batch;
      batch.tokens.reserve(32), batch.positions.reserve(32), batch.seq_index.reserve(32), batch.slots.reserve(32);
      batch.output_rows.reserve(32), batch.seqs.reserve(4);
      std::vector<int32_t> prompt(20, 5);
      auto step = [&](int pos, int n, const Hooks* h) {
        batch.clear();
        batch.add_sequence(std::span(prompt).first(n), pos, table, 16, true,
                           /*state_slot=*/0);  // hybrid: recurrent state
        return (*m)->forward(batch, **cache, h, logits.data());
      };
      // The glass box: interventions, observation (stats, top-k, massive detection, a capture)
      // and the monitor, all built into a fresh table every step the way the engine does.
      const ModelConfig& mc = (*m)->config();
      GlassSpec spec;
      spec.interventions.push_back({.op = InterventionOp::kScale,
                                    .point = HookPoint::kMlpAct,
                                    .layer_first = 0,
                                    .layer_last = 0,
                                    .dims = {3},
                                    .strength = 0.5f});
      spec.interventions.push_back({.op = InterventionOp::kAdd,
                                    .point = HookPoint::kResidPost,
                                    .layer_first = -1,
                                    .layer_last = -1,
                                    .strength = 0.1f,
                                    .vector = std::vector<float>(mc.n_embd, 1.0f)});
      spec.interventions.push_back({.op = InterventionOp::kClipMassive,
                                    .point = HookPoint::kResidMid,
                                    .layer_first = 1,
                                    .layer_last = 1,
                                    .threshold = 50.0f});
      spec.interventions.push_back(
          {.op = InterventionOp::kSkip, .point = HookPoint::kResidPost, .layer_first = 1, .layer_last = 1});
      spec.interventions.push_back({.op = InterventionOp::kSet,
                                    .point = HookPoint::kAttnIn,
                                    .layer_first = -1,
                                    .layer_last = -1,
                                    .dims = {5},
                                    .strength = 0.0f});
      spec.observe.enabled = true;
      spec.observe.points = {HookPoint::kResidPost, HookPoint::kMlpAct, HookPoint::kAttnIn};
      spec.observe.sink_tokens = 3;  // attention sinks on every full-attention layer
      spec.observe.top_k = 8;
      spec.observe.captures = {{HookPoint::kResidPost, 1, 42}};
      spec.observe.layer_time = true;               // steady-clock stamps per layer
      spec.massive.median = MassiveMedian::kLayer;  // the median over the step's rows (no workspace)
      spec.massive.fire_on = MassiveFire::kEither;
      auto resolved = resolve_glass_spec(spec, mc);
      ASSERT_TRUE(resolved.is_ok()) << resolved.message();
      GlassAccumulator acc(*resolved, mc);
      GlassStep glass(mc);
      glass.set_pool(&(*m)->pool());  // the monitor spread over the forward's threads, as the engine runs it
      MonitorConfig monitor;
      monitor.enabled = true;
      monitor.rule.median = MassiveMedian::kLayer;
      MonitorStep monitor_out;
      monitor_out.reset(mc.n_layers);
      Hooks glass_hooks(mc.n_layers);
      auto glass_step = [&](int pos, int n) {
        batch.clear();
        batch.add_sequence(std::span(prompt).first(n), pos, table, 16, true, /*state_slot=*/0);
        glass.clear();
        glass.add_sequence(0, n, pos, 20, &acc);
        glass.set_monitor(monitor, &monitor_out);
        glass.finalize();
        glass_hooks.set_glass(&glass);
        Status st = (*m)->forward(batch, **cache, &glass_hooks, logits.data());
        glass.finish_forward();
        return st;
      };
      // Warm up: scratch buffers (attention, matmul activation rounding, the glass table) grow once.
      ASSERT_TRUE(step(0, 20, &hooks).is_ok());
      ASSERT_TRUE(step(20, 1, nullptr).is_ok());
      ASSERT_TRUE(glass_step(21, 1).is_ok());
      ASSERT_TRUE(glass_step(0, 20).is_ok());
      test::AllocCounter count;
      // Positions continue where the sequence left off (a hybrid model's recurrent state requires it).
      Status a = step(20, 1, nullptr);   // decode, hooks off
      Status b = step(21, 1, &hooks);    // decode, an observer on
      Status c = step(22, 20, nullptr);  // a prefill chunk
      Status d = glass_step(42, 1);      // decode with the glass box on
      Status e = glass_step(0, 20);      // prefill with the glass box on (a fresh start)
      const long allocs = count.stop();
      EXPECT_TRUE(a.is_ok() && b.is_ok() && c.is_ok() && d.is_ok() && e.is_ok());
      EXPECT_GT(acc.report().stats[0].n_tokens, 0);
      EXPECT_TRUE(acc.report().captures[0].filled);
      EXPECT_GT(acc.report().applied[3].rows, 0);  // the skip ran
      EXPECT_EQ(acc.report().layer_time.steps, 4);
      EXPECT_GT(acc.report().applied[4].rows, 0);  // the attn_in set ran
      ASSERT_FALSE(acc.report().sinks.empty());
      EXPECT_GT(acc.report().sinks[0].n_tokens, 0);
      EXPECT_EQ(allocs, 0);
      EXPECT_GT(obs.rows, 0);
    }
  }
}

}  // namespace
}  // namespace gb

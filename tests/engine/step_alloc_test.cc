// "Nothing allocates in the step": the engine step's schedule → run → sample → commit, warmed up,
// on decode steps of a plain and a steered, observed sequence, performs no heap allocation (the
// events the engine then pushes into channels are the only allocation per token). The forward
// pass alone is checked in tests/model/alloc_test.
#include <gtest/gtest.h>

#include "engine/model_runner.h"
#include "support/alloc_counter.h"
#include "support/test_support.h"

namespace gb {
namespace {

TEST(StepAllocation, WarmDecodeStepsDoNotAllocate) {
  for (const char* rel : {"models/stories260K", "testdata/reference/qwen35-hybrid/gguf/model-q8_0.gguf"}) {
    SCOPED_TRACE(rel);
    auto m = load_model(test::shared_path(rel), {.max_batch_tokens = 32, .n_threads = 2});
    ASSERT_TRUE(m.is_ok()) << m.message();
    const ModelConfig& c = (*m)->config();
    const SchedulerConfig sc{.max_num_seqs = 4, .max_num_batched_tokens = 32, .recurrent_state = c.hybrid()};
    auto cache = KvCache::create(c, 16, 16, sc.max_num_seqs);
    ASSERT_TRUE(cache.is_ok());
    BlockManager blocks((*cache)->n_blocks(), 16, (*cache)->n_state_slots());
    Scheduler scheduler(sc, &blocks);
    MonitorConfig monitor;
    monitor.enabled = true;
    ModelRunner runner(m->get(), std::move(*cache), sc.max_num_seqs, 16, monitor);

    GlassSpec spec;
    spec.interventions.push_back({.op = InterventionOp::kScale,
                                  .point = HookPoint::kMlpAct,
                                  .layer_first = 0,
                                  .layer_last = 0,
                                  .dims = {3},
                                  .strength = 0.5f});
    spec.observe.enabled = true;
    spec.observe.top_k = 4;
    spec.observe.sink_tokens = 2;
    spec.observe.captures = {{HookPoint::kResidPost, 1, 30}, {HookPoint::kLogits, -1, 31}};
    spec.observe.layer_time = true;               // the runner's finish_forward adds each step's times
    spec.massive.median = MassiveMedian::kLayer;  // decode rows use the stored prompt median
    auto resolved = resolve_glass_spec(spec, c);
    ASSERT_TRUE(resolved.is_ok()) << resolved.message();
    std::vector<float> scratch(static_cast<size_t>(c.vocab));
    for (int k = 0; k < 2; ++k) {
      auto seq = std::make_unique<Sequence>();
      SamplingParams sp;
      sp.temperature = k == 0 ? 0.0f : 0.8f;
      sp.seed = 7;
      sp.has_seed = true;
      seq->sampler = std::make_unique<Sampler>(sp, c.vocab);
      seq->tokens.assign(10, 5 + k);
      seq->tokens.reserve(60);
      seq->n_prompt = 10;
      if (k == 1) seq->glass = std::make_unique<GlassAccumulator>(*resolved, c);
      scheduler.add(std::move(seq));
    }
    auto step = [&] {
      const auto& scheduled = scheduler.schedule();
      if (!runner.run(scheduled).is_ok()) return false;
      int32_t row = 0;
      for (const ScheduledSeq& s : scheduled) {
        if (!s.samples) continue;
        float* logits = runner.logits(row++);
        if (!all_finite(logits, c.vocab)) return false;
        s.seq->tokens.push_back(s.seq->sampler->sample(logits, -1, scratch).token);
      }
      scheduler.commit();
      return true;
    };
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(step());  // prompts, then decode: scratch buffers grow once
    test::AllocCounter count;
    bool ok = true;
    for (int i = 0; i < 30; ++i) ok &= step();  // crosses block boundaries, the capture positions and monitor steps
    const long allocs = count.stop();
    EXPECT_TRUE(ok);
    EXPECT_EQ(allocs, 0);
    EXPECT_TRUE(scheduler.running()[1]->glass->report().captures[1].filled);
    EXPECT_EQ(scheduler.running()[1]->glass->report().layer_time.steps, 33);
    ASSERT_FALSE(scheduler.running()[1]->glass->report().sinks.empty());
    EXPECT_EQ(scheduler.running()[1]->glass->report().sinks[0].n_tokens, 42);  // 10 prompt + 32 decoded rows
    EXPECT_EQ(scheduler.running()[0]->tokens.size(), 43u);
  }
}

}  // namespace
}  // namespace gb

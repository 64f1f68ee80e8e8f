// The massive-activation rule on hand-built rows, through GlassStep::apply as the forward pass
// calls it: the layer median (Sun et al.: over every value of the sequence's rows in the step)
// against the token median (the row's own), where the two disagree both ways; each fire_on mode;
// a decode row compared with the median stored from its prompt's step; the monitor's per-sequence
// median; the median against a full sort. And observe.layer_time over real forward passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "glass/codec.h"
#include "glass/glass.h"
#include "model/model.h"
#include "support/test_support.h"

namespace gb {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.n_layers = 1;
  c.n_embd = 8;
  c.n_ff = 16;
  c.vocab = 32;
  return c;
}

std::shared_ptr<const GlassSpec> rule_spec(const ModelConfig& c, const MassiveRule& rule) {
  GlassSpec s;
  s.observe.enabled = true;
  s.observe.points = {HookPoint::kResidPost};
  s.massive = rule;
  auto r = resolve_glass_spec(std::move(s), c);
  EXPECT_TRUE(r.is_ok()) << r.message();
  return r.is_ok() ? *r : nullptr;
}

// One sequence of a hand-built step: rows.size() / n_embd rows at positions first_pos...
struct Seg {
  GlassAccumulator* acc;  // may be null (only the monitor sees the rows)
  int32_t first_pos;
  std::vector<std::vector<float>> rows;
};

// Applies layer 0's resid_post of one step holding segs (in order) as the forward pass would.
void apply_step(const ModelConfig& c, const std::vector<Seg>& segs, const MonitorConfig* mc = nullptr,
                MonitorStep* mon = nullptr, ThreadPool* pool = nullptr) {
  Batch batch;
  std::vector<float> data;
  GlassStep step(c);
  step.set_pool(pool);
  int32_t row = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    const int32_t n = static_cast<int32_t>(segs[s].rows.size());
    for (int32_t i = 0; i < n; ++i) {
      batch.positions.push_back(segs[s].first_pos + i);
      batch.seq_index.push_back(static_cast<int32_t>(s));
      batch.tokens.push_back(3);
      EXPECT_EQ(segs[s].rows[static_cast<size_t>(i)].size(), static_cast<size_t>(c.n_embd));
      data.insert(data.end(), segs[s].rows[static_cast<size_t>(i)].begin(), segs[s].rows[static_cast<size_t>(i)].end());
    }
    if (segs[s].acc != nullptr) step.add_sequence(row, n, segs[s].first_pos, 1 << 20, segs[s].acc);
    row += n;
  }
  if (mon != nullptr) step.set_monitor(*mc, mon);
  step.finalize();
  step.apply(HookPoint::kResidPost, 0, data.data(), row, c.n_embd, batch);
}

std::vector<float> row_of(float first, float rest) {
  std::vector<float> r(8, rest);
  r[0] = first;
  return r;
}

std::vector<int32_t> event_positions(const GlassReport& r) {
  std::vector<int32_t> p;
  for (const MassiveEvent& e : r.events) p.push_back(e.position);
  return p;
}

// The rows of the first scenario. min_abs 100, min_ratio 10; the layer median of the four rows
// (32 values: 7 × 0.001, 16 × 20, 7 × 100, 150, 500) is 20:
//   row 0: max 500, its own median 100: 500 > 10 × 20 (layer), but not > 10 × 100 (token);
//   row 1: max 150, its own median 0.001: 150 > 10 × 0.001 (token), but not > 10 × 20 (layer).
std::vector<std::vector<float>> disagreeing_rows() {
  return {row_of(500, 100), row_of(150, 0.001f), row_of(20, 20), row_of(20, 20)};
}

TEST(MassiveRule, LayerAndTokenMediansDisagreeBothWays) {
  const ModelConfig c = tiny();
  MassiveRule rule{.min_abs = 100, .min_ratio = 10};
  GlassAccumulator by_layer(rule_spec(c, rule), c);
  rule.median = MassiveMedian::kToken;
  GlassAccumulator by_token(rule_spec(c, rule), c);
  apply_step(c, {{&by_layer, 0, disagreeing_rows()}});
  apply_step(c, {{&by_token, 0, disagreeing_rows()}});

  const GlassReport rl = by_layer.report(), rt = by_token.report();
  ASSERT_EQ(rl.events.size(), 1u);
  const MassiveEvent& l = rl.events[0];
  EXPECT_EQ(l.position, 0) << "massive against the layer's median, not against its own row's";
  EXPECT_EQ(l.median, MassiveMedian::kLayer);
  EXPECT_EQ(l.median_abs, 20.0f);
  EXPECT_EQ(l.value, 500.0f);
  EXPECT_EQ(l.ratio, 25.0f);
  EXPECT_TRUE(l.abs_test && l.ratio_test);

  ASSERT_EQ(rt.events.size(), 1u);
  const MassiveEvent& t = rt.events[0];
  EXPECT_EQ(t.position, 1) << "massive against its own row's median, not against the layer's";
  EXPECT_EQ(t.median, MassiveMedian::kToken);
  EXPECT_EQ(t.median_abs, 0.001f);
  EXPECT_TRUE(t.abs_test && t.ratio_test);
  // The statistics are the same either way (the rule changes only the events).
  ASSERT_EQ(rl.stats.size(), 1u);
  EXPECT_EQ(rl.stats[0].max_abs, rt.stats[0].max_abs);
  EXPECT_EQ(rl.stats[0].median_abs, rt.stats[0].median_abs);
}

// Two sequences in one step, each with its own layer median (x: 1, y: 10); min_abs 3000,
// min_ratio 1000. x0 = 4000 passes both tests, x1 = 2000 only the ratio one (> 1000 × 1), y0 =
// 5000 only the absolute one (not > 1000 × 10).
TEST(MassiveRule, FireOnModes) {
  const ModelConfig c = tiny();
  const std::vector<std::vector<float>> x = {row_of(4000, 1), row_of(2000, 1), row_of(1, 1), row_of(1, 1)};
  const std::vector<std::vector<float>> y = {row_of(5000, 10), row_of(10, 10), row_of(10, 10), row_of(10, 10)};
  struct Case {
    MassiveFire fire;
    std::vector<int32_t> x_events, y_events;
  };
  for (const Case& k : std::vector<Case>{{MassiveFire::kBoth, {0}, {}},
                                         {MassiveFire::kAbs, {0}, {0}},
                                         {MassiveFire::kRatio, {0, 1}, {}},
                                         {MassiveFire::kEither, {0, 1}, {0}}}) {
    SCOPED_TRACE(std::string(massive_fire_name(k.fire)));
    const MassiveRule rule{.min_abs = 3000, .min_ratio = 1000, .fire_on = k.fire};
    auto spec = rule_spec(c, rule);
    GlassAccumulator ax(spec, c), ay(spec, c);
    MonitorConfig mc;
    mc.enabled = true;
    mc.rule = rule;
    MonitorStep mon;
    apply_step(c, {{&ax, 0, x}, {&ay, 0, y}}, &mc, &mon);
    const GlassReport rx = ax.report(), ry = ay.report();
    EXPECT_EQ(event_positions(rx), k.x_events);
    EXPECT_EQ(event_positions(ry), k.y_events);
    for (const MassiveEvent& e : rx.events) {
      EXPECT_EQ(e.median_abs, 1.0f);
      EXPECT_EQ(e.abs_test, e.value > 3000);
      EXPECT_TRUE(e.ratio_test);
    }
    for (const MassiveEvent& e : ry.events) {
      EXPECT_EQ(e.median_abs, 10.0f);
      EXPECT_TRUE(e.abs_test);
      EXPECT_FALSE(e.ratio_test);
    }
    // The engine-wide monitor splits the batch by sequence the same way.
    ASSERT_EQ(mon.events.size(), k.x_events.size() + k.y_events.size());
    size_t i = 0;
    for (int32_t p : k.x_events) {
      EXPECT_EQ(mon.events[i].seq_index, 0);
      EXPECT_EQ(mon.events[i].event.position, p);
      EXPECT_EQ(mon.events[i++].event.median_abs, 1.0f);
    }
    for (int32_t p : k.y_events) {
      EXPECT_EQ(mon.events[i].seq_index, 1);
      EXPECT_EQ(mon.events[i].event.position, p);
      EXPECT_EQ(mon.events[i++].event.median_abs, 10.0f);
    }
  }
}

// The monitor asks for a sequence's layer median only when massive_needs_median says a row's max
// could fire with some median: where it says no, no median of any size makes is_massive fire.
TEST(MassiveRule, MedianIsSkippedOnlyWhereItCannotMatter) {
  const float values[] = {0.0f, 1e-30f, 0.5f, 99.0f, 100.0f, 100.5f, 2000.0f, 1e30f, INFINITY};
  int skipped = 0;
  for (MassiveFire fire : {MassiveFire::kBoth, MassiveFire::kAbs, MassiveFire::kRatio, MassiveFire::kEither}) {
    const MassiveRule rule{.min_abs = 100, .min_ratio = 10, .fire_on = fire};
    for (float max_abs : values) {
      if (massive_needs_median(rule, max_abs)) continue;
      ++skipped;
      for (float median : values) {
        EXPECT_FALSE(is_massive(rule, max_abs, median).massive())
            << massive_fire_name(fire) << " max " << max_abs << " median " << median;
      }
    }
    if (fire == MassiveFire::kRatio || fire == MassiveFire::kEither) {
      EXPECT_TRUE(massive_needs_median(rule, 0.5f)) << "the ratio test alone can fire below min_abs";
    }
  }
  EXPECT_EQ(skipped, 10) << "rows at or below min_abs under both and abs (5 values each)";
}

// The monitor takes a sequence's layer median when a later row of it first needs one: a massive
// row third in its sequence, behind a sequence whose rows never pass min_abs, is compared with
// its own sequence's median over all of that sequence's rows.
TEST(MassiveRule, MonitorTakesTheLayerMedianAtTheFirstRowThatNeedsIt) {
  const ModelConfig c = tiny();
  const MassiveRule rule{.min_abs = 100, .min_ratio = 10};
  const std::vector<std::vector<float>> quiet = {row_of(50, 1), row_of(50, 1)};
  // The loud sequence's layer median (32 values: 10 × 2, 4 × 4, 16 × 5, 8, 3000) is 5; its rows
  // from the massive one on would give 2, the massive row alone 4, the quiet sequence 1.
  std::vector<std::vector<float>> loud_rows = {row_of(5, 5), row_of(5, 5), row_of(3000, 4), row_of(8, 2)};
  loud_rows[2][1] = loud_rows[2][2] = loud_rows[2][3] = 2;
  MonitorConfig mc;
  mc.enabled = true;
  mc.rule = rule;
  MonitorStep mon;
  apply_step(c, {{nullptr, 0, quiet}, {nullptr, 0, loud_rows}}, &mc, &mon);
  ASSERT_EQ(mon.events.size(), 1u);
  EXPECT_EQ(mon.events[0].seq_index, 1);
  EXPECT_EQ(mon.events[0].event.position, 2);
  EXPECT_EQ(mon.events[0].event.median, MassiveMedian::kLayer);
  std::vector<float> all;
  for (const auto& r : loud_rows)
    for (float v : r) all.push_back(std::fabs(v));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(mon.events[0].event.median_abs, (all[15] + all[16]) / 2) << "the loud sequence's rows, all four";
  EXPECT_EQ(mon.events[0].event.median_abs, 5.0f);
}

// A decode step has one row of the sequence: it compares with the layer median of the sequence's
// last multi-row step (its prompt); a sequence with no such step yet compares with its own row.
TEST(MassiveRule, DecodeRowUsesTheStoredPromptMedian) {
  const ModelConfig c = tiny();
  const MassiveRule rule{.min_abs = 100, .min_ratio = 10};
  auto spec = rule_spec(c, rule);
  GlassAccumulator acc(spec, c);
  apply_step(c, {{&acc, 0, disagreeing_rows()}});  // the prompt: layer median 20
  // The decode row: max 300, its own median 100 (300 < 10 × 100), but 300 > 10 × 20.
  apply_step(c, {{&acc, 4, {row_of(300, 100)}}});
  GlassReport r = acc.report();
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[1].position, 4);
  EXPECT_EQ(r.events[1].median, MassiveMedian::kLayer);
  EXPECT_EQ(r.events[1].median_abs, 20.0f) << "the prompt's median, stored";
  // A second decode row whose value is not massive against the prompt's median: no event.
  apply_step(c, {{&acc, 5, {row_of(150, 0.001f)}}});
  EXPECT_EQ(acc.report().events.size(), 2u);

  // Without a multi-row step before it, a single row compares with its own median.
  GlassAccumulator fresh(spec, c);
  apply_step(c, {{&fresh, 7, {row_of(150, 0.001f)}}});
  r = fresh.report();
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].median, MassiveMedian::kToken);
  EXPECT_EQ(r.events[0].median_abs, 0.001f);

  // Observing only generated tokens, the prompt's rows are not observed but their median is
  // kept for the decode rows.
  GlassSpec gen;
  gen.observe.enabled = true;
  gen.observe.tokens.scope = TokenScope::kGenerated;
  gen.massive = rule;
  auto gen_spec = resolve_glass_spec(std::move(gen), c);
  ASSERT_TRUE(gen_spec.is_ok());
  GlassAccumulator g(*gen_spec, c);
  Batch batch;
  batch.positions = {0, 1, 2, 3};
  batch.seq_index = {0, 0, 0, 0};
  std::vector<float> data;
  for (const auto& row : disagreeing_rows()) data.insert(data.end(), row.begin(), row.end());
  {
    GlassStep step(c);
    step.add_sequence(0, 4, 0, /*n_prompt=*/4, &g);
    step.finalize();
    step.apply(HookPoint::kResidPost, 0, data.data(), 4, c.n_embd, batch);
  }
  EXPECT_TRUE(g.report().events.empty());
  EXPECT_EQ(g.report().stats[0].n_tokens, 0);
  {
    GlassStep step(c);
    step.add_sequence(0, 1, 4, /*n_prompt=*/4, &g);
    step.finalize();
    batch.positions = {4};
    batch.seq_index = {0};
    std::vector<float> row = row_of(300, 100);
    step.apply(HookPoint::kResidPost, 0, row.data(), 1, c.n_embd, batch);
  }
  r = g.report();
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].median_abs, 20.0f);
  EXPECT_EQ(r.events[0].median, MassiveMedian::kLayer);
}

// The layer median of random rows equals a full sort's over every value of the sequence's rows
// (a second sequence in the same step has its own).
TEST(MassiveRule, LayerMedianEqualsSortedReference) {
  ModelConfig c = tiny();
  c.n_embd = 16;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const MassiveRule rule{.min_abs = 50, .min_ratio = 100};
  auto spec = rule_spec(c, rule);
  for (int32_t n_rows : {2, 3, 5, 9}) {
    std::vector<std::vector<float>> a(static_cast<size_t>(n_rows)), b(3);
    std::vector<double> all_a, all_b;
    for (auto* rows : {&a, &b}) {
      for (auto& r : *rows) {
        r.resize(16);
        for (auto& v : r) v = nd(rng);
      }
    }
    a[static_cast<size_t>(n_rows) - 1][7] = -900.0f;  // one massive value, in the last row
    b[1][2] = 1e4f;
    for (const auto& r : a)
      for (float v : r) all_a.push_back(std::fabs(v));
    for (const auto& r : b)
      for (float v : r) all_b.push_back(std::fabs(v));
    auto sorted_median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const size_t m = v.size() / 2;
      return v.size() % 2 ? static_cast<float>(v[m]) : static_cast<float>((v[m - 1] + v[m]) / 2);
    };
    GlassAccumulator acc_a(spec, c), acc_b(spec, c);
    apply_step(c, {{&acc_a, 0, a}, {&acc_b, 0, b}});
    const GlassReport ra = acc_a.report(), rb = acc_b.report();
    ASSERT_EQ(ra.events.size(), 1u) << n_rows;
    EXPECT_EQ(ra.events[0].position, n_rows - 1);
    EXPECT_EQ(ra.events[0].dim, 7);
    EXPECT_EQ(ra.events[0].median_abs, sorted_median(all_a)) << n_rows;
    ASSERT_EQ(rb.events.size(), 1u);
    EXPECT_EQ(rb.events[0].median_abs, sorted_median(all_b));
  }
}

// observe.layer_time over real forward passes (a prefill and decode steps): per-layer times all
// positive, shares of the total summing to 1, and the whole no more than the wall time around
// the forwards. Nothing else is timing-dependent.
TEST(LayerTime, SharesSumToOneWithinTheWallTime) {
  auto m = load_model(test::shared_path("models/stories260K"), {.max_batch_tokens = 64, .n_threads = 1});
  ASSERT_TRUE(m.is_ok()) << m.message();
  const ModelConfig& c = (*m)->config();
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.layers = {1};  // statistics of one layer; the time of every layer
  spec.observe.layer_time = true;
  auto resolved = resolve_glass_spec(std::move(spec), c);
  ASSERT_TRUE(resolved.is_ok());
  GlassAccumulator acc(*resolved, c);
  auto cache = KvCache::create(c, 8, 16);
  ASSERT_TRUE(cache.is_ok());
  std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<int32_t> ids = {1, 403, 407, 261, 378, 6, 83, 40, 7, 91, 2, 97};
  std::vector<float> logits(static_cast<size_t>(c.vocab) * ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  int steps = 0;
  for (int32_t pos = 0; pos < static_cast<int32_t>(ids.size());) {
    const int32_t n = pos == 0 ? 8 : 1;  // a prompt of 8, then one token a step
    Batch batch;
    batch.add_sequence(std::span(ids).subspan(static_cast<size_t>(pos), static_cast<size_t>(n)), pos, table, 16, false);
    GlassStep step(c);
    step.add_sequence(0, n, pos, 8, &acc);
    step.finalize();
    Hooks hooks(c.n_layers);
    hooks.set_glass(&step);
    ASSERT_TRUE((*m)->forward(batch, **cache, &hooks, logits.data()).is_ok());
    step.finish_forward();
    pos += n, ++steps;
  }
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const GlassReport r = acc.report();
  ASSERT_TRUE(r.layer_time.enabled);
  EXPECT_EQ(r.layer_time.steps, steps);
  ASSERT_EQ(r.layer_time.layer_ms.size(), static_cast<size_t>(c.n_layers));
  double sum = r.layer_time.head_ms;
  for (double ms : r.layer_time.layer_ms) {
    EXPECT_GT(ms, 0.0);
    sum += ms;
  }
  EXPECT_GT(r.layer_time.head_ms, 0.0);
  EXPECT_LE(sum, wall_ms);
  const nlohmann::json j = layer_time_json(r.layer_time);
  double shares = j["head"]["share"].get<double>();
  for (const auto& l : j["layers"]) {
    EXPECT_GT(l["share"].get<double>(), 0.0);
    shares += l["share"].get<double>();
  }
  EXPECT_NEAR(shares, 1.0, 1e-6);
  EXPECT_NEAR(j["total_ms"].get<double>(), sum, 1e-9);
  std::printf("layer_time over %d steps: %.3f ms of %.3f ms wall (head %.1f%%)\n", steps, sum, wall_ms,
              100 * j["head"]["share"].get<double>());
}

}  // namespace
}  // namespace gb

namespace gb {
namespace {

// The monitor spread over a pool gives what one thread gives: the same per-layer maxima, the
// same events in the same (row) order, the same drop count — for both medians, with sequences of
// one row (decode) and of many (prefill, whose layer median needs all its rows in one share),
// and past MonitorStep::kMaxEvents.
TEST(MonitorPool, SameResultAsOneThread) {
  const ModelConfig c = tiny();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random_row = [&](bool massive) {
    std::vector<float> r(static_cast<size_t>(c.n_embd));
    for (float& v : r) v = u(rng);
    if (massive) r[static_cast<size_t>(rng() % r.size())] = (rng() % 2 ? 1.0f : -1.0f) * (150.0f + 50.0f * u(rng));
    return r;
  };
  // Three batches: 40 one-row sequences; long and short sequences mixed; 400 massive rows (> kMaxEvents).
  std::vector<std::vector<Seg>> batches(3);
  for (int s = 0; s < 40; ++s) batches[0].push_back({nullptr, 10 + s, {random_row(s % 3 == 0)}});
  for (int s = 0; s < 9; ++s) {
    Seg seg{nullptr, 0, {}};
    const int n = s % 3 == 0 ? 23 : 1 + s;
    for (int i = 0; i < n; ++i) seg.rows.push_back(random_row(i % 5 == 1));
    batches[1].push_back(seg);
  }
  for (int s = 0; s < 100; ++s) {
    Seg seg{nullptr, 0, {}};
    for (int i = 0; i < 4; ++i) seg.rows.push_back(random_row(true));
    batches[2].push_back(seg);
  }
  ThreadPool pool(3);
  for (MassiveMedian median : {MassiveMedian::kLayer, MassiveMedian::kToken}) {
    MonitorConfig mc;
    mc.enabled = true;
    mc.rule.min_abs = 100;
    mc.rule.min_ratio = 50;
    mc.rule.median = median;
    for (size_t b = 0; b < batches.size(); ++b) {
      SCOPED_TRACE(::testing::Message() << "batch " << b << (median == MassiveMedian::kLayer ? " layer" : " token"));
      MonitorStep one, many;
      one.reset(c.n_layers);
      many.reset(c.n_layers);
      apply_step(c, batches[b], &mc, &one);
      apply_step(c, batches[b], &mc, &many, &pool);
      ASSERT_GT(one.events.size(), 0u);
      EXPECT_EQ(many.rows, one.rows);
      EXPECT_EQ(many.max_abs, one.max_abs);
      EXPECT_EQ(many.max_ratio, one.max_ratio);
      EXPECT_EQ(many.events_dropped, one.events_dropped);
      ASSERT_EQ(many.events.size(), one.events.size());
      for (size_t i = 0; i < one.events.size(); ++i) {
        const MassiveEvent &a = one.events[i].event, &e = many.events[i].event;
        EXPECT_EQ(many.events[i].seq_index, one.events[i].seq_index) << i;
        EXPECT_EQ(e.position, a.position) << i;
        EXPECT_EQ(e.dim, a.dim) << i;
        EXPECT_EQ(e.value, a.value) << i;
        EXPECT_EQ(e.median_abs, a.median_abs) << i;
        EXPECT_EQ(e.median, a.median) << i;
        EXPECT_EQ(e.ratio, a.ratio) << i;
      }
      if (b == 2) {
        EXPECT_GT(one.events_dropped, 0);
      }
    }
  }
}

}  // namespace
}  // namespace gb

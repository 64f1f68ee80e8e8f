// The attn_in hook point and the attention-sink statistic in Model::forward, against plain scalar
// code in this file working from the fixtures' own HF weights: attn_in = RMSNorm(resid_pre) · w on
// both layer kinds; an edit at attn_in is exactly an edit of what q/k/v (or the delta net's
// projections) read; the sink masses equal the softmax weights computed here from q and k (RMSNorm,
// projections, q/k norm, RoPE, GQA mapping, 1/sqrt(head_dim), softmax) under token selectors,
// chunked prefill and recomputation, and only full-attention layers report them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/safetensors.h"
#include "glass/glass.h"
#include "model/model.h"
#include "model/observers.h"
#include "support/glass_fixtures.h"
#include "support/test_support.h"

namespace gb {
namespace {

std::unique_ptr<Model> load(const std::string& path) { return test::load_glass_model(path, 2); }
std::shared_ptr<const GlassSpec> resolve(GlassSpec spec, const Model& m) {
  return test::resolve_for(std::move(spec), m);
}
std::vector<int32_t> prompt_ids(int n, int vocab, uint32_t seed) { return test::random_prompt(n, vocab, seed); }

bool bitwise_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && bitwise_equal(a.data(), b.data(), a.size());
}
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// A fixture's HF tensors (F32) by name, and its config.json.
struct Hf {
  std::map<std::string, std::vector<float>> t;
  nlohmann::json config;
  const std::vector<float>& at(const std::string& name) const {
    auto it = t.find(name);
    EXPECT_NE(it, t.end()) << name;
    static const std::vector<float> empty;
    return it == t.end() ? empty : it->second;
  }
};

Hf load_hf(const std::string& dir) {
  Hf hf;
  auto st = read_safetensors(dir + "/model.safetensors");
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (st.is_ok()) {
    for (const auto& v : st->tensors) {
      EXPECT_EQ(v.dtype, DType::kF32) << v.name;
      std::vector<float> data(static_cast<size_t>(v.numel()));
      std::memcpy(data.data(), v.data, v.nbytes);
      hf.t[v.name] = std::move(data);
    }
  }
  std::ifstream in(dir + "/config.json");
  hf.config = nlohmann::json::parse(in);
  if (hf.config.contains("text_config")) hf.config = hf.config["text_config"];
  return hf;
}

// RMSNorm of one row in double: x / sqrt(mean x² + eps) · w (w_plus_one: · (1 + w), Qwen3.5's
// zero-centred HF norms).
std::vector<double> rms_norm_row(const float* x, int64_t n, const std::vector<float>& w, double eps, bool w_plus_one) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * (w_plus_one ? 1.0 + w[i] : static_cast<double>(w[i]));
  return y;
}

// W[rows, cols] · x (HF linear weight, row-major [out, in]).
std::vector<double> linear(const std::vector<float>& w, int64_t rows, int64_t cols, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(w[r * cols + c]) * x[c];
    y[r] = acc;
  }
  return y;
}

// One forward per chunk [first, first + n) of ids through one accumulator (acc may be null);
// obs (may be null) watches `points` on every layer. Returns the logits of the last chunk.
std::vector<float> run_chunks(Model& m, const std::vector<int32_t>& ids, const std::vector<std::pair<int, int>>& chunks,
                              GlassAccumulator* acc, Observer* obs = nullptr, std::vector<HookPoint> points = {}) {
  const ModelConfig& c = m.config();
  auto cache = KvCache::create(c, 64, 16, 1);
  EXPECT_TRUE(cache.is_ok());
  std::vector<int32_t> table;
  for (size_t b = 0; b * 16 < ids.size(); ++b) table.push_back(static_cast<int32_t>(b));
  std::vector<float> logits;
  GlassStep step(c);
  for (auto [first, n] : chunks) {
    Batch batch;
    batch.add_sequence(std::span<const int32_t>(ids).subspan(first, n), first, table, 16, true, 0);
    step.clear();
    if (acc != nullptr) step.add_sequence(0, n, first, static_cast<int32_t>(ids.size()), acc);
    step.finalize();
    Hooks hooks(c.n_layers);
    for (HookPoint p : points) hooks.watch(p, -1, obs);
    hooks.set_glass(&step);
    logits.assign(static_cast<size_t>(batch.n_out()) * c.vocab, 0.0f);
    EXPECT_TRUE(m.forward(batch, **cache, &hooks, logits.data()).is_ok());
  }
  return logits;
}

std::vector<float> run_once(Model& m, const std::vector<int32_t>& ids, std::shared_ptr<const GlassSpec> spec,
                            CaptureObserver* cap = nullptr, std::vector<HookPoint> points = {}) {
  std::unique_ptr<GlassAccumulator> acc;
  if (spec != nullptr) acc = std::make_unique<GlassAccumulator>(spec, m.config());
  return run_chunks(m, ids, {{0, static_cast<int>(ids.size())}}, acc.get(), cap, std::move(points));
}

GlassSpec one_intervention(InterventionOp op, HookPoint p, int32_t layer, std::vector<int32_t> dims, float strength) {
  GlassSpec s;
  s.interventions.push_back(
      {.op = op, .point = p, .layer_first = layer, .layer_last = layer, .dims = std::move(dims), .strength = strength});
  return s;
}

// ---- attn_in ----

TEST(AttnIn, IsTheAttentionNormOfResidPreOnEveryLayerKind) {
  for (const char* fixture : {"llama-gqa", "qwen35-hybrid"}) {
    SCOPED_TRACE(fixture);
    const std::string dir = test::shared_path(std::string("testdata/reference/") + fixture + "/hf");
    auto m = load(dir);
    ASSERT_NE(m, nullptr);
    const Hf hf = load_hf(dir);
    const bool hybrid = m->config().hybrid();
    const double eps = hf.config["rms_norm_eps"].get<double>();
    const int64_t n_embd = m->config().n_embd;
    const auto ids = prompt_ids(23, m->config().vocab, 3);
    CaptureObserver cap;
    run_once(*m, ids, nullptr, &cap, {HookPoint::kResidPre, HookPoint::kAttnIn});
    double worst = 0;
    for (int32_t l = 0; l < m->config().n_layers; ++l) {
      const auto* pre = cap.find(0, hook_key(HookPoint::kResidPre, l));
      const auto* in = cap.find(0, hook_key(HookPoint::kAttnIn, l));
      ASSERT_TRUE(pre != nullptr && in != nullptr) << l;
      ASSERT_EQ(in->width, n_embd);
      ASSERT_EQ(in->n_rows, static_cast<int64_t>(ids.size()));
      const auto& w = hf.at("model.layers." + std::to_string(l) + ".input_layernorm.weight");
      for (size_t t = 0; t < ids.size(); ++t) {
        const auto want = rms_norm_row(pre->data.data() + t * n_embd, n_embd, w, eps, hybrid);
        for (int64_t i = 0; i < n_embd; ++i)
          worst = std::max(worst, std::fabs(in->data[t * n_embd + i] - want[i]) / std::max(1.0, std::fabs(want[i])));
      }
    }
    EXPECT_LE(worst, 1e-6);
    std::printf("%s: attn_in vs scalar RMSNorm(resid_pre)·w: max error %.2g\n", fixture, worst);
  }
}

TEST(AttnIn, IdentityScaleIsBitwiseNone) {
  for (const char* fixture : {"llama-gqa", "qwen35-hybrid"}) {
    SCOPED_TRACE(fixture);
    auto m = load(test::shared_path(std::string("testdata/reference/") + fixture + "/hf"));
    ASSERT_NE(m, nullptr);
    const auto ids = prompt_ids(19, m->config().vocab, 5);
    const auto base = run_once(*m, ids, nullptr);
    const auto same =
        run_once(*m, ids, resolve(one_intervention(InterventionOp::kScale, HookPoint::kAttnIn, -1, {}, 0), *m));
    EXPECT_TRUE(bitwise_equal(base, same));
  }
}

// Setting attn_in dim d to 0 at layer l is exactly zeroing column d of the weights that read the
// attention norm's output at l (q/k/v, or the delta net's four input projections): the edit
// reaches what the mixer reads and nothing else; resid_pre of l is untouched.
TEST(AttnIn, SetEqualsTheModelWithThoseInputColumnsZeroed) {
  struct Case {
    const char* fixture;
    int32_t layer;
    std::vector<const char*> projections;
  };
  const std::vector<Case> cases = {
      {"llama-gqa", 1, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
      {"qwen35-hybrid",
       0,
       {"linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a"}},
      {"qwen35-hybrid", 3, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
  };
  const int32_t dim = 17;
  for (const Case& cs : cases) {
    SCOPED_TRACE(std::string(cs.fixture) + " layer " + std::to_string(cs.layer));
    const std::string dir = test::shared_path(std::string("testdata/reference/") + cs.fixture + "/hf");
    auto m = load(dir);
    ASSERT_NE(m, nullptr);
    const int64_t n_embd = m->config().n_embd;
    const auto ids = prompt_ids(21, m->config().vocab, 9);
    CaptureObserver cap0, cap1;
    const std::vector<HookPoint> pts = {HookPoint::kResidPre, HookPoint::kAttnIn};
    const auto base = run_once(*m, ids, nullptr, &cap0, pts);
    const auto spec = resolve(one_intervention(InterventionOp::kSet, HookPoint::kAttnIn, cs.layer, {dim}, 0), *m);
    const auto edited = run_once(*m, ids, spec, &cap1, pts);
    EXPECT_GT(max_abs_diff(base, edited), 1e-4);  // the edit matters
    const std::string pre_key = hook_key(HookPoint::kResidPre, cs.layer),
                      in_key = hook_key(HookPoint::kAttnIn, cs.layer);
    ASSERT_TRUE(cap0.find(0, pre_key) && cap1.find(0, pre_key) && cap0.find(0, in_key) && cap1.find(0, in_key));
    EXPECT_TRUE(bitwise_equal(cap0.find(0, pre_key)->data, cap1.find(0, pre_key)->data));
    // Observers see attn_in after the edit: the unedited rows with dim 17 set to 0.
    std::vector<float> want = cap0.find(0, in_key)->data;
    for (size_t t = 0; t < ids.size(); ++t) want[t * n_embd + dim] = 0.0f;
    EXPECT_TRUE(bitwise_equal(want, cap1.find(0, in_key)->data));

    const std::string prefix = "model.layers." + std::to_string(cs.layer) + ".";
    const std::string zeroed = test::write_edited_fixture(
        dir, [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& v) {
          for (const char* p : cs.projections) {
            if (name != prefix + p + ".weight") continue;
            ASSERT_EQ(shape.size(), 2u);
            ASSERT_EQ(shape[1], n_embd);
            for (int64_t r = 0; r < shape[0]; ++r) v[r * n_embd + dim] = 0.0f;
          }
        });
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"}) {
      if (std::filesystem::exists(dir + "/" + f)) std::filesystem::copy_file(dir + "/" + f, zeroed + "/" + f);
    }
    auto mz = load(zeroed);
    ASSERT_NE(mz, nullptr);
    const auto via_weights = run_once(*mz, ids, nullptr);
    EXPECT_TRUE(bitwise_equal(edited, via_weights)) << "max diff " << max_abs_diff(edited, via_weights);
  }
}

TEST(AttnIn, InterventionsThereChangeTheKvSalt) {
  auto m = load(test::shared_path("testdata/reference/llama-gqa/hf"));
  ASSERT_NE(m, nullptr);
  const auto at_in = resolve(one_intervention(InterventionOp::kSet, HookPoint::kAttnIn, 1, {17}, 0), *m);
  const auto at_pre = resolve(one_intervention(InterventionOp::kSet, HookPoint::kResidPre, 1, {17}, 0), *m);
  EXPECT_NE(glass_kv_salt(*at_in, 10), 0u);
  EXPECT_NE(glass_kv_salt(*at_in, 10), glass_kv_salt(*at_pre, 10));
}

TEST(AttnIn, ObservedAndCapturedThroughTheGlassBox) {
  auto m = load(test::shared_path("testdata/reference/qwen35-hybrid/hf"));
  ASSERT_NE(m, nullptr);
  const auto ids = prompt_ids(12, m->config().vocab, 4);
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.points = {HookPoint::kAttnIn};
  spec.observe.captures = {{HookPoint::kAttnIn, 0, 5}, {HookPoint::kAttnIn, 3, 11}};
  auto acc = std::make_unique<GlassAccumulator>(resolve(spec, *m), m->config());
  CaptureObserver cap;
  run_chunks(*m, ids, {{0, 12}}, acc.get(), &cap, {HookPoint::kAttnIn});
  const GlassReport r = acc->report();
  ASSERT_EQ(r.stats.size(), static_cast<size_t>(m->config().n_layers));
  for (const PointStats& s : r.stats) {
    EXPECT_EQ(s.point, HookPoint::kAttnIn);
    EXPECT_EQ(s.n_tokens, 12);
    EXPECT_GT(s.max_abs, 0);
  }
  ASSERT_EQ(r.captures.size(), 2u);
  const int64_t w = m->config().n_embd;
  for (const Capture& c : r.captures) {
    ASSERT_TRUE(c.filled);
    const auto* t = cap.find(0, hook_key(HookPoint::kAttnIn, c.layer));
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(bitwise_equal(c.data.data(), t->data.data() + c.position * w, static_cast<size_t>(w)));
  }
}

// ---- attention sinks ----

// The softmax mass each token's query heads put on key positions < n_sink at layer l, in double,
// from the captured resid_pre and the HF weights: [n_tokens][n_heads].
std::vector<std::vector<double>> reference_sinks(const Hf& hf, const ModelConfig& c, int32_t l, const float* resid_pre,
                                                 int64_t n_tokens, int64_t n_sink) {
  const int64_t n_embd = c.n_embd;
  const int64_t hd = hf.config.contains("head_dim") ? hf.config["head_dim"].get<int64_t>()
                                                    : n_embd / hf.config["num_attention_heads"].get<int64_t>();
  const int64_t nh = hf.config["num_attention_heads"].get<int64_t>(),
                nkv = hf.config["num_key_value_heads"].get<int64_t>();
  const double eps = hf.config["rms_norm_eps"].get<double>(), theta = hf.config["rope_theta"].get<double>();
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const bool qk_norm = hf.t.count(p + "self_attn.q_norm.weight") > 0;
  std::vector<std::vector<double>> q(n_tokens), k(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto xn = rms_norm_row(resid_pre + t * n_embd, n_embd, hf.at(p + "input_layernorm.weight"), eps, false);
    q[t] = linear(hf.at(p + "self_attn.q_proj.weight"), nh * hd, n_embd, xn);
    k[t] = linear(hf.at(p + "self_attn.k_proj.weight"), nkv * hd, n_embd, xn);
    auto head_norm = [&](std::vector<double>& v, int64_t heads, const std::vector<float>& w) {
      for (int64_t h = 0; h < heads; ++h) {
        double ss = 0;
        for (int64_t i = 0; i < hd; ++i) ss += v[h * hd + i] * v[h * hd + i];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(hd) + eps);
        for (int64_t i = 0; i < hd; ++i) v[h * hd + i] = v[h * hd + i] * inv * w[i];
      }
    };
    if (qk_norm) {
      head_norm(q[t], nh, hf.at(p + "self_attn.q_norm.weight"));
      head_norm(k[t], nkv, hf.at(p + "self_attn.k_norm.weight"));
    }
    // RoPE at position t, HF rotate_half: pairs (i, i + hd/2), frequency theta^(-2i/hd).
    auto rope = [&](std::vector<double>& v, int64_t heads) {
      for (int64_t h = 0; h < heads; ++h) {
        double* x = v.data() + h * hd;
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double a =
              static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
          const double x0 = x[i], x1 = x[i + hd / 2];
          x[i] = x0 * std::cos(a) - x1 * std::sin(a);
          x[i + hd / 2] = x1 * std::cos(a) + x0 * std::sin(a);
        }
      }
    };
    rope(q[t], nh);
    rope(k[t], nkv);
  }
  std::vector<std::vector<double>> mass(n_tokens, std::vector<double>(nh));
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t kh = h / (nh / nkv);
      std::vector<double> s(t + 1);
      double mx = -INFINITY;
      for (int64_t j = 0; j <= t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += q[t][h * hd + i] * k[j][kh * hd + i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0, first = 0;
      for (int64_t j = 0; j <= t; ++j) {
        const double e = std::exp(s[j] - mx);
        sum += e;
        if (j < n_sink) first += e;
      }
      mass[t][h] = first / sum;
    }
  }
  return mass;
}

struct SinkCase {
  const char* fixture;
  int32_t sink_tokens;
  TokenSelector tokens;
};

// The statistic equals the softmax weights computed from q and k of the fixture's own weights
// applied to the captured resid_pre: mean over the selected tokens, max and where it is.
TEST(AttentionSinks, EqualTheSoftmaxWeightsFromTheFixturesQAndK) {
  const std::vector<SinkCase> cases = {
      {"llama-gqa", 1, {}},
      {"llama-gqa", 3, {TokenScope::kPositions, {1, 2, 5, 16, 17, 30, 32}}},
      {"qwen3-qknorm", 1, {}},
      {"qwen3-qknorm", 2, {TokenScope::kPositions, {3, 4, 5, 6, 20, 31}}},
  };
  for (const SinkCase& sc : cases) {
    SCOPED_TRACE(std::string(sc.fixture) + " sink_tokens " + std::to_string(sc.sink_tokens));
    const std::string dir = test::shared_path(std::string("testdata/reference/") + sc.fixture + "/hf");
    auto m = load(dir);
    ASSERT_NE(m, nullptr);
    const ModelConfig& c = m->config();
    const Hf hf = load_hf(dir);
    const auto ids = prompt_ids(33, c.vocab, 11);  // three KV blocks of 16
    GlassSpec spec;
    spec.observe.enabled = true;
    spec.observe.sink_tokens = sc.sink_tokens;
    spec.observe.tokens = sc.tokens;
    auto acc = std::make_unique<GlassAccumulator>(resolve(spec, *m), c);
    CaptureObserver cap;
    run_chunks(*m, ids, {{0, 33}}, acc.get(), &cap, {HookPoint::kResidPre});
    const GlassReport r = acc->report();
    EXPECT_EQ(r.sink_tokens, sc.sink_tokens);
    ASSERT_EQ(r.sinks.size(), static_cast<size_t>(c.n_layers));
    std::vector<int32_t> selected;
    for (int32_t t = 0; t < 33; ++t) {
      if (sc.tokens.scope == TokenScope::kAll ||
          std::find(sc.tokens.positions.begin(), sc.tokens.positions.end(), t) != sc.tokens.positions.end())
        selected.push_back(t);
    }
    double worst = 0;
    for (const SinkStats& s : r.sinks) {
      const auto* pre = cap.find(0, hook_key(HookPoint::kResidPre, s.layer));
      ASSERT_NE(pre, nullptr);
      const auto want = reference_sinks(hf, c, s.layer, pre->data.data(), 33, sc.sink_tokens);
      EXPECT_EQ(s.n_tokens, static_cast<int64_t>(selected.size()));
      ASSERT_EQ(s.mean.size(), static_cast<size_t>(c.n_heads));
      for (int32_t h = 0; h < c.n_heads; ++h) {
        double mean = 0, mx = -1;
        for (int32_t t : selected) mean += want[t][h], mx = std::max(mx, want[t][h]);
        mean /= static_cast<double>(selected.size());
        worst = std::max(worst, std::fabs(s.mean[h] - mean));
        EXPECT_NEAR(s.mean[h], mean, 1e-5) << "layer " << s.layer << " head " << h;
        EXPECT_NEAR(s.max[h], mx, 1e-5) << "layer " << s.layer << " head " << h;
        // Where: a selected token whose reference mass is the max (a near-tie may pick either).
        ASSERT_NE(std::find(selected.begin(), selected.end(), s.max_position[h]), selected.end());
        EXPECT_NEAR(want[s.max_position[h]][h], mx, 1e-5);
      }
    }
    std::printf("%s sink_tokens %d: max |mean - reference| %.2g\n", sc.fixture, sc.sink_tokens, worst);
  }
}

TEST(AttentionSinks, ChunkedAndRecomputedCountEachTokenOnce) {
  auto m = load(test::shared_path("testdata/reference/llama-gqa/hf"));
  ASSERT_NE(m, nullptr);
  const auto ids = prompt_ids(33, m->config().vocab, 12);
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.sink_tokens = 2;
  const auto resolved = resolve(spec, *m);
  GlassAccumulator whole(resolved, m->config()), chunked(resolved, m->config()), again(resolved, m->config());
  run_chunks(*m, ids, {{0, 33}}, &whole);
  run_chunks(*m, ids, {{0, 10}, {10, 7}, {17, 1}, {18, 15}}, &chunked);
  // Preempted after 20 tokens, then recomputed from the start: positions 0..19 come again.
  run_chunks(*m, ids, {{0, 20}, {0, 16}, {16, 17}}, &again);
  const GlassReport a = whole.report(), b = chunked.report(), c = again.report();
  ASSERT_EQ(a.sinks.size(), 3u);
  ASSERT_EQ(b.sinks.size(), 3u);
  ASSERT_EQ(c.sinks.size(), 3u);
  for (size_t l = 0; l < a.sinks.size(); ++l) {
    EXPECT_EQ(a.sinks[l].n_tokens, 33);
    EXPECT_EQ(b.sinks[l].n_tokens, 33);
    EXPECT_EQ(c.sinks[l].n_tokens, 33);
    for (size_t h = 0; h < a.sinks[l].mean.size(); ++h) {
      EXPECT_NEAR(b.sinks[l].mean[h], a.sinks[l].mean[h], 1e-6);
      EXPECT_NEAR(c.sinks[l].mean[h], a.sinks[l].mean[h], 1e-6);
      EXPECT_EQ(b.sinks[l].max_position[h], a.sinks[l].max_position[h]);
    }
  }
}

TEST(AttentionSinks, OnlyFullAttentionLayersOfAHybridModel) {
  auto m = load(test::shared_path("testdata/reference/qwen35-hybrid/hf"));
  ASSERT_NE(m, nullptr);
  const auto ids = prompt_ids(20, m->config().vocab, 13);
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.sink_tokens = 1;
  const auto base = run_once(*m, ids, nullptr);
  auto acc = std::make_unique<GlassAccumulator>(resolve(spec, *m), m->config());
  const auto observed = run_chunks(*m, ids, {{0, 20}}, acc.get());
  EXPECT_TRUE(bitwise_equal(base, observed));  // observing changes nothing
  const GlassReport r = acc->report();
  ASSERT_EQ(r.sinks.size(), 1u);
  EXPECT_EQ(r.sinks[0].layer, 3);  // layers [linear, linear, linear, full]
  EXPECT_EQ(r.sinks[0].n_tokens, 20);
  for (float v : r.sinks[0].max) EXPECT_FLOAT_EQ(v, 1.0f);  // position 0 attends only to itself
  for (float v : r.sinks[0].mean) EXPECT_TRUE(v > 0 && v <= 1.0f);
  // Observing only linear layers: no sinks at all.
  spec.observe.layers = {0, 1};
  const auto linear_only = resolve(spec, *m);
  EXPECT_TRUE(linear_only->observe.sink_layers.empty());
  EXPECT_TRUE(GlassAccumulator(linear_only, m->config()).report().sinks.empty());
}

// Sequences in one batch: each gets its own sink_tokens, a sequence without sinks costs nothing
// and is unchanged, and each one's numbers equal its run alone.
TEST(AttentionSinks, PerSequenceInOneBatch) {
  auto m = load(test::shared_path("testdata/reference/qwen3-qknorm/hf"));
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  const auto a_ids = prompt_ids(18, c.vocab, 21), b_ids = prompt_ids(9, c.vocab, 22),
             c_ids = prompt_ids(14, c.vocab, 23);
  GlassSpec s1, s4;
  s1.observe.enabled = s4.observe.enabled = true;
  s1.observe.sink_tokens = 1;
  s4.observe.sink_tokens = 4;
  const auto r1 = resolve(s1, *m), r4 = resolve(s4, *m);
  GlassAccumulator a_alone(r1, c), c_alone(r4, c), a_batch(r1, c), c_batch(r4, c);
  run_chunks(*m, a_ids, {{0, 18}}, &a_alone);
  const auto b_alone_logits = run_chunks(*m, b_ids, {{0, 9}}, nullptr);
  run_chunks(*m, c_ids, {{0, 14}}, &c_alone);

  auto cache = KvCache::create(c, 64, 16, 3);
  ASSERT_TRUE(cache.is_ok());
  const std::vector<int32_t> ta = {0, 1}, tb = {2}, tc = {3};
  Batch batch;
  batch.add_sequence(a_ids, 0, ta, 16, true, 0);
  batch.add_sequence(b_ids, 0, tb, 16, true, 1);
  batch.add_sequence(c_ids, 0, tc, 16, true, 2);
  GlassStep step(c);
  step.add_sequence(0, 18, 0, 18, &a_batch);
  step.add_sequence(27, 14, 0, 14, &c_batch);
  step.finalize();
  Hooks hooks(c.n_layers);
  hooks.set_glass(&step);
  std::vector<float> logits(static_cast<size_t>(batch.n_out()) * c.vocab);
  ASSERT_TRUE(m->forward(batch, **cache, &hooks, logits.data()).is_ok());
  const std::vector<float> b_logits(logits.begin() + 18 * c.vocab, logits.begin() + 27 * c.vocab);
  EXPECT_TRUE(bitwise_equal(b_logits, b_alone_logits));
  for (auto [alone, batched] : {std::pair{&a_alone, &a_batch}, std::pair{&c_alone, &c_batch}}) {
    const GlassReport x = alone->report(), y = batched->report();
    ASSERT_EQ(x.sinks.size(), y.sinks.size());
    EXPECT_EQ(x.sink_tokens, y.sink_tokens);
    for (size_t l = 0; l < x.sinks.size(); ++l) {
      EXPECT_EQ(x.sinks[l].mean, y.sinks[l].mean);
      EXPECT_EQ(x.sinks[l].max, y.sinks[l].max);
      EXPECT_EQ(x.sinks[l].max_position, y.sinks[l].max_position);
    }
  }
}

TEST(AttentionSinks, ObservationBytesCountTheStorage) {
  auto m = load(test::shared_path("testdata/reference/qwen35-hybrid/hf"));
  ASSERT_NE(m, nullptr);
  GlassSpec spec;
  spec.observe.enabled = true;
  const auto plain = resolve(spec, *m);
  spec.observe.sink_tokens = 2;
  const auto sinks = resolve(spec, *m);
  // One full-attention layer: its token count and per-head sum, max and position.
  const int64_t extra = observation_bytes(*sinks, m->config()) - observation_bytes(*plain, m->config());
  EXPECT_GE(extra, int64_t{m->config().n_heads} * 16);
  EXPECT_LE(extra, int64_t{m->config().n_heads} * 32 + 64);
}

TEST(AttentionSinks, ResolutionChecksTheCount) {
  auto m = load(test::shared_path("testdata/reference/llama-gqa/hf"));
  ASSERT_NE(m, nullptr);
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.sink_tokens = kMaxSinkTokens + 1;
  auto r = resolve_glass_spec(spec, m->config());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("observe.attention_sinks.tokens"), std::string::npos) << r.message();
  spec.observe.enabled = false;
  spec.observe.sink_tokens = 1;
  r = resolve_glass_spec(spec, m->config());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("observe.attention_sinks"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace gb

// `glassbox bench`: prefill and decode tokens/s on synthetic token ids, like llama.cpp's
// llama-bench (pp = one prompt of N tokens, tg = N single-token steps from an empty cache),
// so the two can be run side by side on one GGUF file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/common_flags.h"
#include "model/model.h"
#include "model/session.h"

namespace gb::cli {
namespace {

struct BenchOptions {
  std::string model;
  int prompt_tokens = 512;
  int gen_tokens = 128;
  int threads = 0;
  int reps = 3;
  int batch = 512;
  double bandwidth_gbs = 0;
  bool json = false;
  bool convert_q8 = false;
};

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  if (v.empty()) return s;
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

int64_t weight_bytes(const ops::Weight& w) { return w.data ? w.rows * row_bytes(w.dtype, w.cols) : 0; }

// Bytes of weights one decode step streams from memory: every layer matrix and the lm_head
// (the embedding lookup reads a single row).
int64_t decode_weight_bytes(const ModelWeights& w) {
  int64_t total = weight_bytes(w.output);
  for (const auto& l : w.layers) {
    for (const ops::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.lin_qkv, &l.lin_z,
                                 &l.lin_b, &l.lin_a, &l.lin_out}) {
      total += weight_bytes(*m);
    }
  }
  return total;
}

int run_bench(const BenchOptions& o) {
  LoadOptions lo;
  lo.n_threads = o.threads;
  lo.max_batch_tokens = o.batch;
  lo.convert_to_q8 = o.convert_q8;
  auto model = load_model(o.model, lo);
  if (!model.is_ok()) {
    std::fprintf(stderr, "glassbox bench: %s\n", model.message().c_str());
    return 1;
  }
  Model& m = **model;
  const ModelConfig& cfg = m.config();
  const int32_t ctx = std::max(o.prompt_tokens, o.gen_tokens) + 1;
  if (ctx > cfg.max_pos) {
    std::fprintf(stderr, "glassbox bench: %d tokens exceed the model's context of %d\n", ctx, cfg.max_pos);
    return 1;
  }
  const int32_t block = 16;
  auto cache = KvCache::create(cfg, (ctx + block - 1) / block, block, /*n_state_slots=*/2);
  if (!cache.is_ok()) {
    std::fprintf(stderr, "glassbox bench: %s\n", cache.message().c_str());
    return 1;
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, cfg.vocab - 1);
  std::vector<int32_t> prompt(o.prompt_tokens);
  for (auto& t : prompt) t = pick(rng);

  using clock = std::chrono::steady_clock;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "glassbox bench: %s\n", s.message().c_str());
    return 1;
  };
  std::vector<double> pp, tg;
  // One warm-up round (page faults, caches), then reps measured rounds.
  for (int rep = -1; rep < o.reps; ++rep) {
    if (o.prompt_tokens > 0) {
      Session s(m, **cache);
      const auto t0 = clock::now();
      const Status st = s.feed(prompt);
      const double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (!st.is_ok()) return fail(st);
      if (rep >= 0) pp.push_back(o.prompt_tokens / dt);
    }
    if (o.gen_tokens > 0) {
      Session s(m, **cache);
      int32_t tok = prompt.empty() ? 1 : prompt[0];
      const auto t0 = clock::now();
      for (int i = 0; i < o.gen_tokens; ++i) {
        const Status st = s.feed(std::span<const int32_t>(&tok, 1));
        if (!st.is_ok()) return fail(st);
        tok = pick(rng);
      }
      const double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (rep >= 0) tg.push_back(o.gen_tokens / dt);
    }
  }
  const Stats pps = summarize(pp), tgs = summarize(tg);
  const int64_t bytes = decode_weight_bytes(m.weights());
  const double limit = o.bandwidth_gbs > 0 ? o.bandwidth_gbs * 1e9 / static_cast<double>(bytes) : 0;
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"describe", m.describe()},
                        {"threads", m.pool().size()},
                        {"reps", o.reps},
                        {"decode_weight_bytes", bytes}};
    if (o.prompt_tokens > 0)
      j["pp"] = {{"n_tokens", o.prompt_tokens}, {"tps_median", pps.median}, {"tps_min", pps.min}, {"tps_max", pps.max}};
    if (o.gen_tokens > 0)
      j["tg"] = {{"n_tokens", o.gen_tokens}, {"tps_median", tgs.median}, {"tps_min", tgs.min}, {"tps_max", tgs.max}};
    if (limit > 0) {
      j["bandwidth_gbs"] = o.bandwidth_gbs;
      j["tg_limit_tps"] = limit;
      j["tg_fraction_of_limit"] = tgs.median / limit;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model: %s\n", m.describe().c_str());
  std::printf("threads: %d, reps: %d (median [min, max])\n", m.pool().size(), o.reps);
  if (o.prompt_tokens > 0) std::printf("pp%-5d %9.2f t/s  [%.2f, %.2f]\n", o.prompt_tokens, pps.median, pps.min, pps.max);
  if (o.gen_tokens > 0) std::printf("tg%-5d %9.2f t/s  [%.2f, %.2f]\n", o.gen_tokens, tgs.median, tgs.min, tgs.max);
  std::printf("weights read per decode token: %.1f MB\n", bytes / 1e6);
  if (limit > 0) {
    std::printf("decode limit at %.1f GB/s: %.2f t/s; measured %.0f%% of it\n", o.bandwidth_gbs, limit,
                100.0 * tgs.median / limit);
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, Action* action) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill and decode tokens/s on synthetic token ids (like llama-bench)");
  add_model_flag(*cmd, &opts->model)->required();
  cmd->add_option("--prompt-tokens,-p", opts->prompt_tokens, "prompt length for the prefill test (0: skip)")->capture_default_str();
  cmd->add_option("--gen-tokens,-n", opts->gen_tokens, "tokens for the decode test (0: skip)")->capture_default_str();
  add_threads_flag(*cmd, &opts->threads);
  cmd->add_option("--reps,-r", opts->reps, "measured repetitions (after one warm-up)")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--batch,-b", opts->batch, "tokens per forward during prefill")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--bandwidth", opts->bandwidth_gbs, "measured memory bandwidth in GB/s, to report decode as a fraction of its limit");
  cmd->add_flag("--json", opts->json, "print one JSON object");
  cmd->add_flag("--convert-q8", opts->convert_q8, "convert f32/f16/bf16 matrices to Q8_0 at load (faster decode)");
  cmd->callback([action, opts] { *action = [opts] { return run_bench(*opts); }; });
}

}  // namespace gb::cli

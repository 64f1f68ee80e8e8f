// Glass-box overhead through the Engine: decode tokens/s at N concurrent sequences for
//   a  nothing (hooks = null, a plain server)
//   b  the massive-activation monitor (resid_post of every layer, max + median, every k steps)
//   c  full statistics on every layer and point for every request (top-8 dims, detection)
//   d  one neuron intervention on every request (scale one mlp_act dim of one layer)
//   e  16 distinct interventions in one batch (a different neuron / layer / strength per request)
// Configurations run rep by rep in rotating order (drift on a shared host hits all alike);
// prints the median decode tok/s with min–max and each configuration's median ratio to (a)
// over the reps. Each run: a fresh Engine, N one-token prompts (prefill = one step), one warm-up
// decode step, then --steps timed decode steps.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "engine/engine.h"

using namespace gb;

namespace {

struct Options {
  std::string model;
  std::vector<int> seqs = {16, 64};
  int steps = 6;
  int reps = 5;
  int threads = 2;
  int monitor_every = 1;
  std::string configs = "abcde";
};

std::shared_ptr<const GlassSpec> resolve_or_die(GlassSpec s, const ModelConfig& c) {
  auto r = resolve_glass_spec(std::move(s), c);
  if (!r.is_ok()) {
    std::fprintf(stderr, "spec: %s\n", r.message().c_str());
    std::exit(1);
  }
  return *r;
}

// Decode tokens/s of one run of configuration `cfg` with n sequences.
double run(Model& m, char cfg, int n, const Options& o) {
  const ModelConfig& c = m.config();
  EngineConfig ec;
  ec.scheduler.max_num_seqs = n;
  ec.scheduler.max_num_batched_tokens = std::max(n, 16);
  ec.max_model_len = 64;
  if (cfg == 'b') {
    ec.monitor.enabled = true;
    ec.monitor.every_steps = o.monitor_every;
  }
  auto e = Engine::create(&m, ec);
  if (!e.is_ok()) {
    std::fprintf(stderr, "engine: %s\n", e.message().c_str());
    std::exit(1);
  }
  std::vector<std::shared_ptr<const GlassSpec>> specs;
  if (cfg == 'c') {
    GlassSpec s;
    s.observe.enabled = true;
    s.observe.points = {HookPoint::kResidPre, HookPoint::kAttnOut, HookPoint::kResidMid,
                        HookPoint::kMlpAct,   HookPoint::kMlpOut,  HookPoint::kResidPost};
    s.observe.top_k = 8;
    specs.push_back(resolve_or_die(s, c));
  } else if (cfg == 'd') {
    GlassSpec s;
    s.interventions.push_back({.op = InterventionOp::kScale, .point = HookPoint::kMlpAct, .layer_first = c.n_layers / 2,
                               .layer_last = c.n_layers / 2, .dims = {c.n_ff / 3}, .strength = 0.5f});
    specs.push_back(resolve_or_die(s, c));
  } else if (cfg == 'e') {
    for (int i = 0; i < 16; ++i) {
      GlassSpec s;
      s.interventions.push_back({.op = InterventionOp::kScale, .point = HookPoint::kMlpAct,
                                 .layer_first = (i * 7) % c.n_layers, .layer_last = (i * 7) % c.n_layers,
                                 .dims = {(i * 997) % c.n_ff}, .strength = 0.1f * static_cast<float>(i + 1)});
      specs.push_back(resolve_or_die(s, c));
    }
  }
  std::mt19937 rng(42);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    r.id = "bench-" + std::to_string(i);
    r.prompt = {static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab))};
    r.max_tokens = o.steps + 4;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    if (!specs.empty()) r.glass = specs[static_cast<size_t>(i) % specs.size()];
    chans.push_back(std::make_shared<RequestChannel>());
    if (!(*e)->submit(std::move(r), chans.back()).is_ok()) std::exit(1);
  }
  auto step = [&] {
    auto r = (*e)->step();
    if (!r.is_ok() || !*r) {
      std::fprintf(stderr, "step failed\n");
      std::exit(1);
    }
  };
  step();  // prefill: every one-token prompt in one step
  step();  // warm-up decode
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < o.steps; ++s) step();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(n) * o.steps / secs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Glass-box overhead through the engine (decode tok/s)");
  app.add_option("--model", o.model, "model directory or GGUF")->required();
  app.add_option("--seqs", o.seqs, "concurrent sequences");
  app.add_option("--steps", o.steps, "timed decode steps per run");
  app.add_option("--reps", o.reps, "reps per configuration");
  app.add_option("--threads", o.threads, "threads");
  app.add_option("--monitor-every", o.monitor_every, "monitor sampling period in steps for (b)");
  app.add_option("--configs", o.configs, "configurations to run, e.g. abcde");
  CLI11_PARSE(app, argc, argv);

  int max_seqs = *std::max_element(o.seqs.begin(), o.seqs.end());
  auto m = load_model(o.model, {.max_batch_tokens = std::max(max_seqs, 16), .n_threads = o.threads});
  if (!m.is_ok()) {
    std::fprintf(stderr, "%s\n", m.message().c_str());
    return 1;
  }
  std::printf("%s, %d threads, %d timed decode steps per run, %d reps, monitor every %d step(s)\n",
              (*m)->describe().c_str(), o.threads, o.steps, o.reps, o.monitor_every);
  for (int n : o.seqs) {
    std::map<char, std::vector<double>> tps, ratio;
    for (int rep = 0; rep < o.reps; ++rep) {
      std::map<char, double> this_rep;
      for (size_t k = 0; k < o.configs.size(); ++k) {
        const char cfg = o.configs[(k + static_cast<size_t>(rep)) % o.configs.size()];  // rotate the order
        this_rep[cfg] = run(**m, cfg, n, o);
        tps[cfg].push_back(this_rep[cfg]);
      }
      for (auto [cfg, v] : this_rep) {
        if (this_rep.count('a')) ratio[cfg].push_back(v / this_rep['a']);
      }
      std::fprintf(stderr, "seqs %d rep %d done\n", n, rep);
    }
    std::printf("\n%d sequences\n| config | decode tok/s median | min – max | vs (a), median of per-rep ratios | min – max |\n"
                "| --- | --- | --- | --- | --- |\n", n);
    for (char cfg : o.configs) {
      const auto& v = tps[cfg];
      const auto& r = ratio[cfg];
      std::printf("| %c | %.2f | %.2f – %.2f | %+.1f%% | %+.1f%% – %+.1f%% |\n", cfg, median(v),
                  *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                  r.empty() ? 0.0 : (median(r) - 1) * 100, r.empty() ? 0.0 : (*std::min_element(r.begin(), r.end()) - 1) * 100,
                  r.empty() ? 0.0 : (*std::max_element(r.begin(), r.end()) - 1) * 100);
    }
  }
  return 0;
}

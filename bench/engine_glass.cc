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
#include <ctime>
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

// The specs of configuration cfg; requests take them round robin.
std::vector<std::shared_ptr<const GlassSpec>> make_specs(char cfg, const ModelConfig& c) {
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
    s.interventions.push_back({.op = InterventionOp::kScale,
                               .point = HookPoint::kMlpAct,
                               .layer_first = c.n_layers / 2,
                               .layer_last = c.n_layers / 2,
                               .dims = {c.n_ff / 3},
                               .strength = 0.5f});
    specs.push_back(resolve_or_die(s, c));
  } else if (cfg == 'e') {
    for (int i = 0; i < 16; ++i) {
      GlassSpec s;
      s.interventions.push_back({.op = InterventionOp::kScale,
                                 .point = HookPoint::kMlpAct,
                                 .layer_first = (i * 7) % c.n_layers,
                                 .layer_last = (i * 7) % c.n_layers,
                                 .dims = {(i * 997) % c.n_ff},
                                 .strength = 0.1f * static_cast<float>(i + 1)});
      specs.push_back(resolve_or_die(s, c));
    }
  }
  return specs;
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct RunResult {
  double tps;      // decode tokens per wall-clock second
  double cpu_tps;  // decode tokens per CPU second of the process (all threads)
  int64_t events;  // massive events the monitor counted
};

// Decode tokens/s of one run of configuration `cfg` with n sequences.
RunResult run(Model& m, char cfg, int n, const Options& o) {
  const ModelConfig& c = m.config();
  EngineConfig ec;
  ec.scheduler.max_num_seqs = n;
  ec.scheduler.max_num_batched_tokens = std::max(n, 16);
  ec.max_model_len = std::max(64, o.steps + 8);  // the one-token prompt, the warm-up and the timed steps
  if (cfg == 'b') {
    ec.monitor.enabled = true;
    ec.monitor.every_steps = o.monitor_every;
  }
  auto e = Engine::create(&m, ec);
  if (!e.is_ok()) {
    std::fprintf(stderr, "engine: %s\n", e.message().c_str());
    std::exit(1);
  }
  const auto specs = make_specs(cfg, c);
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
    if (auto st = (*e)->submit(std::move(r), chans.back()); !st.is_ok()) {
      std::fprintf(stderr, "submit: %s\n", st.message().c_str());
      std::exit(1);
    }
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
  const double c0 = cpu_seconds();
  for (int s = 0; s < o.steps; ++s) step();
  const double cpu = cpu_seconds() - c0;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double toks = static_cast<double>(n) * o.steps;
  return {toks / secs, toks / cpu, (*e)->stats().massive_events};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

// The glass work alone of one step of n sequences of `rows` tokens each under cfg (median of 15;
// rows = 1: a decode step, more: a prefill chunk of each prompt): the table built as the engine
// builds it, then applied at every hook point of every layer to random rows.
// What the forward pass adds on top of plain; no noise from the matmuls. pool null: on this
// thread alone, in its CPU ms (a shared host's other load does not inflate it); else the monitor
// spread over the pool as the engine runs it, in wall ms (what the step waits).
double direct_cost_ms(char cfg, int n, int rows, const ModelConfig& c, ThreadPool* pool) {
  const auto specs = make_specs(cfg, c);
  std::vector<std::unique_ptr<GlassAccumulator>> accs;
  for (int i = 0; i < n && !specs.empty(); ++i) {
    accs.push_back(std::make_unique<GlassAccumulator>(specs[static_cast<size_t>(i) % specs.size()], c));
  }
  MonitorConfig mc;
  mc.enabled = cfg == 'b';
  MonitorStep mon;
  std::vector<int32_t> table(4, 0);
  Batch batch;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> data(static_cast<size_t>(n) * rows * std::max(c.n_embd, c.n_ff));
  const std::vector<int32_t> ids(static_cast<size_t>(rows), 5);
  for (auto& v : data) v = nd(rng);
  GlassStep step(c);
  step.set_pool(pool);
  const clockid_t clock = pool == nullptr ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  std::vector<double> times;
  for (int rep = 0; rep < 15; ++rep) {
    batch.clear();  // rows at new positions each rep, as in a real decode
    const int32_t pos0 = rows == 1 ? 8 + rep : 0;
    for (int i = 0; i < n; ++i) batch.add_sequence(ids, pos0, table, 16, false);
    timespec c0, c1;
    clock_gettime(clock, &c0);
    step.clear();
    for (int i = 0; i < n && !accs.empty(); ++i)
      step.add_sequence(i * rows, rows, pos0, rows == 1 ? 1 : rows, accs[static_cast<size_t>(i)].get());
    if (mc.enabled) step.set_monitor(mc, &mon);
    step.finalize();
    for (int32_t l = 0; l < c.n_layers; ++l) {
      for (int p = 0; p < kNumLayerPoints; ++p) {
        const auto hp = static_cast<HookPoint>(p);
        if (!(step.layer_mask(l) & hook_bit(hp))) continue;
        step.apply(hp, l, data.data(), int64_t{n} * rows, hp == HookPoint::kMlpAct ? c.n_ff : c.n_embd, batch);
      }
    }
    clock_gettime(clock, &c1);
    times.push_back(1e3 * static_cast<double>(c1.tv_sec - c0.tv_sec) +
                    1e-6 * static_cast<double>(c1.tv_nsec - c0.tv_nsec));
  }
  return median(times);
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
  bool direct_only = false;
  app.add_flag("--direct-only", direct_only, "only the glass work alone per step (no engine runs)");
  int prefill_rows = 0;
  app.add_option("--prefill-rows", prefill_rows,
                 "also the glass work alone of a prefill step: every sequence a chunk of this many prompt rows");
  CLI11_PARSE(app, argc, argv);

  int max_seqs = *std::max_element(o.seqs.begin(), o.seqs.end());
  auto m = load_model(o.model, {.max_batch_tokens = std::max(max_seqs, 16), .n_threads = o.threads});
  if (!m.is_ok()) {
    std::fprintf(stderr, "%s\n", m.message().c_str());
    return 1;
  }
  std::printf("%s, %d threads, %d timed decode steps per run, %d reps, monitor every %d step(s)\n",
              (*m)->describe().c_str(), o.threads, o.steps, o.reps, o.monitor_every);
  if (direct_only) o.reps = 0;
  for (int n : o.seqs) {
    std::map<char, std::vector<double>> tps, ratio, cpu, cpu_ratio;
    std::map<char, int64_t> events;
    for (int rep = 0; rep < o.reps; ++rep) {
      std::map<char, RunResult> this_rep;
      for (size_t k = 0; k < o.configs.size(); ++k) {
        const char cfg = o.configs[(k + static_cast<size_t>(rep)) % o.configs.size()];  // rotate the order
        this_rep[cfg] = run(**m, cfg, n, o);
        tps[cfg].push_back(this_rep[cfg].tps);
        cpu[cfg].push_back(this_rep[cfg].cpu_tps);
        events[cfg] += this_rep[cfg].events;
      }
      for (auto [cfg, v] : this_rep) {
        if (!this_rep.count('a')) continue;
        ratio[cfg].push_back(v.tps / this_rep['a'].tps);
        cpu_ratio[cfg].push_back(v.cpu_tps / this_rep['a'].cpu_tps);
      }
      std::fprintf(stderr, "seqs %d rep %d done\n", n, rep);
    }
    std::printf("\nglass work alone per decode step, %d sequences (CPU ms of one thread, median of 15):", n);
    for (char cfg : o.configs) std::printf(" %c %.3f ms", cfg, direct_cost_ms(cfg, n, 1, (*m)->config(), nullptr));
    std::printf("\nthe same with the monitor over the model's %d threads (wall ms, median of 15):",
                (*m)->pool().size());
    for (char cfg : o.configs)
      std::printf(" %c %.3f ms", cfg, direct_cost_ms(cfg, n, 1, (*m)->config(), &(*m)->pool()));
    if (prefill_rows > 1) {
      std::printf("\nglass work alone per prefill step, %d sequences x %d rows (CPU ms of one thread, median of 15):",
                  n, prefill_rows);
      for (char cfg : o.configs)
        std::printf(" %c %.3f ms", cfg, direct_cost_ms(cfg, n, prefill_rows, (*m)->config(), nullptr));
    }
    std::printf("\n");
    auto pct = [](const std::vector<double>& r, int which) {
      if (r.empty()) return 0.0;
      const double v = which == 0  ? median(r)
                       : which < 0 ? *std::min_element(r.begin(), r.end())
                                   : *std::max_element(r.begin(), r.end());
      return (v - 1) * 100;
    };
    std::printf(
        "\n%d sequences\n| config | decode tok/s median (min – max) | vs (a): median of per-rep ratios (min – max) |"
        " tok per CPU-s median | vs (a) per CPU-s (min – max) | monitor events |\n"
        "| --- | --- | --- | --- | --- | --- |\n",
        n);
    for (char cfg : o.configs) {
      const auto& v = tps[cfg];
      if (v.empty()) continue;
      std::printf(
          "| %c | %.2f (%.2f – %.2f) | %+.1f%% (%+.1f%% – %+.1f%%) | %.2f | %+.1f%% (%+.1f%% – %+.1f%%) | %lld |\n",
          cfg, median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
          pct(ratio[cfg], 0), pct(ratio[cfg], -1), pct(ratio[cfg], 1), median(cpu[cfg]), pct(cpu_ratio[cfg], 0),
          pct(cpu_ratio[cfg], -1), pct(cpu_ratio[cfg], 1), static_cast<long long>(events[cfg]));
    }
  }
  return 0;
}

// Weight variants served beside the base (issue 12): decode tokens/s at N concurrent sequences
// through the Engine, one copy of the base weights, rows of every variant in one batch:
//   a  every sequence on the base
//   b  half on a rank-R LoRA over q/k/v/o/gate/up/down of every layer (the other half base)
//   c  half on a seed-003-style column edit: K columns of two down_proj matrices (layers L1, L2)
//   d  a third each on base, (b) and (c)
// The deltas are random (what they change does not matter to the speed), built in memory as the
// loaders build them, and registered with Engine::load_variant as a run-time load is. One Engine
// serves every configuration (the variants stay loaded; (a) sends no row to them). Configurations
// run rep by rep in rotating order (drift on a shared host hits all alike); prints the median
// decode tok/s with min–max, each configuration's median ratio to (a) over the reps, and the
// memory each variant adds beside the base against what its edit stores.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>

#include "engine/engine.h"
#include "formats/quantize.h"
#include "patch/patch.h"

using namespace gb;

namespace {

struct Options {
  std::string model;
  int seqs = 16;
  int steps = 24;
  int reps = 7;
  int threads = 2;
  int rank = 16;
  int columns = 64;
  std::vector<int> edit_layers;  // default: the seed-003 layers scaled to the model's depth
  std::string configs = "abcd";
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}

std::string hf(int layer, const char* rest) { return "model.layers." + std::to_string(layer) + "." + rest; }

// A LoRA adapter as the PEFT loader makes one: per projection A [r, in] and B [out, r], scale α/r.
patch::Patch make_lora(const ModelConfig& c, int rank) {
  patch::Patch p;
  p.source = patch::PatchSource::kPeft;
  p.name = "lora-r" + std::to_string(rank);
  p.path = "(bench, in memory)";
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const int64_t q = c.q_dim(), kv = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  struct Proj {
    const char* name;
    int64_t out, in;
  };
  const Proj projs[] = {{"self_attn.q_proj.weight", q, c.n_embd},   {"self_attn.k_proj.weight", kv, c.n_embd},
                        {"self_attn.v_proj.weight", kv, c.n_embd},  {"self_attn.o_proj.weight", c.n_embd, q},
                        {"mlp.gate_proj.weight", c.n_ff, c.n_embd}, {"mlp.up_proj.weight", c.n_ff, c.n_embd},
                        {"mlp.down_proj.weight", c.n_embd, c.n_ff}};
  for (int l = 0; l < c.n_layers; ++l) {
    for (const Proj& pr : projs) {
      patch::Edit e;
      e.tensor = hf(l, pr.name);
      e.kind = patch::EditKind::kLowRank;
      e.shape = {pr.out, pr.in};
      e.rank = rank;
      e.scale = 2.0f;  // lora_alpha = 2r, as PEFT configs often have
      e.a.resize(static_cast<size_t>(rank * pr.in));
      e.b.resize(static_cast<size_t>(pr.out * rank));
      for (float& v : e.a) v = nd(rng);
      for (float& v : e.b) v = nd(rng);
      p.edits.push_back(std::move(e));
    }
  }
  return p;
}

// A seed-003-style edit: `k` columns of down_proj [n_embd, n_ff] in each listed layer replaced
// (values in the base's dtype for an HF base, f32 for a GGUF one — what `patch diff` stores).
patch::Patch make_columns(const ModelConfig& c, const std::vector<int>& layers, int k, DType dtype) {
  patch::Patch p;
  p.source = patch::PatchSource::kArtifact;
  p.name = "columns-" + std::to_string(k);
  p.path = "(bench, in memory)";
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (int l : layers) {
    patch::Edit e;
    e.tensor = hf(l, "mlp.down_proj.weight");
    e.kind = patch::EditKind::kColumns;
    e.dtype = dtype;
    e.shape = {c.n_embd, c.n_ff};
    for (int j = 0; j < k; ++j) e.indices.push_back(static_cast<int64_t>(j) * (c.n_ff / k));  // spread over the dims
    std::vector<float> vals(static_cast<size_t>(c.n_embd) * k);
    for (float& v : vals) v = nd(rng);
    e.values.resize(static_cast<size_t>(row_bytes(dtype, static_cast<int64_t>(vals.size()))));
    if (Status st = convert_row(vals.data(), static_cast<int64_t>(vals.size()), dtype, e.values.data()); !st.is_ok())
      die(st.message());
    e.weights_changed = static_cast<int64_t>(vals.size());
    p.edits.push_back(std::move(e));
  }
  return p;
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct RunResult {
  double tps;      // decode tokens per wall-clock second
  double cpu_tps;  // decode tokens per CPU second of the process (all threads): less sensitive to a noisy host
};

// Decode tokens/s of one run (after an untimed warm-up run of each): n one-token prompts spread over `variants` round
// robin, one prefill step, one warm-up decode step, then o.steps timed decode steps.
RunResult run(Engine& e, const ModelConfig& c, const std::vector<int32_t>& variants, const Options& o) {
  std::mt19937 rng(42);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int i = 0; i < o.seqs; ++i) {
    GenerationRequest r;
    r.id = "bench-" + std::to_string(i);
    r.prompt = {static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab))};
    r.max_tokens = o.steps + 2;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.variant = variants[static_cast<size_t>(i) % variants.size()];
    chans.push_back(std::make_shared<RequestChannel>());
    if (Status s = e.submit(std::move(r), chans.back()); !s.is_ok()) die("submit: " + s.message());
  }
  auto step = [&] {
    auto r = e.step();
    if (!r.is_ok() || !*r) die("step failed");
  };
  step();  // prefill: every one-token prompt in one step
  step();  // warm-up decode
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  for (int s = 0; s < o.steps; ++s) step();
  const double cpu = cpu_seconds() - c0;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  while (true) {  // the last tokens, so the next run starts on an empty engine
    auto r = e.step();
    if (!r.is_ok()) die("step failed");
    if (!*r) break;
  }
  const double toks = static_cast<double>(o.seqs) * o.steps;
  return {toks / secs, toks / cpu};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Weight variants beside the base through the engine (decode tok/s)");
  app.add_option("--model", o.model, "model directory or GGUF")->required();
  app.add_option("--seqs", o.seqs, "concurrent sequences");
  app.add_option("--steps", o.steps, "timed decode steps per run");
  app.add_option("--reps", o.reps, "reps per configuration");
  app.add_option("--threads", o.threads, "threads");
  app.add_option("--rank", o.rank, "LoRA rank of (b)");
  app.add_option("--columns", o.columns, "columns per down_proj of (c)");
  app.add_option("--edit-layers", o.edit_layers,
                 "layers whose down_proj (c) edits (default: 15/28 and 19/28 of depth)");
  app.add_option("--configs", o.configs, "configurations to run, e.g. abcd");
  CLI11_PARSE(app, argc, argv);

  auto m = load_model(o.model, {.max_batch_tokens = std::max(o.seqs, 16), .n_threads = o.threads});
  if (!m.is_ok()) die(m.message());
  const ModelConfig& c = (*m)->config();
  if (o.edit_layers.empty()) o.edit_layers = {c.n_layers * 15 / 28, c.n_layers * 19 / 28};
  EngineConfig ec;
  ec.scheduler.max_num_seqs = o.seqs;
  ec.scheduler.max_num_batched_tokens = std::max(o.seqs, 16);
  ec.max_model_len = 128;
  auto e = Engine::create(m->get(), ec);
  if (!e.is_ok()) die("engine: " + e.message());

  const bool hf_base = o.model.size() < 5 || o.model.substr(o.model.size() - 5) != ".gguf";
  const patch::Patch lora = make_lora(c, o.rank);
  const patch::Patch cols = make_columns(c, o.edit_layers, o.columns, hf_base ? DType::kBF16 : DType::kF32);
  Result<int32_t> lora_id = (*e)->load_variant(lora, "lora", 1.0);
  if (!lora_id.is_ok()) die("LoRA variant: " + lora_id.message());
  Result<int32_t> cols_id = (*e)->load_variant(cols, "columns", 1.0);
  if (!cols_id.is_ok()) die("column variant: " + cols_id.message());
  for (int i = 0; i < 2; ++i) {  // the control tasks (registration) run at the top of a step
    if (!(*e)->step().is_ok()) die("step failed");
  }

  std::printf("%s, %d threads, %d sequences, %d timed decode steps per run, %d reps\n", (*m)->describe().c_str(),
              o.threads, o.seqs, o.steps, o.reps);
  std::printf(
      "\n| variant | edit | weights stored | bytes the edit stores | memory added beside the base |\n"
      "| --- | --- | --- | --- | --- |\n");
  for (const VariantStatus& v : (*e)->variants()) {
    const patch::Patch& p = v.name == "lora" ? lora : cols;
    int64_t stored = 0;
    for (const patch::Edit& ed : p.edits)
      stored += ed.kind == patch::EditKind::kLowRank ? ed.rank * (ed.rows() + ed.cols()) : ed.weights_changed;
    std::printf(
        "| %s | %s | %lld | %.3f MiB | %.3f MiB |\n", v.name.c_str(),
        v.name == "lora"
            ? ("rank " + std::to_string(o.rank) + ", 7 projections × " + std::to_string(c.n_layers) + " layers").c_str()
            : (std::to_string(o.columns) + " columns × " + std::to_string(c.n_embd) + " rows of " +
               std::to_string(o.edit_layers.size()) + " down_proj")
                  .c_str(),
        static_cast<long long>(stored), static_cast<double>(p.stored_bytes()) / (1 << 20),
        static_cast<double>(v.bytes) / (1 << 20));
  }
  std::fflush(stdout);

  const std::map<char, std::vector<int32_t>> arms = {
      {'a', {0}}, {'b', {0, *lora_id}}, {'c', {0, *cols_id}}, {'d', {0, *lora_id, *cols_id}}};
  for (char cfg : o.configs) {  // warm-up: the weights and deltas paged in, the scratch grown
    if (!arms.count(cfg)) die(std::string("unknown configuration ") + cfg);
    run(**e, c, arms.at(cfg), o);
  }
  std::map<char, std::vector<double>> tps, ratio, cpu, cpu_ratio;
  for (int rep = 0; rep < o.reps; ++rep) {
    std::map<char, RunResult> this_rep;
    for (size_t k = 0; k < o.configs.size(); ++k) {
      const char cfg = o.configs[(k + static_cast<size_t>(rep)) % o.configs.size()];  // rotate the order
      this_rep[cfg] = run(**e, c, arms.at(cfg), o);
      tps[cfg].push_back(this_rep[cfg].tps);
      cpu[cfg].push_back(this_rep[cfg].cpu_tps);
    }
    if (this_rep.count('a')) {
      for (auto [cfg, v] : this_rep) {
        ratio[cfg].push_back(v.tps / this_rep['a'].tps);
        cpu_ratio[cfg].push_back(v.cpu_tps / this_rep['a'].cpu_tps);
      }
    }
    std::fprintf(stderr, "rep %d done\n", rep);
  }
  auto pct = [](const std::vector<double>& r, int which) {
    if (r.empty()) return 0.0;
    const double v = which == 0  ? median(r)
                     : which < 0 ? *std::min_element(r.begin(), r.end())
                                 : *std::max_element(r.begin(), r.end());
    return v * 100;
  };
  std::printf(
      "\n| config | decode tok/s median (min – max) | of (a): median of per-rep ratios (min – max) |"
      " tok per CPU-s median | of (a) per CPU-s (min – max) |\n| --- | --- | --- | --- | --- |\n");
  for (char cfg : o.configs) {
    const auto& v = tps[cfg];
    if (v.empty()) continue;
    std::printf("| %c | %.2f (%.2f – %.2f) | %.1f%% (%.1f%% – %.1f%%) | %.2f | %.1f%% (%.1f%% – %.1f%%) |\n", cfg,
                median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                pct(ratio[cfg], 0), pct(ratio[cfg], -1), pct(ratio[cfg], 1), median(cpu[cfg]), pct(cpu_ratio[cfg], 0),
                pct(cpu_ratio[cfg], -1), pct(cpu_ratio[cfg], 1));
  }
  return 0;
}

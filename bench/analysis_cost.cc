// What the layer analyses cost beside a plain prefill (issue 14: `scan` and `depth` on a
// 512-token prompt at most 1.3× a plain prefill of it). One engine, one prompt of --tokens random
// ids, three configurations timed end to end, the analysis's own arithmetic included:
//   plain  the prompt prefilled as a request without a glass spec
//   scan   analysis::run_scan + scan_report: every layer's resid_post observed (statistics, top-3
//          dims, the massive-activation rule on every row)
//   depth  analysis::run_depth + depth_json: resid_pre, attn_out, resid_mid, mlp_out and
//          resid_post of every layer captured at every token, then Block Influence, the update
//          ratios and the L·(L+1)/2 angular distances
// Configurations run rep by rep in rotating order after one warm-up each; prints each one's
// median seconds (min–max) and its median per-rep ratio to plain.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "analysis/depth.h"
#include "analysis/scan.h"

using namespace gb;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}

template <class T>
T check(Result<T> r) {
  if (!r.is_ok()) die(r.message());
  return std::move(r.value());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  int tokens = 512, reps = 3, threads = 2;
  CLI::App app{"The cost of glassbox scan and depth beside a plain prefill"};
  app.add_option("--model,-m", model_path, "a model directory or GGUF file")->required();
  app.add_option("--tokens", tokens, "prompt length")->check(CLI::Range(2, 1 << 16));
  app.add_option("--reps", reps, "timed repetitions of each configuration")->check(CLI::Range(1, 100));
  app.add_option("--threads,-t", threads, "compute threads")->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);

  auto model = check(load_model(model_path, {.max_batch_tokens = tokens, .n_threads = threads}));
  const ModelConfig& c = model->config();
  std::vector<int32_t> prompt(static_cast<size_t>(tokens));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(3, c.vocab - 1);
  for (int32_t& t : prompt) t = id(rng);
  auto engine = check(analysis::local_engine(*model, 1, tokens));
  const analysis::Runner run = analysis::local_runner(*engine);
  int32_t runs = 0;

  const char* names[] = {"plain", "scan", "depth"};
  auto once = [&](int config) {
    // A new first token each run: nothing of a prompt is ever in the prefix cache.
    prompt[0] = 3 + runs++ % (c.vocab - 3);
    const std::vector<std::vector<int32_t>> prompts = {prompt};
    const auto t0 = std::chrono::steady_clock::now();
    if (config == 0) {
      std::vector<GenerationRequest> reqs;
      reqs.push_back(analysis::observe_request("plain", prompt, nullptr));
      check(run(std::move(reqs)));
    } else if (config == 1) {
      analysis::ScanParams p;
      const analysis::ScanResult r = check(analysis::run_scan(run, p, c, prompts));
      (void)analysis::scan_report(p, {"bench"}, r, [](int32_t, int32_t) { return std::string(); });
    } else {
      const analysis::DepthSums d = check(analysis::run_depth(run, c, prompts));
      (void)analysis::depth_json(d);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::printf("%s, %d tokens, %d threads, %d reps\n", model->describe().c_str(), tokens, threads, reps);
  for (int k = 0; k < 3; ++k) once(k);  // warm-up
  std::vector<std::vector<double>> secs(3);
  std::vector<std::vector<double>> ratio(3);
  for (int r = 0; r < reps; ++r) {
    double t[3];
    for (int i = 0; i < 3; ++i) {
      const int k = (r + i) % 3;
      t[k] = once(k);
      secs[static_cast<size_t>(k)].push_back(t[k]);
    }
    for (int k = 0; k < 3; ++k) ratio[static_cast<size_t>(k)].push_back(t[k] / t[0]);
  }
  for (int k = 0; k < 3; ++k) {
    const auto& s = secs[static_cast<size_t>(k)];
    const auto& q = ratio[static_cast<size_t>(k)];
    std::printf("%-6s %8.3f s (%.3f–%.3f)   × plain %.3f (%.3f–%.3f)\n", names[k], median(s),
                *std::min_element(s.begin(), s.end()), *std::max_element(s.begin(), s.end()), median(q),
                *std::min_element(q.begin(), q.end()), *std::max_element(q.begin(), q.end()));
  }
  return 0;
}

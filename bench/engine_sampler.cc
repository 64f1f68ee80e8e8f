// One sampling step per settings row on a vocabulary-sized row of logits: the time the engine
// thread spends per sequence between a forward and the next (greedy argmax, temperature alone,
// top-k, min-p, top-p, top_logprobs). Rows: Gaussian logits of --sigma (3 makes top_p = 0.9 take
// tens of thousands of tokens: the flat case), or --peaked (a few leading tokens).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"

int main(int argc, char** argv) {
  CLI::App app{"Sampling cost per token and sequence"};
  int vocab = 151936, reps = 200;
  float sigma = 3.0f;
  bool peaked = false;
  app.add_option("--vocab", vocab, "row length (Qwen3: 151936)");
  app.add_option("--reps", reps, "samples per row (median and min reported)");
  app.add_option("--sigma", sigma, "standard deviation of the Gaussian logits");
  app.add_flag("--peaked", peaked, "eight leading tokens 10..6.5 above the Gaussian row");
  CLI11_PARSE(app, argc, argv);

  std::vector<float> base(static_cast<size_t>(vocab));
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, sigma);
  for (auto& x : base) x = d(rng);
  if (peaked) {
    for (int i = 0; i < 8; ++i) base[static_cast<size_t>(1000 + 4099 * i) % base.size()] = 10.0f - 0.5f * i;
  }

  struct Row {
    std::string name;
    gb::SamplingParams p;
    int32_t top_logprobs;
  };
  std::vector<Row> rows;
  auto add = [&](const std::string& name, auto&& edit, int32_t lp = -1) {
    gb::SamplingParams p;
    edit(p);
    rows.push_back({name, p, lp});
  };
  add("greedy", [](auto& p) { p.temperature = 0; });
  add(
      "greedy, top_logprobs 5", [](auto& p) { p.temperature = 0; }, 5);
  add("temperature 1", [](auto&) {});
  add("temperature 0.7, top_k 40", [](auto& p) { p.temperature = 0.7f, p.top_k = 40; });
  add("temperature 1, min_p 0.05", [](auto& p) { p.min_p = 0.05f; });
  add("temperature 1, top_p 0.9", [](auto& p) { p.top_p = 0.9f; });
  add("temperature 0.8, top_k 40, top_p 0.95", [](auto& p) { p.temperature = 0.8f, p.top_k = 40, p.top_p = 0.95f; });

  std::printf("%-40s %12s %12s\n", "settings", "median µs", "min µs");
  std::vector<float> logits(base.size()), scratch(base.size());
  for (const Row& r : rows) {
    gb::Sampler s(r.p, vocab);
    std::vector<double> us;
    for (int i = 0; i < reps; ++i) {
      logits = base;
      const auto t0 = std::chrono::steady_clock::now();
      s.sample(logits.data(), r.top_logprobs, scratch);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("%-40s %12.1f %12.1f\n", r.name.c_str(), us[us.size() / 2], us[0]);
  }
  return 0;
}

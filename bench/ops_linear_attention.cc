// The Gated DeltaNet delta rule at Qwen3.5-0.8B shapes (16 value heads, dk = dv = 128): the
// chunked form over a prefill of N tokens (chunks of 64, as the engine runs it) and the recurrence
// for one decode token per sequence over S sequences (their states, 1 MiB each, far beyond L2 so
// each is read from memory like a real step's), one work item per (sequence, head) split over the
// threads as in src/model/qwen35.cc. ISA levels interleaved back to back in every repetition (the
// host is noisy: compare within one run). Reports ms per call and GFLOP/s (2 flops per FMA of the
// delta rule's state and intra-chunk products).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu_features.h"
#include "ops/linear_attention.h"

namespace {

using Clock = std::chrono::steady_clock;
using gb::ops::Isa;

constexpr int64_t kHeads = 16, kDim = 128, kChunk = 64;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Rows of n tokens shaped like the model's: q/k L2-normalised, g <= 0, beta in (0, 1).
struct Inputs {
  int64_t n;
  std::vector<float> q, k, v, g, beta, out;
  Inputs(int64_t n_, std::mt19937& rng) : n(n_) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, int64_t size) {
      x.resize(size);
      for (auto& e : x) e = nd(rng);
    };
    fill(q, n * kHeads * kDim);
    fill(k, n * kHeads * kDim);
    fill(v, n * kHeads * kDim);
    fill(g, n * kHeads);
    fill(beta, n * kHeads);
    gb::ops::l2_norm(q.data(), n * kHeads, kDim, 1e-6f);
    gb::ops::l2_norm(k.data(), n * kHeads, kDim, 1e-6f);
    for (auto& e : g) e = -0.5f * gb::ops::softplus(e);
    for (auto& e : beta) e = 1.0f / (1.0f + std::exp(-e));
    out.resize(n * kHeads * kDim);
  }
  // Head h of tokens [t0, ...): rows of all heads, kHeads·kDim apart.
  gb::ops::DeltaHead head(int64_t h, int64_t t0) {
    const int64_t w = kHeads * kDim, off = t0 * w + h * kDim;
    return {q.data() + off,
            k.data() + off,
            w,
            v.data() + off,
            w,
            g.data() + t0 * kHeads + h,
            beta.data() + t0 * kHeads + h,
            kHeads,
            out.data() + off,
            w};
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Gated DeltaNet delta rule: chunked prefill and recurrent decode per ISA"};
  int reps = 7;
  std::vector<int> threads = {1, 2};
  std::vector<int64_t> prefill = {512};
  int64_t seqs = 16;
  std::vector<std::string> isa_names;
  app.add_option("--reps", reps, "repetitions (each ISA once per repetition, interleaved)")->capture_default_str();
  app.add_option("--threads", threads, "thread counts")->capture_default_str();
  app.add_option("-n", prefill, "prefill lengths")->capture_default_str();
  app.add_option("--seqs", seqs, "sequences of the decode case (one token each)")->capture_default_str();
  app.add_option("--isa", isa_names, "ISA levels (default: avx2 and every higher one this CPU runs)");
  CLI11_PARSE(app, argc, argv);

  std::vector<Isa> isas;
  for (const std::string& s : isa_names) {
    Isa isa;
    if (!gb::ops::parse_isa(s, &isa) || !gb::ops::isa_supported(isa)) {
      std::fprintf(stderr, "ISA %s: unknown or not supported by this CPU\n", s.c_str());
      return 1;
    }
    isas.push_back(isa);
  }
  if (isas.empty()) {
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (gb::ops::isa_supported(isa)) isas.push_back(isa);
    }
    if (isas.empty()) isas.push_back(Isa::kScalar);
  }

  std::mt19937 rng(1);
  std::printf("%lld heads, dk = dv = %lld, chunk %lld; ms per call, median [min, max] of %d\n", (long long)kHeads,
              (long long)kDim, (long long)kChunk, reps);
  std::printf("%-3s %-16s %-7s %10s %10s %10s %9s\n", "thr", "case", "isa", "ms", "min", "max", "GFLOP/s");
  for (int nt : threads) {
    gb::ThreadPool pool(nt);
    std::vector<float> scratch(static_cast<size_t>(nt) * gb::ops::gated_delta_chunk_scratch(kChunk, kDim));
    struct Case {
      std::string name;
      int64_t n_tokens, n_seqs;
    };
    std::vector<Case> cases;
    for (int64_t n : prefill) cases.push_back({"prefill " + std::to_string(n), n, 1});
    cases.push_back({"decode x" + std::to_string(seqs), 1, seqs});
    for (const Case& c : cases) {
      Inputs in(c.n_tokens * c.n_seqs, rng);
      std::vector<float> states(static_cast<size_t>(c.n_seqs * kHeads * kDim * kDim), 0.01f);
      const int64_t items = c.n_seqs * kHeads;
      auto run = [&] {
        pool.run([&](int ti) {
          const gb::Range r = gb::split_range(items, ti, pool.size());
          float* sc = scratch.data() + ti * gb::ops::gated_delta_chunk_scratch(kChunk, kDim);
          for (int64_t item = r.begin; item < r.end; ++item) {
            const int64_t s = item / kHeads, h = item % kHeads;
            const gb::ops::DeltaHead head = in.head(h, s * c.n_tokens);
            float* state = states.data() + item * kDim * kDim;
            if (c.n_tokens == 1) {
              gb::ops::gated_delta_recurrent(head, 1, kDim, kDim, state);
            } else {
              gb::ops::gated_delta_chunked(head, c.n_tokens, kDim, kDim, state, kChunk, sc);
            }
          }
        });
      };
      // Flops: the recurrence 3 passes over the state per token (Sᵀk, the update, Sᵀq); the
      // chunked form per chunk of L: Sᵀk and Sᵀq for L tokens, the state update, the L²/2·dk
      // products k·k and q·k, and the L²/2·dv substitution and intra-chunk output.
      const double per_head = c.n_tokens == 1
                                  ? 3.0 * kDim * kDim * 2
                                  : static_cast<double>(c.n_tokens) * (3.0 * kDim * kDim + 2.0 * kChunk * kDim) * 2;
      const double flops = per_head * items;
      std::vector<std::vector<double>> ms(isas.size());
      for (int r = -1; r < reps; ++r) {  // one warm-up round
        for (size_t v = 0; v < isas.size(); ++v) {
          gb::ops::set_isa(isas[v]);
          const auto t0 = Clock::now();
          run();
          const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          if (r >= 0) ms[v].push_back(dt);
        }
      }
      for (size_t v = 0; v < isas.size(); ++v) {
        const double m = median(ms[v]);
        std::printf("%-3d %-16s %-7s %10.3f %10.3f %10.3f %9.1f\n", nt, c.name.c_str(),
                    std::string(gb::ops::isa_name(isas[v])).c_str(), m, *std::min_element(ms[v].begin(), ms[v].end()),
                    *std::max_element(ms[v].begin(), ms[v].end()), flops / (m * 1e6));
      }
    }
  }
  return 0;
}

// The compute ceiling the prefill kernels are measured against: the throughput of the one vector
// instruction each matmul family is built on (f32 FMA for F32/F16/BF16 weights on AVX2 and
// AVX-512, maddubs for the integer types on AVX2, vpdpbusd with VNNI, vdpbf16ps with AVX512_BF16),
// in independent chains that cover its latency, on 1 and on N threads at once. A kernel's
// GFLOP/s from bench_ops_matmul over this figure is how close it is to the core.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ops/cpu_features.h"

namespace {

using Clock = std::chrono::steady_clock;

// Chains per kernel: more than latency × pipes for every x86 core of the project (4-cycle FMA
// on 2 pipes needs 8); 12 leaves registers for nothing else and needs none.
constexpr int kChains = 12;

#if defined(__x86_64__)
// Lane 0 of an integer vector, with no ISA-specific extract (GCC 12 warns falsely inside some).
template <typename X>
int32_t lane0(const X& v) {
  int32_t out;
  __builtin_memcpy(&out, &v, 4);
  return out;
}

// Each kernel runs `iters` rounds of kChains independent instructions and returns a value that
// depends on all of them (so nothing is optimised away). The empty asm makes the shared operand
// opaque each round, so the chains cannot be folded or hoisted.
__attribute__((target("avx2,fma"))) float fma_ymm(int64_t iters) {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1.0f + 1e-3f * i);
  __m256 b = _mm256_set1_ps(0.999999f);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], b, b);
    __asm__ volatile("" : "+x"(b));
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += a[i][0];
  return s;
}

__attribute__((target("avx2"))) float maddubs_ymm(int64_t iters) {
  __m256i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  __m256i b = _mm256_set1_epi8(3);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_maddubs_epi16(a[i], b);
    __asm__ volatile("" : "+x"(b));
  }
  int s = 0;
  for (int i = 0; i < kChains; ++i) s += lane0(a[i]);
  return static_cast<float>(s);
}

__attribute__((target("avx512f"))) float fma_zmm(int64_t iters) {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1.0f + 1e-3f * i);
  __m512 b = _mm512_set1_ps(0.999999f);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], b, b);
    __asm__ volatile("" : "+v"(b));
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_cvtss_f32(a[i]);
  return s;
}

__attribute__((target("avx512f,avx512vl,avx512vnni"))) float dpbusd_ymm(int64_t iters) {
  __m256i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_epi32(i);
  __m256i b = _mm256_set1_epi8(3);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_dpbusd_epi32(a[i], b, b);
    __asm__ volatile("" : "+v"(b));
  }
  int s = 0;
  for (int i = 0; i < kChains; ++i) s += lane0(a[i]);
  return static_cast<float>(s);
}

__attribute__((target("avx512f,avx512vnni"))) float dpbusd_zmm(int64_t iters) {
  __m512i a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_epi32(i);
  __m512i b = _mm512_set1_epi8(3);
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_dpbusd_epi32(a[i], b, b);
    __asm__ volatile("" : "+v"(b));
  }
  int s = 0;
  for (int i = 0; i < kChains; ++i) s += lane0(a[i]);
  return static_cast<float>(s);
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_zmm(int64_t iters) {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1e-3f * i);
  __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t k = 0; k < iters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_dpbf16_ps(a[i], b, b);
    __asm__ volatile("" : "+v"(b));
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_cvtss_f32(a[i]);
  return s;
}
#endif

struct Kernel {
  const char* name;
  const char* unit;  // what `per_instr` counts
  double per_instr;  // FLOP (float) or multiply-adds (integer) per instruction
  bool available;
  float (*run)(int64_t);
};

// Instructions per second of `k` on each of `threads` threads running it at once.
std::vector<double> measure(const Kernel& k, int threads, int64_t iters) {
  std::vector<double> rate(threads);
  std::vector<std::thread> pool;
  volatile float sink = 0;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const auto t0 = Clock::now();
      const float v = k.run(iters);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      rate[t] = static_cast<double>(iters) * kChains / s;
      sink = sink + v;
    });
  for (auto& th : pool) th.join();
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"peak vector-instruction throughput per thread (the prefill kernels' ceiling)"};
  std::vector<int> threads = {1, 2};
  int64_t iters = 50'000'000;
  int reps = 5;
  app.add_option("--threads", threads, "thread counts, each run all at once");
  app.add_option("--iters", iters, "rounds of 12 instructions per measurement");
  app.add_option("--reps", reps, "measurements per case (median, min, max of the per-thread rates)");
  CLI11_PARSE(app, argc, argv);

#if defined(__x86_64__)
  const auto& f = gb::ops::cpu_features();
  const Kernel kernels[] = {
      {"fma ymm", "GFLOP/s", 16, f.avx2, fma_ymm},
      {"maddubs ymm", "G MAC/s", 32, f.avx2, maddubs_ymm},
      {"fma zmm", "GFLOP/s", 32, f.avx512, fma_zmm},
      {"vpdpbusd ymm", "G MAC/s", 32, f.avx512_vnni, dpbusd_ymm},
      {"vpdpbusd zmm", "G MAC/s", 64, f.avx512_vnni, dpbusd_zmm},
      {"vdpbf16ps zmm", "GFLOP/s", 64, f.avx512_bf16, dpbf16_zmm},
  };
  std::printf("%-14s %3s %14s %14s %14s %12s %12s\n", "instruction", "thr", "G instr/s/thr", "min", "max", "per thread",
              "all threads");
  for (const Kernel& k : kernels) {
    if (!k.available) continue;
    for (int nt : threads) {
      std::vector<double> all;
      for (int r = 0; r < reps; ++r)
        for (double v : measure(k, nt, iters)) all.push_back(v);
      std::sort(all.begin(), all.end());
      const double med = all[all.size() / 2];
      std::printf("%-14s %3d %14.2f %14.2f %14.2f %8.1f %s %8.1f %s\n", k.name, nt, med / 1e9, all.front() / 1e9,
                  all.back() / 1e9, med * k.per_instr / 1e9, k.unit, med * k.per_instr * nt / 1e9, k.unit);
    }
  }
#else
  std::printf("no x86-64 vector kernels on this architecture\n");
#endif
  return 0;
}

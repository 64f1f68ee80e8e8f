// STREAM-style memory bandwidth: read-only sum and triad (a = b + s·c) over arrays far larger
// than the caches, with 1 and 2 threads, so decode speed can be stated as a fraction of what the
// memory delivers. Decode reads weights only, so the read-only figure is its limit.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "core/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

// Sum of a[0..n) with four independent SSE2 accumulators (baseline x86-64: no dispatch needed;
// two 16-byte loads per cycle are far above what DRAM delivers).
double read_sum(const double* a, int64_t n) {
#if defined(__x86_64__)
  __m128d s0 = _mm_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = _mm_add_pd(s0, _mm_load_pd(a + i));
    s1 = _mm_add_pd(s1, _mm_load_pd(a + i + 2));
    s2 = _mm_add_pd(s2, _mm_load_pd(a + i + 4));
    s3 = _mm_add_pd(s3, _mm_load_pd(a + i + 6));
  }
  double out[2];
  _mm_storeu_pd(out, _mm_add_pd(_mm_add_pd(s0, s1), _mm_add_pd(s2, s3)));
  double s = out[0] + out[1];
  for (; i < n; ++i) s += a[i];
  return s;
#else
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i];
  return s;
#endif
}

void triad(double* a, const double* b, const double* c, double s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

struct Stats {
  double median, lo, hi;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"STREAM-style memory bandwidth (read-only sum, triad)"};
  int64_t mib = 512;
  int reps = 9;
  std::vector<int> threads = {1, 2};
  app.add_option("--mib", mib, "MiB per array (far above the last-level cache)");
  app.add_option("--reps", reps, "repetitions (median, min and max reported)");
  app.add_option("--threads", threads, "thread counts to measure");
  CLI11_PARSE(app, argc, argv);

  const int64_t n = mib * 1024 * 1024 / 8;
  std::vector<double> a(n, 1.0), b(n, 2.0), c(n, 0.5);  // 16-byte aligned by the allocator
  std::printf("arrays: 3 x %lld MiB, %d reps; GB = 1e9 bytes\n", static_cast<long long>(mib), reps);
  std::printf("%-8s %8s %12s %12s %12s\n", "kernel", "threads", "median GB/s", "min", "max");
  for (int nt : threads) {
    gb::ThreadPool pool(nt);
    volatile double sink = 0;
    std::vector<double> rd, tr;
    for (int rep = 0; rep < reps + 1; ++rep) {  // the first round warms pages and the pool
      std::vector<double> partial(nt);
      auto t0 = Clock::now();
      pool.run([&](int ti) {
        const gb::Range r = gb::split_range(n, ti, nt, 8);
        partial[ti] = read_sum(a.data() + r.begin, r.end - r.begin);
      });
      auto t1 = Clock::now();
      for (double p : partial) sink = sink + p;
      pool.run([&](int ti) {
        const gb::Range r = gb::split_range(n, ti, nt, 8);
        triad(a.data() + r.begin, b.data() + r.begin, c.data() + r.begin, 3.0, r.end - r.begin);
      });
      auto t2 = Clock::now();
      if (rep == 0) continue;
      rd.push_back(n * 8.0 / std::chrono::duration<double>(t1 - t0).count() / 1e9);
      tr.push_back(n * 24.0 / std::chrono::duration<double>(t2 - t1).count() / 1e9);
    }
    const Stats s = stats(rd), t = stats(tr);
    std::printf("%-8s %8d %12.2f %12.2f %12.2f\n", "read", nt, s.median, s.lo, s.hi);
    std::printf("%-8s %8d %12.2f %12.2f %12.2f\n", "triad", nt, t.median, t.lo, t.hi);
  }
  return 0;
}

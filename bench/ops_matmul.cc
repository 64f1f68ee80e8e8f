// Matmul throughput at Qwen3-0.6B shapes for every weight dtype: GFLOP/s and weight GB/s for
// decode (n = 1) and prefill (n = 512), 1 and 2 threads, optionally several ISA levels
// interleaved back to back (the host is noisy; compare within one run).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/read_bytes.h"
#include "ops/cpu_features.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

// CPU time of the calling thread: with one thread it shows the kernel's speed even when the
// shared host takes the core away part of the time (wall time then overstates the cost).
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
using gb::DType;
using gb::ops::Isa;
using gb::ops::Weight;

// Plausible weight bytes (finite values, sane scales) without the cost of a real quantizer.
std::vector<uint8_t> make_weight(DType dt, int64_t rows, int64_t cols, uint32_t seed) {
  const int64_t stride = gb::row_bytes(dt, cols);
  std::vector<uint8_t> bytes(static_cast<size_t>(stride * rows));
  std::minstd_rand rng(seed);
  auto small = [&] { return (static_cast<int>(rng() % 2001) - 1000) * 5e-5f; };
  switch (dt) {
    case DType::kF32:
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = small();
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
      break;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = small();
        const uint16_t h = dt == DType::kF16 ? gb::f32_to_f16(v) : gb::f32_to_bf16(v);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      break;
    default: {
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      const gb::DTypeInfo info = gb::dtype_info(dt);
      const uint16_t d = gb::f32_to_f16(1e-3f);
      for (int64_t b = 0; b < rows * cols / info.block_elems; ++b) {
        uint8_t* blk = bytes.data() + b * info.block_bytes;
        if (dt == DType::kQ8_0 || dt == DType::kQ4_0 || dt == DType::kQ5_0 || dt == DType::kIQ4_NL ||
            dt == DType::kQ4_K || dt == DType::kQ5_K || dt == DType::kIQ4_XS)
          std::memcpy(blk, &d, 2);
        if (dt == DType::kQ4_K || dt == DType::kQ5_K) std::memcpy(blk + 2, &d, 2);
        if (dt == DType::kQ6_K) std::memcpy(blk + 208, &d, 2);
        if (dt == DType::kQ3_K) std::memcpy(blk + 108, &d, 2);
        if (dt == DType::kQ2_K) std::memcpy(blk + 80, &d, 2), std::memcpy(blk + 82, &d, 2);
      }
    }
  }
  return bytes;
}

struct Shape {
  const char* name;
  int64_t rows, cols;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"matmul GFLOP/s and GB/s at Qwen3-0.6B shapes"};
  std::vector<std::string> dtypes = {"f32", "f16", "bf16", "q8_0", "q4_0"};
  std::vector<std::string> isas;
  std::vector<std::string> shapes = {"qkv", "up", "down", "lm_head"};
  std::vector<int64_t> ns = {1, 512};
  std::vector<int> threads = {1, 2};
  double min_seconds = 0.3;
  int min_reps = 5;
  int64_t cold_mib = 64;
  std::vector<int> variants = {0};
  bool read_baseline = false;
  app.add_option("--dtypes", dtypes,
                 "weight dtypes (f32 f16 bf16 q8_0 q4_0 q5_0 iq4_nl q2_k q3_k q4_k q5_k q6_k iq4_xs)");
  app.add_option("--isa", isas, "ISA levels, interleaved per case (default: the active one)");
  app.add_option("--shapes", shapes,
                 "qkv=1024x1024 up=3072x1024 down=1024x3072 lm_head=151936x1024 l2=256x1024 (with --cold-mib 0 "
                 "it stays in L2: the kernel's compute rate)");
  app.add_option("-n", ns, "token counts");
  app.add_option("--threads", threads, "thread counts");
  app.add_option("--min-seconds", min_seconds, "time per case and ISA at least");
  app.add_option("--min-reps", min_reps, "repetitions per case and ISA at least");
  app.add_option("--cold-mib", cold_mib,
                 "rotate through copies of the weight totalling at least this many MiB, so decode "
                 "reads DRAM as in a real model (0: one copy, cache-warm for small shapes)");
  app.add_option(
      "--variant", variants,
      "kernel variants (experiments), interleaved like ISAs: bit 0 no prefetch, bit 1 bf16 by "
      "zero-extension, bit 2 K-quants through dequantize + f32 (the old path), bit 3 weights "
      "packed as at load (pack_weight), bit 4 packed Q4_0/Q8_0/Q4_K/Q6_K decode in 256-bit vectors on AVX-512, "
      "bit 5 packed Q4_0/Q8_0/Q4_K/Q6_K without the 16-row kernels (8 rows in place, then panels)");
  app.add_flag("--read", read_baseline,
               "also time a plain read of the same weight bytes, interleaved, and report matmul "
               "GB/s as a fraction of it");
  CLI11_PARSE(app, argc, argv);

  const Shape all_shapes[] = {
      {"qkv", 1024, 1024}, {"up", 3072, 1024}, {"down", 1024, 3072}, {"lm_head", 151936, 1024}, {"l2", 256, 1024}};
  std::vector<Isa> isa_list;
  for (const auto& s : isas) {
    Isa isa;
    if (!gb::ops::parse_isa(s, &isa) || !gb::ops::isa_supported(isa)) {
      std::fprintf(stderr, "skipping ISA %s (unknown or not supported by this CPU)\n", s.c_str());
      continue;
    }
    isa_list.push_back(isa);
  }
  if (isa_list.empty()) isa_list.push_back(gb::ops::active_isa());

  std::printf("best ISA %s; times are medians [min, max]; GB/s counts weight bytes only\n",
              std::string(gb::ops::isa_name(gb::ops::best_isa())).c_str());
  std::printf("%-6s %-8s %5s %3s %-9s %9s %9s %9s %9s %8s %9s %7s\n", "dtype", "shape", "n", "thr", "isa", "ms", "min",
              "max", "GFLOP/s", "GB/s", "GF/s cpu", read_baseline ? "of read" : "");
  for (const auto& dname : dtypes) {
    DType dt;
    bool found = false;
    for (DType c : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL,
                    DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS})
      if (gb::dtype_name(c) == dname) dt = c, found = true;
    if (!found) {
      std::fprintf(stderr, "unknown dtype %s\n", dname.c_str());
      continue;
    }
    for (const auto& sname : shapes) {
      const Shape* sh = nullptr;
      for (const Shape& s : all_shapes)
        if (sname == s.name) sh = &s;
      if (sh == nullptr) continue;
      const int64_t wbytes = gb::row_bytes(dt, sh->cols) * sh->rows;
      const int64_t copies = std::max<int64_t>(1, (cold_mib << 20) / wbytes + ((cold_mib << 20) % wbytes != 0));
      std::vector<std::vector<uint8_t>> store;
      for (int64_t c = 0; c < copies; ++c) store.push_back(make_weight(dt, sh->rows, sh->cols, 1 + c));
      // Variant bit 3: the same copies repacked as at load (pack_weight), when the dtype has a layout.
      std::vector<std::vector<uint8_t>> packed_store;
      if (std::any_of(variants.begin(), variants.end(), [](int v) { return (v & 8) != 0; }))
        for (const auto& b : store) {
          const Weight w{b.data(), dt, sh->rows, sh->cols};
          packed_store.emplace_back(gb::ops::packable(w) ? b.size() : 0);
          gb::ops::pack_weight(w, packed_store.back().data());
        }
      for (int64_t n : ns) {
        std::vector<float> x(n * sh->cols), y(n * sh->rows);
        std::minstd_rand rng(7);
        for (auto& v : x) v = (static_cast<int>(rng() % 2001) - 1000) * 1e-3f;
        for (int nt : threads) {
          gb::ThreadPool pool(nt);
          // Configurations timed rep by rep in turn, so drift in the host's load hits all alike:
          // every (ISA, variant) pair, then optionally the plain read of the same bytes.
          struct Config {
            Isa isa;
            int variant;
            bool read;
          };
          std::vector<Config> configs;
          for (Isa isa : isa_list)
            for (int v : variants) configs.push_back({isa, v, false});
          if (read_baseline) configs.push_back({isa_list[0], 0, true});
          std::vector<std::vector<double>> times(configs.size()), cpu_times(configs.size());
          std::vector<uint64_t> partial(nt);
          double spent = 0;
          int64_t next = 0;
          for (int rep = 0; rep < min_reps + 1 || spent < min_seconds * configs.size(); ++rep) {
            for (size_t k = 0; k < configs.size(); ++k) {
              gb::ops::set_isa(configs[k].isa);
              gb::ops::g_kernel_variant = configs[k].variant;
              const uint8_t* data = store[next].data();
              Weight w{data, dt, sh->rows, sh->cols};
              if ((configs[k].variant & 8) != 0 && !packed_store[next].empty()) w.packed = packed_store[next].data();
              next = (next + 1) % copies;
              const auto t0 = Clock::now();
              const double c0 = thread_cpu_seconds();
              if (configs[k].read) {
                pool.run([&](int ti) {
                  const gb::Range r = gb::split_range(wbytes / 64, ti, nt);
                  partial[ti] = gb::read_bytes(data + r.begin * 64, (r.end - r.begin) * 64);
                });
              } else {
                gb::ops::matmul(pool, x.data(), n, w, y.data());
              }
              const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
              const double cpu = thread_cpu_seconds() - c0;
              spent += sec;
              if (rep > 0) {  // rep 0 warms the pool and the scratch
                times[k].push_back(sec);
                cpu_times[k].push_back(cpu);
              }
            }
            if (rep > 1000) break;
          }
          gb::ops::g_kernel_variant = 0;
          double read_med = 0;
          if (read_baseline) {
            auto v = times.back();
            std::sort(v.begin(), v.end());
            read_med = v[v.size() / 2];
          }
          for (size_t k = 0; k < configs.size(); ++k) {
            auto& v = times[k];
            std::sort(v.begin(), v.end());
            const double med = v[v.size() / 2];
            std::string label = configs[k].read ? "read" : std::string(gb::ops::isa_name(configs[k].isa));
            if (!configs[k].read && variants.size() > 1) label += "/v" + std::to_string(configs[k].variant);
            std::printf("%-6s %-8s %5lld %3d %-9s %9.3f %9.3f %9.3f %9.2f %8.2f", dname.c_str(), sh->name,
                        static_cast<long long>(n), nt, label.c_str(), med * 1e3, v.front() * 1e3, v.back() * 1e3,
                        configs[k].read ? 0.0 : 2.0 * n * sh->rows * sh->cols / med / 1e9, wbytes / med / 1e9);
            if (nt == 1 && !configs[k].read) {
              auto c = cpu_times[k];
              std::sort(c.begin(), c.end());
              std::printf(" %9.2f", 2.0 * n * sh->rows * sh->cols / c[c.size() / 2] / 1e9);
            } else {
              std::printf(" %9s", "-");
            }
            if (read_baseline && !configs[k].read) std::printf(" %6.0f%%", 100.0 * read_med / med);
            std::printf("\n");
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return 0;
}

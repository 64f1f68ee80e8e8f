// Paged attention at Qwen3-0.6B shapes (16 query heads, 8 KV heads, head_dim 128, blocks of 16 or --block-size):
// a prefill chunk of N tokens from position 0 and one decode token at context C, the per-(token,
// head) loop the engine ran before the tiled kernels ("old": a copy of it, on its own key layout)
// against ops::attend_tile ("tile", with f32 / bf16 / f16 KV), 1 and 2 threads, the variants
// interleaved back to back in every repetition (the host is noisy; compare within one run).
// The work split is paged_attention's (src/model/blocks.cc): old = contiguous ranges of
// (token, head) items, tile = KV-head-major chunks in zig-zag order.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "model/parallel.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/cpu_features.h"
#include "ops/dot.h"

namespace {

using Clock = std::chrono::steady_clock;
using gb::DType;

constexpr int64_t kHeads = 16, kKvHeads = 8, kHd = 128, kGroup = kHeads / kKvHeads;

// The attention loop before the tiled kernels, verbatim but for the names: keys row-major
// [block_size, head_dim] per head and block.
void old_attend_head(const float* q, const float* kc, const float* vc, int64_t hd, int64_t bs, int64_t kv_head,
                     const int32_t* table, int64_t n_ctx, float scale, float* out, float* scores) {
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + hd, 0.0f);
  for (int64_t start = 0; start < n_ctx; start += bs) {
    const int64_t n = std::min(bs, n_ctx - start);
    const float* kb = kc + (table[start / bs] * kKvHeads + kv_head) * bs * hd;
    const float* vb = vc + (table[start / bs] * kKvHeads + kv_head) * bs * hd;
    float block_max = running_max;
    for (int64_t j = 0; j < n; ++j) {
      scores[j] = gb::ops::dot(q, kb + j * hd, hd) * scale;
      block_max = std::max(block_max, scores[j]);
    }
    const float correction = std::exp(running_max - block_max);
    running_sum *= correction;
    for (int64_t i = 0; i < hd; ++i) out[i] *= correction;
    for (int64_t j = 0; j < n; ++j) {
      const float p = std::exp(scores[j] - block_max);
      running_sum += p;
      for (int64_t i = 0; i < hd; ++i) out[i] += p * vb[j * hd + i];
    }
    running_max = block_max;
  }
  const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
  for (int64_t i = 0; i < hd; ++i) out[i] *= inv;
}

template <class F>
void parallel(gb::ThreadPool& pool, int64_t n, F&& fn) {
  pool.run([&](int ti) {
    const gb::Range r = gb::split_range(n, ti, pool.size());
    if (r.begin < r.end) fn(r.begin, r.end, ti);
  });
}

struct Case {
  const char* key;
  const char* name;
  int64_t n_tokens;  // query tokens: positions ctx - n_tokens .. ctx - 1
  int64_t ctx;
};

struct Data {
  std::vector<float> k_old, v_old;            // old layout, f32
  std::unique_ptr<gb::HugePages> k[3], v[3];  // new layout: f32, bf16, f16; `layers` copies each, in
                                              // huge pages as KvCache has them
  std::vector<int32_t> table;
  std::vector<float> q, out;
  int64_t n_blocks = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"paged attention: old per-head loop vs tiled kernel"};
  int reps = 7;
  std::vector<int> threads = {1, 2};
  app.add_option("--reps", reps, "repetitions (each variant once per repetition, interleaved)")->capture_default_str();
  app.add_option("--threads", threads, "thread counts")->capture_default_str();
  std::vector<std::string> case_names = {"p512", "p4096", "d512", "d4096"};
  app.add_option("--cases", case_names, "cases: p512 p4096 (prefill), d512 d4096 (decode at that context)")
      ->check(CLI::IsMember({"p512", "p4096", "d512", "d4096"}))
      ->capture_default_str();
  std::vector<std::string> variant_names = {"old", "f32", "bf16", "f16"};
  app.add_option("--variants", variant_names,
                 "old (the per-head loop; the x column needs it), tile f32 / bf16 / f16 KV")
      ->check(CLI::IsMember({"old", "f32", "bf16", "f16"}))
      ->capture_default_str();
  int64_t bs = 16;
  app.add_option("--block-size", bs, "KV block size in tokens (the engine's default is 16)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  int64_t cold_mib = 256;
  app.add_option("--cold-mib", cold_mib,
                 "decode cases: run over copies of the KV cache (one per layer) totalling at least this many MiB "
                 "of f32, timed per layer, so the keys and values come from DRAM as in a model (0: one copy)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  std::vector<int> prefetch_kib;
  app.add_option("--prefetch-kib", prefetch_kib,
                 "software prefetch distances of the tile kernels to compare, KiB of keys + values ahead (0: off; "
                 "default: the built-in distance only), interleaved like the variants");
  CLI11_PARSE(app, argc, argv);
  const int64_t default_prefetch = gb::ops::g_attn_prefetch_bytes;
  std::vector<int64_t> prefetch_bytes;
  for (int k : prefetch_kib) prefetch_bytes.push_back(int64_t{k} * 1024);
  if (prefetch_bytes.empty()) prefetch_bytes.push_back(default_prefetch);
  auto chosen = [](const std::vector<std::string>& v, const char* name) {
    return std::find(v.begin(), v.end(), name) != v.end();
  };

  const Case cases[] = {{"p512", "prefill 512", 512, 512},
                        {"p4096", "prefill 4096", 4096, 4096},
                        {"d512", "decode ctx 512", 1, 512},
                        {"d4096", "decode ctx 4096", 1, 4096}};
  const DType dtypes[3] = {DType::kF32, DType::kBF16, DType::kF16};
  std::printf(
      "ISA %s; %lld q heads, %lld kv heads, head_dim %lld, block %lld; ms per call (decode: per layer, "
      "over layers of >= %lld MiB; old: one cache), median [min, max] of %d\n",
      std::string(gb::ops::isa_name(gb::ops::active_isa())).c_str(), (long long)kHeads, (long long)kKvHeads,
      (long long)kHd, (long long)bs, (long long)cold_mib, reps);
  for (int nt : threads) {
    gb::ThreadPool pool(nt);
    for (const Case& c : cases) {
      if (!chosen(case_names, c.key)) continue;
      Data d;
      d.n_blocks = (c.ctx + bs - 1) / bs;
      const int64_t elems = d.n_blocks * kKvHeads * bs * kHd;
      std::mt19937 rng(1);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      d.k_old.resize(elems);
      d.v_old.resize(elems);
      for (auto& x : d.k_old) x = nd(rng);
      for (auto& x : d.v_old) x = nd(rng);
      for (int64_t b = 0; b < d.n_blocks; ++b) d.table.push_back(static_cast<int32_t>((b * 7 + 3) % d.n_blocks));
      if (d.n_blocks % 7 == 0) {
        for (int64_t b = 0; b < d.n_blocks; ++b) d.table[b] = static_cast<int32_t>(b);
      }
      // Decode reads each layer's cache once per token, and a model's caches together are far
      // larger than the last-level cache: the decode cases run over copies of the cache (layers)
      // totalling at least --cold-mib of f32, so their keys and values come from DRAM.
      const int64_t layer_bytes = elems * 4 * 2;
      const int64_t layers =
          c.n_tokens == 1 ? std::max<int64_t>(1, ((cold_mib << 20) + layer_bytes - 1) / layer_bytes) : 1;
      std::vector<gb::ops::PagedKv> kv[3];
      for (int t = 0; t < 3; ++t) {
        const int64_t eb = dtypes[t] == DType::kF32 ? 4 : 2;
        d.k[t] = gb::HugePages::allocate(layers * elems * eb);
        d.v[t] = gb::HugePages::allocate(layers * elems * eb);
        if (d.k[t] == nullptr || d.v[t] == nullptr) {
          std::fprintf(stderr, "cannot allocate %lld MiB of KV copies (lower --cold-mib)\n",
                       static_cast<long long>(2 * layers * elems * eb >> 20));
          return 1;
        }
        for (int64_t l = 0; l < layers; ++l) {
          kv[t].push_back(gb::ops::PagedKv{d.k[t]->data() + l * elems * eb, d.v[t]->data() + l * elems * eb, d.n_blocks,
                                           kKvHeads, bs, kHd, dtypes[t]});
        }
      }
      // The same keys/values in every layout (slot = block · bs + offset).
      std::vector<float> krow(kKvHeads * kHd), vrow(kKvHeads * kHd);
      for (int64_t slot = 0; slot < d.n_blocks * bs; ++slot) {
        const int64_t b = slot / bs, off = slot % bs;
        for (int64_t h = 0; h < kKvHeads; ++h) {
          for (int64_t i = 0; i < kHd; ++i) {
            krow[h * kHd + i] = d.k_old[((b * kKvHeads + h) * bs + off) * kHd + i];
            vrow[h * kHd + i] = d.v_old[((b * kKvHeads + h) * bs + off) * kHd + i];
          }
        }
        for (int t = 0; t < 3; ++t) gb::ops::kv_store(kv[t][0], slot, krow.data(), vrow.data());
      }
      for (int t = 0; t < 3; ++t) {
        const int64_t bytes = elems * (dtypes[t] == DType::kF32 ? 4 : 2);
        for (int64_t l = 1; l < layers; ++l) {
          std::memcpy(d.k[t]->data() + l * bytes, d.k[t]->data(), bytes);
          std::memcpy(d.v[t]->data() + l * bytes, d.v[t]->data(), bytes);
        }
      }
      const int64_t n = c.n_tokens, qd = kHeads * kHd, pos_first = c.ctx - n;
      d.q.resize(n * qd);
      for (auto& x : d.q) x = nd(rng);
      d.out.resize(n * qd);
      const float scale = 1.0f / std::sqrt(static_cast<float>(kHd));
      const int64_t tile_pos = gb::ops::attend_tile_positions(kGroup);
      const int64_t scratch_floats = gb::ops::attend_scratch_floats(kv[0][0], tile_pos * kGroup);
      std::vector<float> scratch(static_cast<size_t>(nt) * scratch_floats);

      auto run_old = [&] {
        parallel(pool, n * kHeads, [&](int64_t b, int64_t e, int ti) {
          for (int64_t item = b; item < e; ++item) {
            const int64_t t = item / kHeads, h = item % kHeads;
            old_attend_head(d.q.data() + t * qd + h * kHd, d.k_old.data(), d.v_old.data(), kv[0][0].head_dim, bs,
                            h / kGroup, d.table.data(), pos_first + t + 1, scale, d.out.data() + t * qd + h * kHd,
                            scratch.data() + ti * scratch_floats);
          }
        });
      };
      auto run_tile = [&](const gb::ops::PagedKv& cache) {
        const int64_t n_chunks = (n + tile_pos - 1) / tile_pos;
        // The engine's scheduling (paged_attention): with several chunks per KV head the items are
        // claimed in order by whichever thread is free, else each thread takes contiguous heads.
        auto run_item = [&](int64_t item, int ti) {
          const int64_t h = item / n_chunks, k = item % n_chunks;
          const int64_t chunk = k % 2 == 0 ? k / 2 : n_chunks - 1 - k / 2;
          const int64_t t0 = chunk * tile_pos, t1 = std::min(n, t0 + tile_pos);
          gb::ops::AttendTile tile;
          tile.q = d.q.data() + t0 * qd + h * kGroup * kHd;
          tile.q_stride = qd;
          tile.out = d.out.data() + t0 * qd + h * kGroup * kHd;
          tile.out_stride = qd;
          tile.n_pos = t1 - t0;
          tile.n_q = kGroup;
          tile.pos0 = pos_first + t0;
          tile.kv_head = h;
          tile.block_table = d.table.data();
          tile.scale = scale;
          gb::ops::attend_tile(tile, cache, scratch.data() + ti * scratch_floats);
        };
        if (n_chunks > 1) {
          gb::parallel_items(pool, kKvHeads * n_chunks, int64_t{1} << 30, run_item);
        } else {
          parallel(pool, kKvHeads, [&](int64_t b, int64_t e, int ti) {
            for (int64_t item = b; item < e; ++item) run_item(item, ti);
          });
        }
      };
      const char* names[4] = {"old f32", "tile f32", "tile bf16", "tile f16"};
      const char* keys[4] = {"old", "f32", "bf16", "f16"};
      // Configurations: the old loop once, each tile variant at each prefetch distance.
      struct Config {
        int v;
        int64_t prefetch;
        std::vector<double> ms;
      };
      std::vector<Config> configs;
      for (int v = 0; v < 4; ++v) {
        if (!chosen(variant_names, keys[v])) continue;
        if (v == 0) {
          configs.push_back({0, 0, {}});
          continue;
        }
        for (int64_t pf : prefetch_bytes) configs.push_back({v, pf, {}});
      }
      for (int r = -1; r < reps; ++r) {  // one warm-up round
        for (Config& cf : configs) {
          gb::ops::g_attn_prefetch_bytes = cf.prefetch;
          const auto t0 = Clock::now();
          if (cf.v == 0) {
            run_old();
          } else {
            for (const gb::ops::PagedKv& layer : kv[cf.v - 1]) run_tile(layer);
          }
          const double dt =
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / (cf.v == 0 ? 1 : layers);
          if (r >= 0) cf.ms.push_back(dt);
        }
      }
      gb::ops::g_attn_prefetch_bytes = default_prefetch;
      const double old_ms = !configs.empty() && configs[0].v == 0 ? median(configs[0].ms) : 0;
      for (const Config& cf : configs) {
        char name[48];
        std::snprintf(name, sizeof name, "%s", names[cf.v]);
        if (cf.v > 0 && prefetch_kib.size() > 0)
          std::snprintf(name, sizeof name, "%s pf %lldK", names[cf.v], static_cast<long long>(cf.prefetch / 1024));
        const double med = median(cf.ms);
        std::printf("t%d %-16s %-15s %10.3f [%.3f, %.3f]", nt, c.name, name, med,
                    *std::min_element(cf.ms.begin(), cf.ms.end()), *std::max_element(cf.ms.begin(), cf.ms.end()));
        if (old_ms > 0) std::printf("  x%.2f", old_ms / med);
        if (n == 1) {  // decode: every key and value of the context read once
          const double eb = cf.v <= 1 ? 4 : 2;
          std::printf("  %.1f GB/s of KV", 2.0 * c.ctx * kKvHeads * kHd * eb / (med * 1e6));
        }
        std::printf("\n");
      }
    }
  }
  return 0;
}

// Paged attention and KV stores against plain scalar double-precision references, on odd sizes,
// every KV dtype and every ISA this CPU runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/cpu_features.h"
#include "ops/dot.h"
#include "support/test_support.h"

namespace gb::ops {
namespace {

using test::max_rel_err;
using test::random_vec;

std::vector<Isa> isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(i)) out.push_back(i);
  }
  return out;
}

// A paged cache holding one sequence of n_ctx tokens in scattered blocks; every slot the sequence
// does not own is NaN, so a kernel that reads past a row's keys shows it.
struct TestCache {
  std::vector<uint8_t> kbuf, vbuf;
  std::vector<int32_t> table;
  std::vector<float> k, v;  // [n_ctx, n_kv, hd] f32 as given to kv_store
  PagedKv kv;

  TestCache(int64_t n_kv, int64_t bs, int64_t hd, DType dtype, int64_t n_ctx, uint32_t seed, float kscale = 1.0f) {
    const int64_t n_seq_blocks = (n_ctx + bs - 1) / bs, n_blocks = n_seq_blocks + 3;
    const int64_t eb = dtype == DType::kF32 ? 4 : 2;
    kbuf.assign(n_blocks * n_kv * bs * hd * eb, 0xff);  // NaN in every dtype
    vbuf.assign(kbuf.size(), 0xff);
    kv = PagedKv{kbuf.data(), vbuf.data(), n_blocks, n_kv, bs, hd, dtype};
    for (int64_t b = 0; b < n_seq_blocks; ++b) table.push_back(static_cast<int32_t>((b * 7 + 2) % n_blocks));
    // Distinct blocks: 7 is coprime with n_blocks unless n_blocks is a multiple of 7.
    if (n_blocks % 7 == 0) {
      for (int64_t b = 0; b < n_seq_blocks; ++b) table[b] = static_cast<int32_t>(n_blocks - 1 - b);
    }
    k = random_vec(n_ctx * n_kv * hd, seed, kscale);
    v = random_vec(n_ctx * n_kv * hd, seed + 1);
    for (int64_t p = 0; p < n_ctx; ++p) {
      kv_store(kv, table[p / bs] * bs + p % bs, k.data() + p * n_kv * hd, v.data() + p * n_kv * hd);
    }
  }
  // Keys / values of head h, positions [0, n), contiguous [n, hd]: as stored (widened) or as given.
  void gather(int64_t h, int64_t n, bool stored, std::vector<float>* kc, std::vector<float>* vc) const {
    const int64_t hd = kv.head_dim, bs = kv.block_size;
    kc->resize(n * hd);
    vc->resize(n * hd);
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t i = 0; i < hd; ++i) {
        const int64_t slot = table[p / bs] * bs + p % bs;
        (*kc)[p * hd + i] = stored ? kv.key(slot, h, i) : k[(p * kv.n_kv_heads + h) * hd + i];
        (*vc)[p * hd + i] = stored ? kv.value(slot, h, i) : v[(p * kv.n_kv_heads + h) * hd + i];
      }
    }
  }
};

struct TileRun {
  std::vector<float> q, out;
  std::vector<float> mass;
  int64_t stride = 0;
};

// Runs one tile (n_pos positions from pos0 × g query heads of kv head h); q rows are padded apart
// (stride) to check the strides. sinks: per position, or empty for none. table: a copy of
// c.table to read instead (null: c.table).
TileRun run_tile(const TestCache& c, int64_t h, int64_t g, int64_t pos0, int64_t n_pos, uint32_t seed,
                 const std::vector<uint8_t>& sinks = {}, const int32_t* table = nullptr) {
  const int64_t hd = c.kv.head_dim;
  TileRun r;
  r.stride = g * hd + 3;
  r.q = random_vec(n_pos * r.stride, seed, 2.0f);  // large scores exercise the running max
  r.out.assign(n_pos * r.stride, -7.0f);
  r.mass.assign(n_pos * g, -1.0f);
  AttendTile t;
  t.q = r.q.data();
  t.q_stride = r.stride;
  t.out = r.out.data();
  t.out_stride = r.stride;
  t.n_pos = n_pos;
  t.n_q = g;
  t.pos0 = pos0;
  t.kv_head = h;
  t.block_table = table != nullptr ? table : c.table.data();
  t.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (!sinks.empty()) {
    t.n_sink = sinks.data();
    t.n_sink_pos = static_cast<int64_t>(sinks.size());
    t.sink_mass = r.mass.data();
    t.sink_stride = g;
  }
  std::vector<float> scratch(attend_scratch_floats(c.kv, n_pos * g));
  attend_tile(t, c.kv, scratch.data());
  return r;
}

std::string isa_str(Isa i) { return std::string(isa_name(i)); }

struct Shape {
  int64_t hd, bs, n_ctx;
};

// Every row of tiles of odd shapes against the double reference on the stored keys/values; each
// row bitwise equal to the same row attended alone (a tile of one), so no result depends on its
// tile; padding between q/out rows untouched.
TEST(Attention, TileMatchesReferenceOnEveryIsaAndDtype) {
  const Shape shapes[] = {{64, 16, 300}, {128, 16, 77}, {7, 5, 41}, {72, 16, 53}, {128, 32, 70}, {40, 3, 20}};
  for (Isa isa : isas()) {
    ScopedIsa scoped(isa);
    ASSERT_TRUE(scoped.ok());
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const Shape& s : shapes) {
        for (int64_t g : {1, 2, 4}) {
          const TestCache c(2, s.bs, s.hd, dtype, s.n_ctx, 11 + static_cast<uint32_t>(s.hd + g));
          const int64_t n = s.n_ctx;
          // (pos0, n_pos): the first token, a prefill from 0, a chunk starting mid-block, decode.
          const std::pair<int64_t, int64_t> tiles[] = {{0, 1},
                                                       {0, std::min<int64_t>(n, 9)},
                                                       {s.bs / 2 + 1, std::min<int64_t>(n - s.bs / 2 - 1, 13)},
                                                       {n - 1, 1},
                                                       {n - 5, 5}};
          for (auto [pos0, n_pos] : tiles) {
            for (int64_t h = 0; h < 2; ++h) {
              SCOPED_TRACE(isa_str(isa) + " " + std::string(dtype_name(dtype)) + " hd " + std::to_string(s.hd) +
                           " bs " + std::to_string(s.bs) + " g " + std::to_string(g) + " pos0 " + std::to_string(pos0) +
                           " n_pos " + std::to_string(n_pos) + " h " + std::to_string(h));
              const TileRun r = run_tile(c, h, g, pos0, n_pos, static_cast<uint32_t>(pos0 * 31 + n_pos + h));
              std::vector<float> kc, vc, want(s.hd), got(s.hd), alone(s.hd), scratch(attend_scratch_floats(c.kv, 1));
              c.gather(h, pos0 + n_pos, /*stored=*/true, &kc, &vc);
              for (int64_t i = 0; i < n_pos; ++i) {
                for (int64_t j = 0; j < g; ++j) {
                  const float* q = r.q.data() + i * r.stride + j * s.hd;
                  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
                  attend_head_ref(q, kc.data(), vc.data(), pos0 + i + 1, s.hd, scale, want.data());
                  std::memcpy(got.data(), r.out.data() + i * r.stride + j * s.hd, s.hd * sizeof(float));
                  ASSERT_LE(max_rel_err(got, want), 2e-5) << "row " << i << "," << j;
                  attend_head(q, c.kv, h, c.table.data(), pos0 + i + 1, scale, alone.data(), scratch.data());
                  ASSERT_EQ(std::memcmp(got.data(), alone.data(), s.hd * sizeof(float)), 0) << "row " << i << "," << j;
                }
                for (int64_t e = g * s.hd; e < r.stride; ++e) ASSERT_EQ(r.out[i * r.stride + e], -7.0f);
              }
            }
          }
        }
      }
    }
  }
}

// The loop attend_head ran before the tiled kernels (keys row-major per block), verbatim but for
// the layout: the portable kernel must stay bitwise this on f32 KV (GLASSBOX_ISA=scalar keeps
// the engine's pre-tiling hidden states).
void original_attend_head(const float* q, const std::vector<float>& k, const std::vector<float>& v, int64_t hd,
                          int64_t bs, int64_t n_ctx, float scale, float* out) {
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + hd, 0.0f);
  std::vector<float> scores(bs);
  for (int64_t start = 0; start < n_ctx; start += bs) {
    const int64_t n = std::min(bs, n_ctx - start);
    const float* kb = k.data() + start * hd;
    const float* vb = v.data() + start * hd;
    float block_max = running_max;
    for (int64_t j = 0; j < n; ++j) {
      scores[j] = dot(q, kb + j * hd, hd) * scale;
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

TEST(Attention, PortableKernelIsBitwiseTheOriginalLoop) {
  ScopedIsa scoped(Isa::kScalar);
  for (const Shape& s : {Shape{128, 16, 100}, Shape{7, 5, 41}, Shape{64, 16, 33}}) {
    const TestCache c(2, s.bs, s.hd, DType::kF32, s.n_ctx, 51);
    const TileRun r = run_tile(c, 1, 2, s.n_ctx - 6, 6, 52);
    std::vector<float> kc, vc, want(s.hd);
    c.gather(1, s.n_ctx, true, &kc, &vc);
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        original_attend_head(r.q.data() + i * r.stride + j * s.hd, kc, vc, s.hd, s.bs, s.n_ctx - 6 + i + 1,
                             1.0f / std::sqrt(static_cast<float>(s.hd)), want.data());
        EXPECT_EQ(std::memcmp(want.data(), r.out.data() + i * r.stride + j * s.hd, s.hd * sizeof(float)), 0)
            << "hd " << s.hd << " row " << i << "," << j;
      }
    }
  }
}

// A tile of more rows than a kernel takes at once (300 positions × 4 heads: split into parts),
// and 300 keys spanning 19 blocks, against the reference.
TEST(Attention, LargeTileIsSplitTransparently) {
  for (Isa isa : isas()) {
    ScopedIsa scoped(isa);
    const TestCache c(1, 16, 64, DType::kF32, 300, 5);
    const TileRun r = run_tile(c, 0, 4, 0, 300, 9);
    std::vector<float> kc, vc, want(64), got(64);
    c.gather(0, 300, true, &kc, &vc);
    for (int64_t i = 0; i < 300; i += 7) {
      for (int64_t j = 0; j < 4; ++j) {
        attend_head_ref(r.q.data() + i * r.stride + j * 64, kc.data(), vc.data(), i + 1, 64, 1.0f / 8.0f, want.data());
        std::memcpy(got.data(), r.out.data() + i * r.stride + j * 64, 64 * sizeof(float));
        ASSERT_LE(max_rel_err(got, want), 2e-5) << isa_name(isa) << " row " << i << "," << j;
      }
    }
  }
}

// AVX2 and AVX-512 give bitwise the same outputs and sink masses (the same per-lane arithmetic).
TEST(Attention, Avx2AndAvx512AreBitwiseEqual) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape& s : {Shape{128, 16, 200}, Shape{7, 5, 41}, Shape{72, 16, 53}, Shape{64, 8, 30}}) {
      const TestCache c(2, s.bs, s.hd, dtype, s.n_ctx, 21);
      std::vector<uint8_t> sinks(9);
      for (size_t i = 0; i < sinks.size(); ++i) sinks[i] = static_cast<uint8_t>((i * 5) % 19);
      TileRun a, b;
      {
        ScopedIsa scoped(Isa::kAvx2);
        a = run_tile(c, 1, 2, s.n_ctx - 9, 9, 3, sinks);
      }
      {
        ScopedIsa scoped(Isa::kAvx512);
        b = run_tile(c, 1, 2, s.n_ctx - 9, 9, 3, sinks);
      }
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)), 0)
          << dtype_name(dtype) << " hd " << s.hd;
      EXPECT_EQ(std::memcmp(a.mass.data(), b.mass.data(), a.mass.size() * sizeof(float)), 0)
          << dtype_name(dtype) << " hd " << s.hd;
    }
  }
}

// The attention-sink output: the softmax weight on the first n_sink key positions, against the
// double two-pass reference, on odd head dims and block sizes, contexts spanning several
// scattered blocks, n_sink below, at and above a block and above the context, positions without
// sinks (0) beside positions with; the outputs are bitwise the same with or without sinks.
TEST(Attention, SinkMassMatchesReference) {
  for (Isa isa : isas()) {
    ScopedIsa scoped(isa);
    for (auto [hd, bs] : {std::pair<int64_t, int64_t>{8, 16}, {5, 3}, {32, 4}, {7, 5}, {128, 16}}) {
      for (int64_t n_ctx : {int64_t{1}, int64_t{2}, bs, bs + 1, 3 * bs + 2, 9 * bs - 1}) {
        const TestCache c(2, bs, hd, DType::kF32, n_ctx, 15, 3.0f);  // peaked softmax: masses near 0 and 1
        const int64_t n_pos = std::min<int64_t>(n_ctx, 6), pos0 = n_ctx - n_pos;
        for (int64_t first_sink : {int64_t{1}, int64_t{2}, bs, bs + 1, int64_t{16}, int64_t{255}}) {
          std::vector<uint8_t> sinks(n_pos);
          for (int64_t i = 0; i < n_pos; ++i) sinks[i] = i == 1 ? 0 : static_cast<uint8_t>(first_sink + i);
          sinks.resize(std::max<int64_t>(0, n_pos - 1));  // the last position is past n_sink_pos: none
          SCOPED_TRACE(isa_str(isa) + " hd " + std::to_string(hd) + " bs " + std::to_string(bs) + " ctx " +
                       std::to_string(n_ctx) + " sink " + std::to_string(first_sink));
          const TileRun with = run_tile(c, 1, 2, pos0, n_pos, 17, sinks);
          const TileRun plain = run_tile(c, 1, 2, pos0, n_pos, 17);
          EXPECT_EQ(std::memcmp(with.out.data(), plain.out.data(), with.out.size() * sizeof(float)), 0);
          std::vector<float> kc, vc, want(hd);
          c.gather(1, n_ctx, true, &kc, &vc);
          for (int64_t i = 0; i < n_pos; ++i) {
            for (int64_t j = 0; j < 2; ++j) {
              const float mass = with.mass[i * 2 + j];
              if (i >= static_cast<int64_t>(sinks.size()) || sinks[i] == 0) {
                EXPECT_EQ(mass, -1.0f) << "untouched without sinks";
                continue;
              }
              double want_mass = -1;
              attend_head_ref(with.q.data() + i * with.stride + j * hd, kc.data(), vc.data(), pos0 + i + 1, hd,
                              1.0f / std::sqrt(float(hd)), want.data(), sinks[i], &want_mass);
              EXPECT_NEAR(mass, want_mass, 1e-6) << "row " << i << "," << j;
              if (sinks[i] >= pos0 + i + 1) {
                EXPECT_NEAR(mass, 1.0, 1e-6);
              }
              EXPECT_GE(mass, 0.0f);
              EXPECT_LE(mass, 1.0f);
            }
          }
        }
      }
    }
  }
}

// A hand-built case: scores 0 and ln 3 give weights 1/4 and 3/4; keys in two blocks, reversed.
TEST(Attention, SinkMassHandBuilt) {
  for (Isa isa : isas()) {
    ScopedIsa scoped(isa);
    float kbuf[2] = {std::log(3.0f), 0.0f}, vbuf[2] = {10.0f, 2.0f};
    PagedKv kv{kbuf, vbuf, 2, 1, 1, 1};
    const int32_t table[] = {1, 0};  // position 0 in block 1 (score 0), position 1 in block 0 (score ln 3)
    const float q[] = {1.0f};
    float out = 0, mass = 0;
    std::vector<float> scratch(attend_scratch_floats(kv, 1));
    attend_head(q, kv, 0, table, 2, 1.0f, &out, scratch.data(), 1, &mass);
    EXPECT_NEAR(mass, 0.25f, 1e-7) << isa_name(isa);
    EXPECT_NEAR(out, 0.25f * 2.0f + 0.75f * 10.0f, 1e-5) << isa_name(isa);
    attend_head(q, kv, 0, table, 1, 1.0f, &out, scratch.data(), 1, &mass);  // the first token sees only itself
    EXPECT_EQ(mass, 1.0f) << isa_name(isa);
  }
}

// bf16 / f16 KV against the f32 reference on the unrounded keys and values, within a bound
// derived from the rounding: each stored element is within u·|x| (u = 2^-8 bf16, 2^-11 f16, for
// normal values: the unit roundoff of 8 and 11 significant bits), so each score moves by at most δ = u · scale · Σ_i
// |q_i k_i| and the softmax weights by at most e^{2δ} − 1 in total (each ratio p_j / p_k by at most e^{2δ}); an output
// element then moves by at most (u + e^{2δ} − 1) · max_j |v_j,i|, plus f32 slack.
TEST(Attention, NarrowKvWithinDerivedBound) {
  for (Isa isa : isas()) {
    ScopedIsa scoped(isa);
    for (auto [dtype, u] : {std::pair<DType, double>{DType::kBF16, 1.0 / 256}, {DType::kF16, 1.0 / 2048}}) {
      for (const Shape& s : {Shape{128, 16, 300}, Shape{64, 16, 100}, Shape{7, 5, 41}}) {
        const TestCache c(1, s.bs, s.hd, dtype, s.n_ctx, 31);
        const int64_t n_pos = 12, pos0 = s.n_ctx - n_pos;
        const TileRun r = run_tile(c, 0, 2, pos0, n_pos, 41);
        std::vector<float> kc, vc, want(s.hd);
        c.gather(0, s.n_ctx, /*stored=*/false, &kc, &vc);
        const double scale = 1.0 / std::sqrt(double(s.hd));
        double worst = 0;  // the largest error as a share of its bound
        for (int64_t i = 0; i < n_pos; ++i) {
          for (int64_t j = 0; j < 2; ++j) {
            const float* q = r.q.data() + i * r.stride + j * s.hd;
            const int64_t n_ctx = pos0 + i + 1;
            attend_head_ref(q, kc.data(), vc.data(), n_ctx, s.hd, static_cast<float>(scale), want.data());
            double delta = 0;
            for (int64_t p = 0; p < n_ctx; ++p) {
              double a = 0;
              for (int64_t e = 0; e < s.hd; ++e) a += std::fabs(double(q[e]) * kc[p * s.hd + e]);
              delta = std::max(delta, u * scale * a);
            }
            for (int64_t e = 0; e < s.hd; ++e) {
              double vmax = 0;
              for (int64_t p = 0; p < n_ctx; ++p) vmax = std::max(vmax, std::fabs(double(vc[p * s.hd + e])));
              const double bound = (u + std::expm1(2 * delta)) * vmax + 2e-5 * (1 + std::fabs(want[e]));
              const double err = std::fabs(double(r.out[i * r.stride + j * s.hd + e]) - want[e]);
              ASSERT_LE(err, bound) << isa_name(isa) << " " << dtype_name(dtype) << " hd " << s.hd << " row " << i;
              worst = std::max(worst, err / bound);
            }
          }
        }
        // The bound is not vacuous: the rounding shows (a narrow KV is not silently kept f32).
        EXPECT_GT(worst, 1e-3) << isa_name(isa) << " " << dtype_name(dtype);
      }
    }
  }
}

// The SIMD kernels prefetch the KV blocks ahead of the one they attend (g_attn_prefetch_bytes):
// at every distance, from one block to more than the context, the outputs and sink masses are
// bitwise those without prefetch, and no block-table entry past the row's context is read (the
// table ends at a page that may not be read, so such a read faults).
TEST(Attention, PrefetchAheadChangesNoBitAndStaysInTheTable) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(mem) + page, page, PROT_NONE), 0);
  const int64_t saved = g_attn_prefetch_bytes;
  int compared = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    ScopedIsa scoped(isa);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (const Shape& s : {Shape{128, 16, 300}, Shape{64, 16, 33}, Shape{7, 5, 41}}) {
        const TestCache c(2, s.bs, s.hd, dtype, s.n_ctx, 61);
        // The table's last entry is the last int32 before the guard page.
        int32_t* guarded = reinterpret_cast<int32_t*>(static_cast<char*>(mem) + page) - c.table.size();
        std::copy(c.table.begin(), c.table.end(), guarded);
        std::vector<uint8_t> sinks(4, 3);
        // (pos0, n_pos): decode at the end of the context, a prefill tile that ends there.
        for (auto [pos0, n_pos] : {std::pair<int64_t, int64_t>{s.n_ctx - 1, 1}, {s.n_ctx - 4, 4}}) {
          g_attn_prefetch_bytes = 0;
          const TileRun want = run_tile(c, 1, 2, pos0, n_pos, 62, sinks, guarded);
          for (int64_t bytes : {int64_t{1}, int64_t{16} << 10, int64_t{128} << 10, int64_t{1} << 24}) {
            SCOPED_TRACE(isa_str(isa) + " " + std::string(dtype_name(dtype)) + " hd " + std::to_string(s.hd) +
                         " n_pos " + std::to_string(n_pos) + " prefetch " + std::to_string(bytes));
            g_attn_prefetch_bytes = bytes;
            const TileRun got = run_tile(c, 1, 2, pos0, n_pos, 62, sinks, guarded);
            EXPECT_EQ(std::memcmp(got.out.data(), want.out.data(), got.out.size() * sizeof(float)), 0);
            EXPECT_EQ(std::memcmp(got.mass.data(), want.mass.data(), got.mass.size() * sizeof(float)), 0);
            ++compared;
          }
        }
      }
    }
  }
  g_attn_prefetch_bytes = saved;
  munmap(mem, 2 * page);
  if (compared == 0) GTEST_SKIP() << "CPU has no SIMD level";
}

TEST(Attention, KvStoreWritesTheSlotOfEveryHeadInEveryDtype) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const int64_t n_kv = 2, bs = 4, hd = 3, n_blocks = 3;
    std::vector<uint8_t> kbuf(n_blocks * n_kv * bs * hd * 4, 0), vbuf(kbuf.size(), 0);
    PagedKv kv{kbuf.data(), vbuf.data(), n_blocks, n_kv, bs, hd, dtype};
    const float k[] = {1, 2, 3, 4, 5, 6.0078125f}, v[] = {-1, -2, -3, -4, -5, -6};
    kv_store(kv, 2 * bs + 1, k, v);  // block 2, offset 1
    EXPECT_EQ(kv.key(2 * bs + 1, 0, 0), 1);
    EXPECT_EQ(kv.key(2 * bs + 1, 1, 2), dtype == DType::kBF16 ? 6.0f : 6.0078125f);  // bf16: 8 bits of mantissa
    EXPECT_EQ(kv.value(2 * bs + 1, 1, 0), -4);
    EXPECT_EQ(kv.key(2 * bs, 0, 0), 0);  // the neighbouring slot untouched
    // The layout: keys transposed inside a block ([head_dim, block_size]), values row-major.
    const int64_t eb = kv.elem_bytes();
    EXPECT_NE(std::memcmp(kv.k_at(2, 1) + (2 * bs + 1) * eb, std::vector<uint8_t>(eb, 0).data(), eb), 0);
    EXPECT_NE(std::memcmp(kv.v_at(2, 1) + (1 * hd + 2) * eb, std::vector<uint8_t>(eb, 0).data(), eb), 0);
  }
  EXPECT_TRUE(kv_dtype_supported(DType::kBF16));
  EXPECT_FALSE(kv_dtype_supported(DType::kQ8_0));
}

// The SIMD rounding of bf16 / f16 caches writes the bytes the scalar rounding writes, on every
// ISA: random values across many binades, ties, subnormal results, overflow, ±inf, NaNs with
// payloads; head_dim 128 (whole vectors) and 13 (the tail path).
TEST(Attention, KvStoreNarrowsBitwiseLikeScalarOnEveryIsa) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-30, 20), sign(0, 1);
  const uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffa00001u, 0x7f800001u, 0x477ff000u,
                               0x477fefffu, 0xc77ff000u, 0x33000000u, 0x33000001u, 0x387fc000u, 0x00000001u,
                               0x80000000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x3f800fffu, 0x3f801000u};
  int compared = 0;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t hd : {int64_t{128}, int64_t{13}}) {
      const int64_t n_kv = 3, bs = 16, n_blocks = 2, row = n_kv * hd;
      std::vector<float> k(2 * bs * row), v(k.size());
      for (size_t i = 0; i < k.size(); ++i) {
        for (float* x : {&k[i], &v[i]}) {
          if (i % 7 == 3) {
            const uint32_t bits = specials[(i / 7 + (x == &v[i])) % std::size(specials)];
            std::memcpy(x, &bits, 4);
          } else {
            *x = std::ldexp(mant(rng), expo(rng)) * (sign(rng) ? -1.0f : 1.0f);
          }
        }
      }
      auto store_all = [&](std::vector<uint8_t>& kb, std::vector<uint8_t>& vb) {
        PagedKv kv{kb.data(), vb.data(), n_blocks, n_kv, bs, hd, dtype};
        for (int64_t slot = 0; slot < 2 * bs; ++slot) kv_store(kv, slot, k.data() + slot * row, v.data() + slot * row);
      };
      const size_t bytes = n_blocks * n_kv * bs * hd * 2;
      std::vector<uint8_t> want_k(bytes, 0xee), want_v(bytes, 0xee);
      {
        ScopedIsa scoped(Isa::kScalar);
        store_all(want_k, want_v);
      }
      for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
        ScopedIsa scoped(isa);
        if (!scoped.ok()) continue;
        std::vector<uint8_t> got_k(bytes, 0xee), got_v(bytes, 0xee);
        store_all(got_k, got_v);
        EXPECT_EQ(got_k, want_k) << isa_name(isa) << " " << dtype_name(dtype) << " hd " << hd;
        EXPECT_EQ(got_v, want_v) << isa_name(isa) << " " << dtype_name(dtype) << " hd " << hd;
        ++compared;
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "CPU has no SIMD level";
}

}  // namespace
}  // namespace gb::ops

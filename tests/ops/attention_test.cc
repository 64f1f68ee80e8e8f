// Paged attention and KV stores against plain scalar double-precision references, on odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "support/test_support.h"

namespace gb::ops {
namespace {

using test::max_rel_err;
using test::random_vec;

TEST(Attention, PagedMatchesContiguousReference) {
  for (auto [hd, bs, n_kv] : {std::tuple<int64_t, int64_t, int64_t>{8, 16, 2}, {5, 3, 1}, {32, 4, 3}}) {
    const int64_t n_blocks = 20;
    std::vector<float> kbuf = random_vec(n_blocks * n_kv * bs * hd, 5), vbuf = random_vec(n_blocks * n_kv * bs * hd, 6);
    PagedKv kv{kbuf.data(), vbuf.data(), n_blocks, n_kv, bs, hd};
    const std::vector<int32_t> table = {13, 2, 19, 0, 7, 4, 11};  // scattered blocks
    for (int64_t n_ctx : {int64_t{1}, bs - 1, bs, bs + 1, int64_t(table.size()) * bs - 2}) {
      for (int64_t h = 0; h < n_kv; ++h) {
        // Gather the sequence's keys/values contiguously for the reference.
        std::vector<float> k(n_ctx * hd), v(n_ctx * hd);
        for (int64_t p = 0; p < n_ctx; ++p) {
          for (int64_t i = 0; i < hd; ++i) {
            k[p * hd + i] = kv.k_at(table[p / bs], h)[(p % bs) * hd + i];
            v[p * hd + i] = kv.v_at(table[p / bs], h)[(p % bs) * hd + i];
          }
        }
        const auto q = random_vec(hd, 7 + n_ctx, 2.0f);  // large scores exercise the running max
        std::vector<float> got(hd), want(hd), scores(bs);
        attend_head(q.data(), kv, h, table.data(), n_ctx, 1.0f / std::sqrt(float(hd)), got.data(), scores.data());
        attend_head_ref(q.data(), k.data(), v.data(), n_ctx, hd, 1.0f / std::sqrt(float(hd)), want.data());
        EXPECT_LE(max_rel_err(got, want), 1e-5) << "hd " << hd << " bs " << bs << " ctx " << n_ctx;
      }
    }
  }
}

// The attention-sink output: the softmax weight on the first n_sink key positions, against the
// double two-pass reference, on odd head dims and block sizes, contexts spanning several
// scattered blocks, n_sink below, at and above a block and above the context; the head's output
// is bitwise the same with or without it. (The kernel has one portable path: no ISA dispatch.)
TEST(Attention, SinkMassMatchesReference) {
  for (auto [hd, bs, n_kv] : {std::tuple<int64_t, int64_t, int64_t>{8, 16, 2}, {5, 3, 1}, {32, 4, 3}, {7, 5, 2}}) {
    const int64_t n_blocks = 20;
    std::vector<float> kbuf = random_vec(n_blocks * n_kv * bs * hd, 15),
                       vbuf = random_vec(n_blocks * n_kv * bs * hd, 16);
    PagedKv kv{kbuf.data(), vbuf.data(), n_blocks, n_kv, bs, hd};
    const std::vector<int32_t> table = {13, 2, 19, 0, 7, 4, 11, 5, 9};
    for (int64_t n_ctx : {int64_t{1}, int64_t{2}, bs, bs + 1, 3 * bs + 2, int64_t(table.size()) * bs - 1}) {
      for (int64_t n_sink : {int64_t{1}, int64_t{2}, bs, bs + 1, int64_t{16}}) {
        for (int64_t h = 0; h < n_kv; ++h) {
          std::vector<float> k(n_ctx * hd), v(n_ctx * hd);
          for (int64_t p = 0; p < n_ctx; ++p) {
            for (int64_t i = 0; i < hd; ++i) {
              k[p * hd + i] = kv.k_at(table[p / bs], h)[(p % bs) * hd + i];
              v[p * hd + i] = kv.v_at(table[p / bs], h)[(p % bs) * hd + i];
            }
          }
          const auto q = random_vec(hd, 17 + n_ctx + n_sink, 3.0f);  // peaked softmax: masses near 0 and 1
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> got(hd), plain(hd), want(hd), scores(bs);
          float mass = -1;
          double want_mass = -1;
          attend_head(q.data(), kv, h, table.data(), n_ctx, scale, got.data(), scores.data(), n_sink, &mass);
          attend_head(q.data(), kv, h, table.data(), n_ctx, scale, plain.data(), scores.data());
          attend_head_ref(q.data(), k.data(), v.data(), n_ctx, hd, scale, want.data(), n_sink, &want_mass);
          SCOPED_TRACE("hd " + std::to_string(hd) + " bs " + std::to_string(bs) + " ctx " + std::to_string(n_ctx) +
                       " sink " + std::to_string(n_sink));
          EXPECT_NEAR(mass, want_mass, 1e-6);
          EXPECT_EQ(std::memcmp(got.data(), plain.data(), hd * sizeof(float)), 0);
          if (n_sink >= n_ctx) {
            EXPECT_NEAR(mass, 1.0, 1e-6);
          }
          EXPECT_GE(mass, 0.0f);
        }
      }
    }
  }
}

// A hand-built case: scores 0 and ln 3 give weights 1/4 and 3/4; keys in two blocks, reversed.
TEST(Attention, SinkMassHandBuilt) {
  float kbuf[2] = {std::log(3.0f), 0.0f}, vbuf[2] = {10.0f, 2.0f};
  PagedKv kv{kbuf, vbuf, 2, 1, 1, 1};
  const int32_t table[] = {1, 0};  // position 0 in block 1 (score 0), position 1 in block 0 (score ln 3)
  const float q[] = {1.0f};
  float out = 0, scores[1], mass = 0;
  attend_head(q, kv, 0, table, 2, 1.0f, &out, scores, 1, &mass);
  EXPECT_NEAR(mass, 0.25f, 1e-7);
  EXPECT_NEAR(out, 0.25f * 2.0f + 0.75f * 10.0f, 1e-5);
  attend_head(q, kv, 0, table, 1, 1.0f, &out, scores, 1, &mass);  // the first token sees only itself
  EXPECT_EQ(mass, 1.0f);
}

TEST(Attention, KvStoreWritesTheSlotOfEveryHead) {
  const int64_t n_kv = 2, bs = 4, hd = 3, n_blocks = 3;
  std::vector<float> kbuf(n_blocks * n_kv * bs * hd, 0), vbuf(kbuf.size(), 0);
  PagedKv kv{kbuf.data(), vbuf.data(), n_blocks, n_kv, bs, hd};
  const float k[] = {1, 2, 3, 4, 5, 6}, v[] = {-1, -2, -3, -4, -5, -6};
  kv_store(kv, 2 * bs + 1, k, v);  // block 2, offset 1
  EXPECT_EQ(kv.k_at(2, 0)[hd + 0], 1);
  EXPECT_EQ(kv.k_at(2, 1)[hd + 2], 6);
  EXPECT_EQ(kv.v_at(2, 1)[hd + 0], -4);
}

}  // namespace
}  // namespace gb::ops

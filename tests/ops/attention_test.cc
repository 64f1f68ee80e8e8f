// Paged attention and KV stores against plain scalar double-precision references, on odd sizes.
#include <gtest/gtest.h>

#include <cmath>
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

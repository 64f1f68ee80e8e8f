// Batch invariance and cache consistency: a sequence's logits do not depend on what else is in the
// batch, on how its prompt is chunked, or on whether it was decoded incrementally with the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "observers.h"
#include "reference_util.h"
#include "sequence_feed.h"

namespace gb {
namespace {

using test::max_abs_diff;

std::unique_ptr<Model> load(const std::string& rel, int threads = 1, int max_tokens = 128) {
  auto m = load_model(test::shared_path(rel), {.max_batch_tokens = max_tokens, .n_threads = threads});
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(*m) : nullptr;
}

std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

// Logits of every token of `ids` fed in one forward.
std::vector<float> full_logits(Model& m, const std::vector<int32_t>& ids) {
  auto cache = KvCache::create(m.config(), 32, 16);
  test::SequenceFeed s(m, **cache);
  EXPECT_TRUE(s.feed(ids, nullptr, true).is_ok());
  return std::vector<float>(s.logits().begin(), s.logits().end());
}

class Invariance : public ::testing::TestWithParam<const char*> {};

TEST_P(Invariance, AloneEqualsInsideMixedBatch) {
  // 2 threads: the attention and norm loops take their parallel paths on this batch size.
  auto m = load(GetParam(), 2);
  ASSERT_NE(m, nullptr);
  const int64_t vocab = m->config().vocab;
  const auto a = random_ids(21, vocab, 1), b = random_ids(5, vocab, 2), c = random_ids(40, vocab, 3);
  const auto want_a = full_logits(*m, a);

  // Batch: B's full prompt, then A's first 13 tokens, then C's prompt; next step A's remaining 8
  // tokens beside one decode token of B and one of C — prefill chunks and decode mixed.
  auto cache = KvCache::create(m->config(), 32, 16);
  ASSERT_TRUE(cache.is_ok());
  int32_t next_block = 0;
  // Interleaved, non-contiguous block ids for every sequence.
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 3; ++i) {
    tc.push_back(next_block++);
    ta.push_back(next_block++);
    tb.push_back(next_block++);
  }
  Batch batch;
  batch.add_sequence(b, 0, tb, 16, true);
  batch.add_sequence(std::span(a).first(13), 0, ta, 16, true);
  batch.add_sequence(c, 0, tc, 16, false);
  std::vector<float> logits(batch.n_out() * vocab);
  ASSERT_TRUE(m->forward(batch, **cache, nullptr, logits.data()).is_ok());
  const double e1 = max_abs_diff(logits.data() + 5 * vocab, want_a.data(), 13 * vocab);

  batch.clear();
  const int32_t nb[] = {7}, nc[] = {9};
  batch.add_sequence(nb, 5, tb, 16, true);
  batch.add_sequence(std::span(a).subspan(13), 13, ta, 16, true);
  batch.add_sequence(nc, 40, tc, 16, true);
  logits.assign(batch.n_out() * vocab, 0.0f);
  ASSERT_TRUE(m->forward(batch, **cache, nullptr, logits.data()).is_ok());
  const double e2 = max_abs_diff(logits.data() + 1 * vocab, want_a.data() + 13 * vocab, 8 * vocab);
  EXPECT_LE(e1, 1e-5);
  EXPECT_LE(e2, 1e-5);
  std::printf("%s: alone vs mixed batch max |diff| %.2g / %.2g\n", GetParam(), e1, e2);
}

// Bitwise: a mixed step (a prefill chunk starting mid-block beside other prompts and decode tokens)
// gives the same logits at 1, 2 and 3 threads, and A's rows equal A fed alone in one forward —
// for f32 and bf16 KV (the tiled attention's rows do not depend on their tile, chunk or thread).
TEST_P(Invariance, ThreadsAndBatchBitwiseForEveryKvDtype) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      auto m = load(GetParam(), threads);
      ASSERT_NE(m, nullptr);
      const int64_t vocab = m->config().vocab;
      const auto a = random_ids(37, vocab, 4), b = random_ids(6, vocab, 5), c = random_ids(50, vocab, 6);
      auto cache = KvCache::create(m->config(), 32, 16, 8, dtype);
      ASSERT_TRUE(cache.is_ok());
      const std::vector<int32_t> ta = {5, 1, 9}, tb = {2}, tc = {7, 0, 3, 8}, tn = {4, 6, 10};
      Batch batch;
      batch.add_sequence(std::span(a).first(21), 0, ta, 16, false);
      batch.add_sequence(b, 0, tb, 16, false);
      batch.add_sequence(c, 0, tc, 16, false);
      std::vector<float> logits(batch.n_out() * vocab);
      ASSERT_TRUE(m->forward(batch, **cache, nullptr, logits.data()).is_ok());
      batch.clear();
      const int32_t nb[] = {3}, nc[] = {11};
      batch.add_sequence(nb, 6, tb, 16, true);
      batch.add_sequence(std::span(a).subspan(21), 21, ta, 16, true);  // starts mid-block
      batch.add_sequence(nc, 50, tc, 16, true);
      logits.assign(batch.n_out() * vocab, 0.0f);
      ASSERT_TRUE(m->forward(batch, **cache, nullptr, logits.data()).is_ok());
      if (first.empty()) {
        first = logits;
      } else {
        EXPECT_EQ(logits, first) << dtype_name(dtype) << " " << threads << " threads";
      }
      // A alone: its 37 tokens in one forward; rows 21..36 must equal the mixed step's.
      auto alone_cache = KvCache::create(m->config(), 32, 16, 8, dtype);
      Batch alone;
      alone.add_sequence(a, 0, tn, 16, true);
      std::vector<float> la(alone.n_out() * vocab);
      ASSERT_TRUE(m->forward(alone, **alone_cache, nullptr, la.data()).is_ok());
      EXPECT_TRUE(std::equal(la.begin() + 21 * vocab, la.end(), logits.begin() + 1 * vocab))
          << dtype_name(dtype) << " " << threads << " threads: A alone vs in the mixed batch";
    }
  }
}

TEST_P(Invariance, IncrementalDecodeEqualsFullRecomputation) {
  auto m = load(GetParam());
  ASSERT_NE(m, nullptr);
  const int64_t vocab = m->config().vocab;
  const auto ids = random_ids(37, vocab, 4);
  const auto want = full_logits(*m, ids);
  auto cache = KvCache::create(m->config(), 8, 16);
  test::SequenceFeed s(*m, **cache);
  ASSERT_TRUE(s.feed(std::span(ids).first(3)).is_ok());
  double err = max_abs_diff(s.last_logits().data(), want.data() + 2 * vocab, vocab);
  for (size_t i = 3; i < ids.size(); ++i) {
    ASSERT_TRUE(s.feed(std::span(ids).subspan(i, 1)).is_ok());
    err = std::max(err, max_abs_diff(s.last_logits().data(), want.data() + i * vocab, vocab));
  }
  EXPECT_LE(err, 1e-5);
}

TEST_P(Invariance, ChunkedPrefillEqualsOneForward) {
  auto m = load(GetParam());
  ASSERT_NE(m, nullptr);
  const int64_t vocab = m->config().vocab;
  const auto ids = random_ids(45, vocab, 5);
  const auto want = full_logits(*m, ids);
  auto cache = KvCache::create(m->config(), 8, 16);
  test::SequenceFeed s(*m, **cache);
  // Split inside a block (19 = 16 + 3) so the second chunk appends to a half-filled block.
  ASSERT_TRUE(s.feed(std::span(ids).first(19), nullptr, true).is_ok());
  const double e1 = max_abs_diff(s.logits().data(), want.data(), 19 * vocab);
  ASSERT_TRUE(s.feed(std::span(ids).subspan(19), nullptr, true).is_ok());
  const double e2 = max_abs_diff(s.logits().data(), want.data() + 19 * vocab, 26 * vocab);
  EXPECT_LE(e1, 1e-5);
  EXPECT_LE(e2, 1e-5);
  // A model whose batch is smaller than the prompt chunks it inside SequenceFeed::feed.
  auto small = load(GetParam(), 1, 8);
  auto cache2 = KvCache::create(small->config(), 8, 16);
  test::SequenceFeed s2(*small, **cache2);
  ASSERT_TRUE(s2.feed(ids, nullptr, true).is_ok());
  EXPECT_LE(max_abs_diff(s2.logits().data(), want.data(), want.size()), 1e-5);
}

// A decode-only step of more sequences than one attention chunk holds, so several items per KV
// head, each storing its own rows' k/v for its head before attending: every row bitwise what its
// sequence gives fed alone, at 1 and 2 threads, f32 and bf16 KV.
TEST_P(Invariance, DecodeOnlyStepOfManySequencesEqualsEachAlone) {
  constexpr int kSeqs = 40, kPrompt = 3;  // 40 rows: more than any GQA group's 32-row chunk
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int threads : {1, 2}) {
      auto m = load(GetParam(), threads);
      ASSERT_NE(m, nullptr);
      const int64_t vocab = m->config().vocab;
      auto cache = KvCache::create(m->config(), kSeqs, 16, 8, dtype);
      ASSERT_TRUE(cache.is_ok());
      std::vector<std::vector<int32_t>> ids(kSeqs), tables(kSeqs);
      Batch batch;
      for (int s = 0; s < kSeqs; ++s) {
        ids[s] = random_ids(kPrompt + 1, static_cast<int>(vocab), 100 + s);
        tables[s] = {(s * 7) % kSeqs};  // scattered blocks
        batch.add_sequence(std::span(ids[s]).first(kPrompt), 0, tables[s], 16, false);
      }
      std::vector<float> logits(batch.n_out() * vocab);
      ASSERT_TRUE(m->forward(batch, **cache, nullptr, logits.data()).is_ok());
      batch.clear();
      for (int s = 0; s < kSeqs; ++s)
        batch.add_sequence(std::span(ids[s]).subspan(kPrompt), kPrompt, tables[s], 16, true);
      logits.assign(batch.n_out() * vocab, 0.0f);
      ASSERT_TRUE(m->forward(batch, **cache, nullptr, logits.data()).is_ok());
      for (int s : {0, 1, 31, 32, 39}) {
        auto alone_cache = KvCache::create(m->config(), 1, 16, 8, dtype);
        ASSERT_TRUE(alone_cache.is_ok());
        const std::vector<int32_t> table = {0};
        Batch alone;
        alone.add_sequence(ids[s], 0, table, 16, true);
        std::vector<float> la(alone.n_out() * vocab);
        ASSERT_TRUE(m->forward(alone, **alone_cache, nullptr, la.data()).is_ok());
        EXPECT_TRUE(std::equal(la.end() - vocab, la.end(), logits.begin() + s * vocab))
            << dtype_name(dtype) << " " << threads << " threads, sequence " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Invariance,
                         ::testing::Values("models/stories260K", "testdata/reference/llama3-untied/hf",
                                           "testdata/reference/qwen2-bias/gguf/model-q8_0.gguf",
                                           "testdata/reference/qwen3-qknorm/hf"),
                         [](const auto& info) {
                           std::string n = info.param;
                           n = n.substr(n.find_first_of('/') + 1);
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(Batch, InvalidBatchesAreErrorsNotCrashes) {
  auto m = load("models/stories260K");
  ASSERT_NE(m, nullptr);
  auto cache = KvCache::create(m->config(), 4, 16);
  std::vector<int32_t> table = {0, 1};
  std::vector<float> logits(2 * m->config().vocab);
  const std::vector<int32_t> ids = {1, 2, 3};
  auto expect_error = [&](const Batch& b, const std::string& fragment) {
    Status st = m->forward(b, **cache, nullptr, logits.data());
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.message();
  };
  Batch b;
  expect_error(b, "no tokens");
  b.add_sequence(ids, 0, table, 16, false);
  b.tokens[1] = 512;
  expect_error(b, "outside the vocabulary");
  b.tokens[1] = 5;
  b.slots[2] = 40;
  expect_error(b, "slot 40");
  b.slots[2] = 2;
  b.positions[2] = 3;
  expect_error(b, "position 3");
  b.positions[2] = 2;
  const std::vector<int32_t> bad_table = {7};
  b.seqs[0].block_table = bad_table;
  expect_error(b, "block 7");
  b.seqs[0].block_table = table;
  b.output_rows = {2, 1};
  expect_error(b, "ascending");
  b.output_rows = {2};
  EXPECT_TRUE(m->forward(b, **cache, nullptr, logits.data()).is_ok());
  Batch big;
  std::vector<int32_t> many(200, 5), table13(13);
  for (int i = 0; i < 13; ++i) table13[i] = i % 4;
  big.add_sequence(many, 0, table13, 16, false);
  expect_error(big, "max_batch_tokens");
}

// Observers see exactly the (point, layer) pairs that were asked for.
class CountingObserver : public Observer {
 public:
  void observe(const HookTensor& t) override { seen.push_back(hook_key(t.point, t.layer)); }
  std::vector<std::string> seen;
};

TEST(Hooks, OnlyActivePointsAreCalledAndOffChangesNothing) {
  auto m = load("models/stories260K");
  const auto ids = random_ids(9, 512, 7);
  const auto plain = full_logits(*m, ids);
  Hooks hooks(m->config().n_layers);
  CountingObserver obs;
  hooks.watch(HookPoint::kMlpAct, 2, &obs);
  hooks.watch(HookPoint::kResidPost, 4, &obs);
  hooks.watch(HookPoint::kLogits, -1, &obs);
  EXPECT_EQ(hooks.layer_mask(0), 0u);
  EXPECT_EQ(hooks.layer_mask(2), hook_bit(HookPoint::kMlpAct));
  auto cache = KvCache::create(m->config(), 4, 16);
  test::SequenceFeed s(*m, **cache);
  ASSERT_TRUE(s.feed(ids, &hooks, true).is_ok());
  EXPECT_EQ(obs.seen, (std::vector<std::string>{"layers.2.mlp_act", "layers.4.resid_post", "logits"}));
  EXPECT_EQ(std::vector<float>(s.logits().begin(), s.logits().end()), plain);  // observing changes nothing
  EXPECT_EQ(parse_hook_point("resid_mid"), HookPoint::kResidMid);
  EXPECT_FALSE(parse_hook_point("resid_middle").has_value());
}

}  // namespace
}  // namespace gb

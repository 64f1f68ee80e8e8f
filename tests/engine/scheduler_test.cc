// Block manager (ref counts, prefix cache, eviction) and the token-budget scheduler (chunked
// prefill, decode-first, max_num_seqs, preemption by recompute, prefix hits).
#include <gtest/gtest.h>

#include <list>
#include <numeric>
#include <random>
#include <unordered_map>

#include "engine/scheduler.h"

namespace gb {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 100) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(BlockManager, GrowIsAllOrNothingAndReleaseFrees) {
  BlockManager bm(4, 16);
  std::vector<int32_t> a, b;
  EXPECT_TRUE(bm.grow(&a, 33));  // 3 blocks
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(bm.n_free(), 1);
  EXPECT_FALSE(bm.grow(&b, 20));  // needs 2, 1 free: nothing taken
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.n_free(), 1);
  bm.release(&a);
  EXPECT_EQ(bm.n_free(), 4);
  EXPECT_TRUE(bm.grow(&b, 20));
}

TEST(BlockManager, HandsOutEachStateSlotOnce) {
  BlockManager bm(4, 16, 3);
  EXPECT_EQ(bm.n_state_slots(), 3);
  const int32_t a = bm.acquire_state_slot(), b = bm.acquire_state_slot(), c = bm.acquire_state_slot();
  EXPECT_EQ(std::vector<int32_t>({a, b, c}), std::vector<int32_t>({0, 1, 2}));  // lowest ids first
  EXPECT_EQ(bm.n_state_slots_used(), 3);
  EXPECT_EQ(bm.acquire_state_slot(), -1);  // none left
  bm.release_state_slot(b);
  EXPECT_EQ(bm.n_state_slots_used(), 2);
  EXPECT_EQ(bm.acquire_state_slot(), b);
  EXPECT_EQ(BlockManager(4, 16).acquire_state_slot(), -1);  // a model without recurrent state has none
}

TEST(BlockManager, PrefixCacheSharesPublishedBlocksPerSalt) {
  BlockManager bm(8, 4);
  const auto toks = iota_tokens(10);
  std::vector<int32_t> a;
  ASSERT_TRUE(bm.grow(&a, 10));
  const uint64_t h0 = BlockManager::hash_block(0, std::span(toks).subspan(0, 4), 0);
  const uint64_t h1 = BlockManager::hash_block(h0, std::span(toks).subspan(4, 4), 0);
  bm.publish(a[0], h0);
  bm.publish(a[1], h1);

  std::vector<int32_t> b;
  std::vector<uint64_t> hashes;
  EXPECT_EQ(bm.acquire_prefix(toks, 0, 10, &b, &hashes), 2);
  EXPECT_EQ(b, (std::vector<int32_t>{a[0], a[1]}));
  EXPECT_EQ(bm.ref_count(a[0]), 2);
  // Another salt (e.g. an intervention) never sees these blocks.
  std::vector<int32_t> c;
  EXPECT_EQ(bm.acquire_prefix(toks, 42, 10, &c, &hashes), 0);
  // A different first token changes every chained hash.
  auto other = toks;
  other[0] = 7;
  EXPECT_EQ(bm.acquire_prefix(other, 0, 10, &c, &hashes), 0);

  // After everyone lets go, the blocks stay cached until their space is needed.
  bm.release(&a);
  bm.release(&b);
  EXPECT_EQ(bm.n_free(), 8);
  std::vector<int32_t> d;
  hashes.clear();
  EXPECT_EQ(bm.acquire_prefix(toks, 0, 10, &d, &hashes), 2);
  bm.release(&d);
  std::vector<int32_t> all;
  ASSERT_TRUE(bm.grow(&all, 32));  // takes every block: the cached ones are evicted
  bm.release(&all);
  EXPECT_EQ(bm.acquire_prefix(toks, 0, 10, &d, &hashes), 0);
}

// Drives the scheduler like the engine does, appending token 1 whenever a sequence samples.
struct Driver {
  BlockManager blocks;
  Scheduler sched;
  Driver(int32_t n_blocks, SchedulerConfig cfg)
      : blocks(n_blocks, 4, cfg.recurrent_state ? cfg.max_num_seqs : 0), sched(cfg, &blocks) {}

  Sequence* add(int n_prompt, int max_tokens, int start = 100) {
    auto s = std::make_unique<Sequence>();
    s->tokens = iota_tokens(n_prompt, start);
    s->n_prompt = n_prompt;
    s->request.max_tokens = max_tokens;
    Sequence* p = s.get();
    sched.add(std::move(s));
    return p;
  }

  // One step; returns (seq, n_tokens) pairs scheduled.
  std::vector<std::pair<Sequence*, int>> step() {
    std::vector<std::pair<Sequence*, int>> out;
    std::vector<Sequence*> done;
    for (const auto& s : sched.schedule()) out.emplace_back(s.seq, s.n_tokens);
    std::vector<ScheduledSeq> copy(sched.schedule().begin(), sched.schedule().end());
    sched.commit();
    for (const auto& s : copy) {
      if (!s.samples) continue;
      s.seq->tokens.push_back(1);
      if (s.seq->n_generated() >= s.seq->request.max_tokens) done.push_back(s.seq);
    }
    for (Sequence* s : done) sched.finish(s);
    return out;
  }
};

TEST(Scheduler, ChunksLongPromptsWithinTheTokenBudget) {
  Driver d(64, {8, 16});
  Sequence* s = d.add(40, 2);
  auto st = d.step();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].second, 16);
  EXPECT_EQ(d.step()[0].second, 16);
  EXPECT_EQ(d.step()[0].second, 8);  // prompt done: samples token 1
  EXPECT_EQ(s->n_generated(), 1);
  EXPECT_EQ(d.step()[0].second, 1);  // decode
  EXPECT_TRUE(d.sched.idle());
}

TEST(Scheduler, DecodesFirstThenAdmitsUpToMaxNumSeqs) {
  Driver d(64, {2, 16});
  Sequence* a = d.add(4, 5);
  d.step();  // a prefilled
  Sequence* b = d.add(30, 5);
  Sequence* c = d.add(4, 5);
  auto st = d.step();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, a);
  EXPECT_EQ(st[0].second, 1);  // a's decode token comes first
  EXPECT_EQ(st[1].first, b);
  EXPECT_EQ(st[1].second, 15);              // b gets the rest of the budget
  EXPECT_EQ(d.sched.running().size(), 2u);  // c waits: max_num_seqs = 2
  EXPECT_EQ(d.sched.waiting().front().get(), c);
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndRecomputes) {
  // 5 blocks of 4 slots; two sequences of 8 prompt tokens take 2 blocks each, then need a 3rd.
  Driver d(5, {4, 64});
  Sequence* a = d.add(8, 8, 100);
  Sequence* b = d.add(8, 8, 200);
  d.step();  // both prefilled: 4 blocks used (plus the 9th token's slot comes next step)
  EXPECT_EQ(d.blocks.n_free(), 1);
  d.step();  // a grows into the free block; b cannot grow and is preempted
  EXPECT_EQ(d.sched.preemptions(), 1);
  ASSERT_EQ(d.sched.running().size(), 1u);
  EXPECT_EQ(d.sched.running()[0].get(), a);
  EXPECT_EQ(d.sched.waiting().front().get(), b);
  EXPECT_EQ(b->n_computed, 0);
  // Run to completion: b is recomputed (prompt + its generated token) once a finishes.
  for (int i = 0; i < 40 && !d.sched.idle(); ++i) d.step();
  EXPECT_TRUE(d.sched.idle());
  EXPECT_EQ(d.blocks.n_free(), 5);
}

TEST(Scheduler, RepeatedPromptHitsThePrefixCache) {
  Driver d(64, {4, 64});
  Sequence* a = d.add(18, 1);
  d.step();
  EXPECT_EQ(a->n_cached_prompt, 0);
  Sequence* b = d.add(18, 1);
  auto st = d.step();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(b->n_cached_prompt, 16);  // 4 full blocks of 4
  EXPECT_EQ(st[0].second, 2);         // only the tail is computed
  EXPECT_EQ(d.sched.prefix_hits(), 16);
  EXPECT_EQ(d.sched.prefix_queries(), 36);

  // A block-aligned prompt still computes its last token (its logits are needed).
  Sequence* c = d.add(16, 1);
  d.add(16, 1, 100);
  d.step();
  (void)c;
  Sequence* e = d.add(16, 1);
  st = d.step();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(e->n_cached_prompt, 12);
  EXPECT_EQ(st[0].second, 4);
}

TEST(Scheduler, RecurrentStateSlotsComeFromTheBlockManager) {
  Driver d(64, {.max_num_seqs = 2, .max_num_batched_tokens = 64, .recurrent_state = true});
  Sequence* a = d.add(5, 2);
  Sequence* b = d.add(5, 4);
  Sequence* c = d.add(5, 3);
  d.step();  // a and b admitted (max_num_seqs 2), each holding a slot
  EXPECT_EQ(d.blocks.n_state_slots_used(), 2);
  EXPECT_NE(a->state_slot, b->state_slot);
  EXPECT_EQ(c->state_slot, -1);
  d.step();  // a finishes and returns its slot
  EXPECT_EQ(d.blocks.n_state_slots_used(), 1);
  d.step();  // c takes the free slot
  EXPECT_GE(c->state_slot, 0);
  EXPECT_NE(c->state_slot, b->state_slot);
  EXPECT_EQ(d.sched.state_slots_used(), 2);
  while (!d.sched.idle()) d.step();
  EXPECT_EQ(d.blocks.n_state_slots_used(), 0);
}

// The block manager as it was written before its free list and prefix cache became allocation-free
// (std::list + std::unordered_map): the same operations give the same blocks, hits and counts.
class ReferenceBlocks {
 public:
  ReferenceBlocks(int32_t n, int32_t bs) : bs_(bs), ref_(n, 0), hash_(n, 0), pos_(n) {
    for (int32_t b = 0; b < n; ++b) pos_[b] = free_.insert(free_.end(), b);
  }
  int32_t acquire_prefix(std::span<const int32_t> tokens, uint64_t salt, int32_t max_blocks, std::vector<int32_t>* t) {
    int32_t hits = 0;
    uint64_t parent = 0;
    for (int64_t b = 0; b < static_cast<int64_t>(tokens.size()) / bs_ && hits < max_blocks; ++b) {
      const uint64_t h = BlockManager::hash_block(parent, tokens.subspan(b * bs_, bs_), salt);
      auto it = cached_.find(h);
      if (it == cached_.end()) break;
      if (ref_[it->second]++ == 0) free_.erase(pos_[it->second]);
      t->push_back(it->second);
      parent = h;
      ++hits;
    }
    return hits;
  }
  bool grow(std::vector<int32_t>* t, int64_t n) {
    const int64_t want = (n + bs_ - 1) / bs_;
    const int64_t need = want > static_cast<int64_t>(t->size()) ? want - static_cast<int64_t>(t->size()) : 0;
    if (need > static_cast<int64_t>(free_.size())) return false;
    for (int64_t i = 0; i < need; ++i) {
      const int32_t b = free_.front();
      free_.pop_front();
      if (hash_[b] != 0) {
        auto it = cached_.find(hash_[b]);
        if (it != cached_.end() && it->second == b) cached_.erase(it);
        hash_[b] = 0;
      }
      ref_[b] = 1;
      t->push_back(b);
    }
    return true;
  }
  void publish(int32_t b, uint64_t h) {
    if (hash_[b] != 0 || cached_.count(h) != 0) return;
    hash_[b] = h;
    cached_.emplace(h, b);
  }
  void release(std::vector<int32_t>* t) {
    for (auto it = t->rbegin(); it != t->rend(); ++it) {
      if (--ref_[*it] == 0)
        pos_[*it] = hash_[*it] == 0 ? free_.insert(free_.begin(), *it) : free_.insert(free_.end(), *it);
    }
    t->clear();
  }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  size_t n_cached() const { return cached_.size(); }

 private:
  int32_t bs_;
  std::vector<int32_t> ref_;
  std::vector<uint64_t> hash_;
  std::vector<std::list<int32_t>::iterator> pos_;
  std::list<int32_t> free_;
  std::unordered_map<uint64_t, int32_t> cached_;
};

TEST(BlockManager, SameBlocksHitsAndEvictionsAsTheListAndMapVersion) {
  // 24 blocks of 2 tokens; prompts over a 3-token alphabet so prefixes repeat, collide in the
  // open-addressing table and are evicted and republished all the time.
  BlockManager bm(24, 2);
  ReferenceBlocks ref(24, 2);
  std::mt19937 rng(11);
  struct Live {
    std::vector<int32_t> tokens, table, ref_table;
    uint64_t salt;
  };
  std::vector<Live> live;
  int64_t hits = 0;
  for (int round = 0; round < 20000; ++round) {
    if (live.size() < 5 && rng() % 2 == 0) {
      Live l;
      for (int i = 0, n = 1 + static_cast<int>(rng() % 12); i < n; ++i)
        l.tokens.push_back(static_cast<int32_t>(rng() % 3));
      l.salt = rng() % 3;
      std::vector<uint64_t> hashes;
      const int32_t a = bm.acquire_prefix(l.tokens, l.salt, 8, &l.table, &hashes);
      ASSERT_EQ(a, ref.acquire_prefix(l.tokens, l.salt, 8, &l.ref_table));
      hits += a;
      const bool g = bm.grow(&l.table, static_cast<int64_t>(l.tokens.size()));
      ASSERT_EQ(g, ref.grow(&l.ref_table, static_cast<int64_t>(l.tokens.size())));
      ASSERT_EQ(l.table, l.ref_table);
      if (!g) {
        bm.release(&l.table);
        ref.release(&l.ref_table);
        continue;
      }
      uint64_t parent = 0;
      for (size_t b = 0; b < l.tokens.size() / 2; ++b) {
        const uint64_t h = BlockManager::hash_block(parent, std::span(l.tokens).subspan(b * 2, 2), l.salt);
        bm.publish(l.table[b], h);
        ref.publish(l.ref_table[b], h);
        parent = h;
      }
      live.push_back(std::move(l));
    } else if (!live.empty()) {
      const size_t k = rng() % live.size();
      bm.release(&live[k].table);
      ref.release(&live[k].ref_table);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_EQ(bm.n_free(), ref.n_free());
    ASSERT_EQ(bm.n_cached(), ref.n_cached());
  }
  EXPECT_GT(hits, 1000);  // the prefix cache was exercised
}

}  // namespace
}  // namespace gb

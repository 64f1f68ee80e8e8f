// BPE merging: a quadratic scan for short words (cheapest in practice), a heap over a linked
// list for long ones (SentencePiece-style vocabularies see whole sentences as one word).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "tokenizer/unicode.h"

namespace gb::tok {

void StringTable::rehash(size_t cap) {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{0, 0, 0, 0});
  mask_ = cap - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].hash != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void StringTable::reserve(size_t n) {
  size_t cap = 64;
  while (cap < n * 2) cap <<= 1;
  if (cap > slots_.size()) rehash(cap);
}

void StringTable::insert(std::string_view key, int32_t id) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 64 : slots_.size() * 2);
  const uint64_t h = hash_bytes(key);
  size_t i = h & mask_;
  for (;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.hash == 0) break;
    if (s.hash == h && s.len == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) return;
  }
  slots_[i] = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
  arena_.append(key);
  ++size_;
}

void PairMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{kEmpty, {0, 0}});
  mask_ = cap - 1;
  shift_ = 64 - __builtin_ctzll(cap);
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.value);
  }
}

void PairMap::insert(int32_t a, int32_t b, Value v) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(size_ + 1 > 8 ? (size_ + 1) * 2 : 16);
  const uint64_t key = pack(a, b);
  size_t i = hash(key);
  for (;;) {
    Slot& s = slots_[i];
    if (s.key == key) return;
    if (s.key == kEmpty) {
      s.key = key;
      s.value = v;
      ++size_;
      return;
    }
    i = (i + 1) & mask_;
  }
}

namespace {

// The word cache is per thread, so encode stays lock-free, and direct-mapped with the key
// and ids stored inline in one 64-byte slot: a hit costs one hash and one cache line, a
// miss just overwrites the slot. Each cache belongs to one BpeModel; a thread keeps a few.
// Words longer than kMaxCachedWord bytes or with more than kMaxCachedIds ids are not cached
// (rare, and their merging is cheap relative to their length).
constexpr size_t kMaxCachedWord = 22;
constexpr size_t kMaxCachedIds = 8;
constexpr size_t kCacheSlots = 1 << 14;  // 1 MiB per cache

struct CacheSlot {
  uint64_t hash;
  uint8_t key_len;
  uint8_t n_ids;
  char key[kMaxCachedWord];
  int32_t ids[kMaxCachedIds];
};
static_assert(sizeof(CacheSlot) == 64);

struct WordCache {
  uint64_t owner = 0;
  uint64_t last_use = 0;
  std::vector<CacheSlot> slots;
};

// A few caches per thread so a thread serving several models does not wipe one per call.
WordCache& word_cache(uint64_t owner) {
  thread_local std::array<WordCache, 2> caches;
  thread_local uint64_t clock = 0;
  ++clock;
  WordCache* victim = &caches[0];
  for (WordCache& c : caches) {
    if (c.owner == owner) {
      c.last_use = clock;
      return c;
    }
    if (c.last_use < victim->last_use) victim = &c;
  }
  victim->slots.assign(kCacheSlots, CacheSlot{});
  victim->owner = owner;
  victim->last_use = clock;
  return *victim;
}

}  // namespace

void BpeModel::merge_symbols(std::vector<int32_t>* ids_ptr) const {
  std::vector<int32_t>& ids = *ids_ptr;
  const size_t n = ids.size();
  if (n < 2) return;
  if (n <= 32) {
    // rank[i] / merged[i]: the merge of symbols i and i+1, recomputed only next to a merge,
    // so a word of n symbols costs n + 2 * merges lookups and a scan of small ints per merge.
    thread_local std::vector<int32_t> rank, merged;
    rank.resize(n);
    merged.resize(n);
    auto lookup = [&](size_t i) {
      const PairMap::Value* v = merges.find(ids[i], ids[i + 1]);
      rank[i] = v != nullptr ? v->rank : INT32_MAX;
      merged[i] = v != nullptr ? v->id : -1;
    };
    size_t len = n;
    for (size_t i = 0; i + 1 < len; ++i) lookup(i);
    while (len > 1) {
      size_t best = 0;
      int32_t best_rank = rank[0];
      for (size_t i = 1; i + 1 < len; ++i) {
        if (rank[i] < best_rank) {
          best_rank = rank[i];
          best = i;
        }
      }
      if (best_rank == INT32_MAX) break;
      ids[best] = merged[best];
      for (size_t i = best + 1; i + 1 < len; ++i) {
        ids[i] = ids[i + 1];
        rank[i] = rank[i + 1];
        merged[i] = merged[i + 1];
      }
      --len;
      if (best + 1 < len) lookup(best);
      if (best > 0) lookup(best - 1);
    }
    ids.resize(len);
    return;
  }
  // Heap of candidate merges ordered by (rank, position); stale entries are skipped on pop.
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t left, right;  // the ids the merge was computed for
    int32_t id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    const PairMap::Value* v = merges.find(ids[i], ids[next[i]]);
    if (v != nullptr) heap.push({v->rank, i, ids[i], ids[next[i]], v->id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  std::vector<uint8_t> dead(n, 0);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t i = c.pos;
    if (dead[i] || next[i] < 0 || ids[i] != c.left || ids[next[i]] != c.right) continue;
    const int32_t j = next[i];
    ids[i] = c.id;
    dead[j] = 1;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) ids[w++] = ids[i];
  ids.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const int32_t id = vocab.find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWord;
  CacheSlot* slot = nullptr;
  uint64_t h = 0;
  if (cacheable) {
    h = hash_bytes(word);
    slot = &word_cache(instance_id).slots[h & (kCacheSlots - 1)];
    if (slot->hash == h && slot->key_len == word.size() && std::memcmp(slot->key, word.data(), word.size()) == 0) {
      out->insert(out->end(), slot->ids, slot->ids + slot->n_ids);
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  if (byte_level) {
    for (unsigned char c : word) {
      if (byte_ids[c] >= 0) ids.push_back(byte_ids[c]);
    }
  } else {
    bool last_unk = false;
    size_t i = 0;
    while (i < word.size()) {
      const size_t len = std::min<size_t>(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
      const std::string_view ch = word.substr(i, len);
      i += len;
      const int32_t id = vocab.find(ch);
      if (id >= 0) {
        ids.push_back(id);
        last_unk = false;
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (unsigned char c : ch) all = all && byte_ids[c] >= 0;
        if (all) {
          for (unsigned char c : ch) ids.push_back(byte_ids[c]);
          last_unk = false;
          continue;
        }
      }
      if (unk_id >= 0) {
        if (!(fuse_unk && last_unk)) ids.push_back(unk_id);
        last_unk = true;
      }
    }
  }
  merge_symbols(&ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (slot != nullptr && ids.size() <= kMaxCachedIds) {
    slot->hash = h;
    slot->key_len = static_cast<uint8_t>(word.size());
    std::memcpy(slot->key, word.data(), word.size());
    slot->n_ids = static_cast<uint8_t>(ids.size());
    std::copy(ids.begin(), ids.end(), slot->ids);
  }
}

}  // namespace gb::tok

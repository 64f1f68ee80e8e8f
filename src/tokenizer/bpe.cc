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
    if (s.hash == h && s.len == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
      return;
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

WordCache::WordCache() : slots_(new Slot[kSlots]) {
  for (size_t i = 0; i < kSlots; ++i) {
    for (auto& w : slots_[i].w) w.store(0, std::memory_order_relaxed);
  }
}

bool WordCache::find(uint64_t h, std::string_view word, std::vector<int32_t>* out) const {
  const Slot& s = slots_[h & (kSlots - 1)];
  const uint64_t head = s.w[0].load(std::memory_order_acquire);
  if ((head >> 16) & 1 || ((head >> 8) & 0xff) != word.size()) return false;
  uint64_t body[7];
  for (size_t i = 0; i < 7; ++i) body[i] = s.w[i + 1].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.w[0].load(std::memory_order_relaxed) != head) return false;  // overwritten meanwhile
  char bytes[56];
  std::memcpy(bytes, body, sizeof bytes);
  if (std::memcmp(bytes, word.data(), word.size()) != 0) return false;
  const size_t n = head & 0xff;
  int32_t ids[kMaxIds];
  std::memcpy(ids, bytes + kMaxWord + 2, n * sizeof(int32_t));
  out->insert(out->end(), ids, ids + n);
  return true;
}

void WordCache::store(uint64_t h, std::string_view word, const std::vector<int32_t>& ids) {
  Slot& s = slots_[h & (kSlots - 1)];
  uint64_t head = s.w[0].load(std::memory_order_relaxed);
  if ((head >> 16) & 1) return;  // another writer is here
  const uint64_t seq = head >> 16;
  if (!s.w[0].compare_exchange_strong(head, (seq + 1) << 16, std::memory_order_acquire)) return;
  std::atomic_thread_fence(std::memory_order_release);
  char bytes[56] = {};
  std::memcpy(bytes, word.data(), word.size());
  std::memcpy(bytes + kMaxWord + 2, ids.data(), ids.size() * sizeof(int32_t));
  uint64_t body[7];
  std::memcpy(body, bytes, sizeof body);
  for (size_t i = 0; i < 7; ++i) s.w[i + 1].store(body[i], std::memory_order_relaxed);
  s.w[0].store(((seq + 2) << 16) | (word.size() << 8) | ids.size(), std::memory_order_release);
}

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
  // Longer words, or words with more ids, are not cached (rare, and their merging is cheap
  // relative to their length).
  const bool cacheable = cache != nullptr && word.size() <= WordCache::kMaxWord;
  const uint64_t h = cacheable ? hash_bytes(word) : 0;
  if (cacheable && cache->find(h, word, out)) return;
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
  if (cacheable && ids.size() <= WordCache::kMaxIds) cache->store(h, word, ids);
}

}  // namespace gb::tok

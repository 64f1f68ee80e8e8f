// BPE merging: a quadratic scan for short words (cheapest in practice), a heap over a linked
// list for long ones (SentencePiece-style vocabularies see whole sentences as one word).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "tokenizer/unicode.h"

namespace gb::tok {

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

constexpr size_t kMaxCachedWord = 64;
constexpr size_t kMaxCacheEntries = 1 << 16;

// The word cache is per thread, so encode stays lock-free; it belongs to one BpeModel at a
// time and is dropped when the thread switches models.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};
WordCache& word_cache() {
  thread_local WordCache cache;
  return cache;
}

}  // namespace

void BpeModel::merge_symbols(std::vector<int32_t>* ids_ptr) const {
  std::vector<int32_t>& ids = *ids_ptr;
  const size_t n = ids.size();
  if (n < 2) return;
  if (n <= 48) {
    size_t len = n;
    for (;;) {
      int32_t best_rank = INT32_MAX;
      size_t best = 0;
      int32_t best_id = -1;
      for (size_t i = 0; i + 1 < len; ++i) {
        const PairMap::Value* v = merges.find(ids[i], ids[i + 1]);
        if (v != nullptr && v->rank < best_rank) {
          best_rank = v->rank;
          best = i;
          best_id = v->id;
        }
      }
      if (best_id < 0) break;
      ids[best] = best_id;
      std::copy(ids.begin() + best + 2, ids.begin() + len, ids.begin() + best + 1);
      --len;
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
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWord;
  WordCache& cache = word_cache();
  if (cacheable) {
    if (cache.owner != instance_id) {
      cache.map.clear();
      cache.owner = instance_id;
    }
    auto it = cache.map.find(word);
    if (it != cache.map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
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
      auto it = vocab.find(ch);
      if (it != vocab.end()) {
        ids.push_back(it->second);
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
  if (cacheable) {
    if (cache.map.size() >= kMaxCacheEntries) cache.map.clear();
    cache.map.emplace(std::string(word), ids);
  }
}

}  // namespace gb::tok

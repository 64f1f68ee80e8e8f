// The BPE model: merge ranks keyed by token-id pairs, applied per pre-tokenized word.
// Serves byte-level vocabularies (symbols start as raw bytes) and SentencePiece-style ones
// (symbols start as characters, unknown characters fall back to <0xNN> byte tokens or unk).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gb::tok {

// Transparent hashing so string_view lookups do not build a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

inline uint64_t hash_bytes(std::string_view w) {
  const char* p = w.data();
  size_t n = w.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t x;
    __builtin_memcpy(&x, p, 8);
    h = (h ^ x) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  uint64_t x = 0;
  __builtin_memcpy(&x, p, n);
  h = (h ^ x) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  return h | 1;  // never 0, which marks an empty slot
}

// Open-addressing string -> id table with the keys in one arena: a lookup touches one slot
// and one key, where std::unordered_map chases two pointers (the vocabulary lookup of
// ignore_merges and SentencePiece characters is on the hot path).
class StringTable {
 public:
  // Keeps the first id when a key is inserted twice.
  void insert(std::string_view key, int32_t id);
  void reserve(size_t n);
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return -1;
      if (s.hash == h && s.len == key.size() &&
          __builtin_memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
        return s.id;
      }
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t offset, len;
    int32_t id;
  };
  void rehash(size_t cap);
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Open-addressing map (a, b) -> {rank, merged id}; the hottest lookup in encoding.
class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  // Keeps the first (lowest-rank) entry when a pair is inserted twice.
  void insert(int32_t a, int32_t b, Value v);
  const Value* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(a, b);
    size_t i = hash(key);
    for (;;) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key;
    Value value;
  };
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t hash(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// Words (at most kMaxWord bytes and kMaxIds ids) -> ids, direct-mapped: a hit costs one hash
// and one cache line, a miss overwrites the slot. One per BpeModel, shared by every thread that
// encodes with it (1 MiB, allocated once: a server's many HTTP threads must not each grow their
// own), and lock-free: each 64-byte slot is a seqlock of eight atomic words. A reader that
// races a writer sees a miss; a writer that races a writer skips its store.
class WordCache {
 public:
  static constexpr size_t kMaxWord = 22;
  static constexpr size_t kMaxIds = 8;

  WordCache();
  // Appends the cached ids of `word` (hash h) to out; false on a miss.
  bool find(uint64_t h, std::string_view word, std::vector<int32_t>* out) const;
  void store(uint64_t h, std::string_view word, const std::vector<int32_t>& ids);

 private:
  static constexpr size_t kSlots = 1 << 14;
  // word 0: sequence << 16 | key length << 8 | id count (an odd sequence: a write in progress);
  // words 1..7: the key's 22 bytes, then up to 8 ids.
  struct alignas(64) Slot {
    std::atomic<uint64_t> w[8];
  };
  std::unique_ptr<Slot[]> slots_;
};

class BpeModel {
 public:
  bool byte_level = false;     // symbols start as raw bytes; vocab keys are raw bytes
  bool byte_fallback = false;  // unknown characters become <0xNN> tokens
  bool fuse_unk = false;       // consecutive unknown characters give one unk
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one token
  int32_t unk_id = -1;
  StringTable vocab;                    // model vocabulary, keyed as the symbols are (raw bytes if byte_level)
  std::array<int32_t, 256> byte_ids{};  // byte -> id (byte_level) or <0xNN> id (fallback), -1 if none
  PairMap merges;
  std::shared_ptr<WordCache> cache;  // null: no caching

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

 private:
  void merge_symbols(std::vector<int32_t>* ids) const;
};

}  // namespace gb::tok

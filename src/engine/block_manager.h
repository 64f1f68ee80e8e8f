// Paged KV bookkeeping for the engine — the one allocator of the KvCache's storage: which physical
// blocks each sequence owns, reference counts, the prefix cache (full blocks keyed by a chained hash
// of their tokens and of a per-request salt, reused by later sequences and evicted
// least-recently-freed first), and for hybrid models the recurrent-state slots, one per running
// sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gb {

class BlockManager {
 public:
  // n_state_slots: recurrent-state slots of the cache (hybrid models; 0 otherwise).
  BlockManager(int32_t n_blocks, int32_t block_size, int32_t n_state_slots = 0);

  int32_t block_size() const { return block_size_; }
  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks no sequence holds (cached-but-unused blocks count as free: they can be evicted).
  int32_t n_free() const { return n_free_; }
  int32_t n_used() const { return n_blocks() - n_free(); }

  // Chained block hash: the key of a full block whose tokens are `tokens`, following the block
  // keyed `parent` (0 for the first block). `salt` separates requests whose KV differ for the
  // same tokens (e.g. under an intervention): blocks made under one salt never serve another.
  static uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt);

  // Looks up the longest cached prefix of `tokens` (full blocks only, at most max_blocks) and
  // takes a reference on each hit block, appending them to *table. Returns the number of blocks
  // hit; *hashes receives their chained hashes.
  int32_t acquire_prefix(std::span<const int32_t> tokens, uint64_t salt, int32_t max_blocks,
                         std::vector<int32_t>* table, std::vector<uint64_t>* hashes);

  // Appends new blocks to *table until it covers n_tokens slots. All-or-nothing: returns false
  // (and changes nothing) when not enough blocks are free.
  bool grow(std::vector<int32_t>* table, int64_t n_tokens);
  // Free blocks needed to grow table to n_tokens.
  int32_t blocks_needed(const std::vector<int32_t>& table, int64_t n_tokens) const;

  // Registers table[index], now full with `tokens`, in the prefix cache under `hash`.
  void publish(int32_t block, uint64_t hash);

  // Drops the sequence's reference on every block of table and clears it. Blocks reach the
  // free list in reverse order so a prefix's tail is evicted before its head.
  void release(std::vector<int32_t>* table);

  int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }
  size_t n_cached() const { return static_cast<size_t>(n_cached_); }

  // A free recurrent-state slot (the lowest ids first, then the most recently released), or -1
  // when every slot is held.
  int32_t acquire_state_slot();
  void release_state_slot(int32_t slot);
  int32_t n_state_slots() const { return n_state_slots_; }
  int32_t n_state_slots_used() const { return n_state_slots_ - static_cast<int32_t>(free_state_slots_.size()); }

 private:
  // Everything is sized at construction: taking, publishing and releasing blocks allocate nothing.
  struct Block {
    int32_t ref_count = 0;
    uint64_t hash = 0;             // 0: not in the prefix cache
    int32_t prev = -1, next = -1;  // free-list links, valid while ref_count == 0
  };
  int32_t take_free_block();
  // The free list, intrusive over blocks_: front = evicted first.
  void list_remove(int32_t b);
  void list_push_front(int32_t b);
  void list_push_back(int32_t b);
  // The prefix cache: hash -> block, open addressing with linear probing (hashes are never 0, the
  // empty key); at most one entry per block, in a table of at least twice as many slots.
  int32_t cache_find(uint64_t hash) const;  // -1: absent
  void cache_insert(uint64_t hash, int32_t block);
  void cache_erase(uint64_t hash);

  int32_t block_size_;
  std::vector<Block> blocks_;
  int32_t free_head_ = -1, free_tail_ = -1, n_free_ = 0;
  std::vector<uint64_t> cache_keys_;   // [capacity] 0 = empty
  std::vector<int32_t> cache_blocks_;  // [capacity]
  uint64_t cache_mask_ = 0;            // capacity - 1 (a power of two)
  int32_t n_cached_ = 0;
  int32_t n_state_slots_;
  std::vector<int32_t> free_state_slots_;  // stack: back = next handed out
};

}  // namespace gb

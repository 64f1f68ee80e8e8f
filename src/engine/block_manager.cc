#include "engine/block_manager.h"

#include <cassert>

namespace gb {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, int32_t n_state_slots)
    : block_size_(block_size), blocks_(n_blocks), n_state_slots_(n_state_slots) {
  for (int32_t b = 0; b < n_blocks; ++b) list_push_back(b);
  size_t capacity = 16;
  while (capacity < 2 * static_cast<size_t>(n_blocks)) capacity *= 2;
  cache_keys_.assign(capacity, 0);
  cache_blocks_.assign(capacity, -1);
  cache_mask_ = capacity - 1;
  free_state_slots_.reserve(n_state_slots);
  for (int32_t s = n_state_slots - 1; s >= 0; --s) free_state_slots_.push_back(s);
}

int32_t BlockManager::acquire_state_slot() {
  if (free_state_slots_.empty()) return -1;
  const int32_t s = free_state_slots_.back();
  free_state_slots_.pop_back();
  return s;
}

void BlockManager::release_state_slot(int32_t slot) {
  assert(slot >= 0 && slot < n_state_slots_);
  free_state_slots_.push_back(slot);
}

void BlockManager::list_remove(int32_t b) {
  Block& blk = blocks_[b];
  (blk.prev >= 0 ? blocks_[blk.prev].next : free_head_) = blk.next;
  (blk.next >= 0 ? blocks_[blk.next].prev : free_tail_) = blk.prev;
  blk.prev = blk.next = -1;
  --n_free_;
}

void BlockManager::list_push_front(int32_t b) {
  Block& blk = blocks_[b];
  blk.prev = -1;
  blk.next = free_head_;
  (free_head_ >= 0 ? blocks_[free_head_].prev : free_tail_) = b;
  free_head_ = b;
  ++n_free_;
}

void BlockManager::list_push_back(int32_t b) {
  Block& blk = blocks_[b];
  blk.next = -1;
  blk.prev = free_tail_;
  (free_tail_ >= 0 ? blocks_[free_tail_].next : free_head_) = b;
  free_tail_ = b;
  ++n_free_;
}

int32_t BlockManager::cache_find(uint64_t hash) const {
  for (uint64_t i = hash & cache_mask_;; i = (i + 1) & cache_mask_) {
    if (cache_keys_[i] == hash) return cache_blocks_[i];
    if (cache_keys_[i] == 0) return -1;
  }
}

void BlockManager::cache_insert(uint64_t hash, int32_t block) {
  uint64_t i = hash & cache_mask_;
  while (cache_keys_[i] != 0) i = (i + 1) & cache_mask_;
  cache_keys_[i] = hash;
  cache_blocks_[i] = block;
  ++n_cached_;
}

void BlockManager::cache_erase(uint64_t hash) {
  uint64_t i = hash & cache_mask_;
  while (cache_keys_[i] != hash) {
    if (cache_keys_[i] == 0) return;
    i = (i + 1) & cache_mask_;
  }
  // Backward-shift deletion: move later entries of the probe run into the hole, so lookups never
  // need tombstones.
  for (uint64_t j = (i + 1) & cache_mask_; cache_keys_[j] != 0; j = (j + 1) & cache_mask_) {
    const uint64_t home = cache_keys_[j] & cache_mask_;
    // The entry at j may fill the hole at i when its home is not in (i, j] (cyclically).
    if (((j - home) & cache_mask_) >= ((j - i) & cache_mask_)) {
      cache_keys_[i] = cache_keys_[j];
      cache_blocks_[i] = cache_blocks_[j];
      i = j;
    }
  }
  cache_keys_[i] = 0;
  cache_blocks_[i] = -1;
  --n_cached_;
}

uint64_t BlockManager::hash_block(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt) {
  // FNV-1a over (parent, salt, tokens), finished with a 64-bit mixer; never 0 (0 means "none").
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(parent);
  mix(salt);
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

int32_t BlockManager::acquire_prefix(std::span<const int32_t> tokens, uint64_t salt, int32_t max_blocks,
                                     std::vector<int32_t>* table, std::vector<uint64_t>* hashes) {
  int32_t hits = 0;
  uint64_t parent = 0;
  const int64_t full = static_cast<int64_t>(tokens.size()) / block_size_;
  for (int64_t b = 0; b < full && hits < max_blocks; ++b) {
    const uint64_t h = hash_block(parent, tokens.subspan(b * block_size_, block_size_), salt);
    const int32_t hit = cache_find(h);
    if (hit < 0) break;
    Block& blk = blocks_[hit];
    if (blk.ref_count++ == 0) list_remove(hit);
    table->push_back(hit);
    hashes->push_back(h);
    parent = h;
    ++hits;
  }
  return hits;
}

int32_t BlockManager::blocks_needed(const std::vector<int32_t>& table, int64_t n_tokens) const {
  const int64_t want = (n_tokens + block_size_ - 1) / block_size_;
  return want > static_cast<int64_t>(table.size()) ? static_cast<int32_t>(want - table.size()) : 0;
}

int32_t BlockManager::take_free_block() {
  const int32_t b = free_head_;
  list_remove(b);
  Block& blk = blocks_[b];
  if (blk.hash != 0) {  // evict its cached content
    if (cache_find(blk.hash) == b) cache_erase(blk.hash);
    blk.hash = 0;
  }
  blk.ref_count = 1;
  return b;
}

bool BlockManager::grow(std::vector<int32_t>* table, int64_t n_tokens) {
  const int32_t need = blocks_needed(*table, n_tokens);
  if (need > n_free()) return false;
  for (int32_t i = 0; i < need; ++i) table->push_back(take_free_block());
  return true;
}

void BlockManager::publish(int32_t block, uint64_t hash) {
  Block& blk = blocks_[block];
  if (blk.hash != 0) return;                       // already published (a prefix-cache hit)
  if (hash == 0 || cache_find(hash) >= 0) return;  // an identical block exists: keep that one
  blk.hash = hash;
  cache_insert(hash, block);
}

void BlockManager::release(std::vector<int32_t>* table) {
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    Block& blk = blocks_[*it];
    assert(blk.ref_count > 0);
    if (--blk.ref_count == 0) {
      // Uncached blocks are reused first; cached ones wait at the back, least recently used first.
      if (blk.hash == 0) list_push_front(*it);
      else list_push_back(*it);
    }
  }
  table->clear();
}

}  // namespace gb

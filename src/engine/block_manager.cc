#include "engine/block_manager.h"

#include <cassert>

namespace gb {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size, int32_t n_state_slots)
    : block_size_(block_size), blocks_(n_blocks), n_state_slots_(n_state_slots) {
  for (int32_t b = 0; b < n_blocks; ++b) blocks_[b].free_pos = free_list_.insert(free_list_.end(), b);
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
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    Block& blk = blocks_[it->second];
    if (blk.ref_count++ == 0) free_list_.erase(blk.free_pos);
    table->push_back(it->second);
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
  const int32_t b = free_list_.front();
  free_list_.pop_front();
  Block& blk = blocks_[b];
  if (blk.hash != 0) {  // evict its cached content
    auto it = cached_.find(blk.hash);
    if (it != cached_.end() && it->second == b) cached_.erase(it);
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
  if (blk.hash != 0) return;  // already published (a prefix-cache hit)
  if (cached_.count(hash) != 0) return;  // an identical block exists: keep that one
  blk.hash = hash;
  cached_.emplace(hash, block);
}

void BlockManager::release(std::vector<int32_t>* table) {
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    Block& blk = blocks_[*it];
    assert(blk.ref_count > 0);
    if (--blk.ref_count == 0) {
      // Uncached blocks are reused first; cached ones wait at the back, least recently used first.
      blk.free_pos = blk.hash == 0 ? free_list_.insert(free_list_.begin(), *it) : free_list_.insert(free_list_.end(), *it);
    }
  }
  table->clear();
}

}  // namespace gb

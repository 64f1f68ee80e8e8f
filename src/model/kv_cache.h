// The paged KV cache: fixed-size blocks of token slots for every attention layer, preallocated,
// and the allocator that hands blocks to sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "ops/attention.h"

namespace gb {

// Free list of physical block ids with reference counts, so that a later prefix cache can share a
// block between sequences (retain) and free it when the last one lets go (release).
class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks);

  // A free block with reference count 1, or -1 when none is left.
  int32_t allocate();
  void retain(int32_t block);
  // Drops one reference; the block returns to the free list at zero.
  void release(int32_t block);

  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  int32_t ref_count(int32_t block) const { return ref_count_[block]; }

 private:
  std::vector<int32_t> free_;       // stack of free block ids
  std::vector<int32_t> ref_count_;  // [n_blocks]
};

class KvCache {
 public:
  // n_blocks blocks of block_size token slots for every attention layer of the model: f32,
  // n_attention_layers · 2 · n_blocks · n_kv_heads · block_size · head_dim floats.
  static Result<std::unique_ptr<KvCache>> create(const ModelConfig& config, int32_t n_blocks, int32_t block_size = 16);

  // Zero-fills the cache, faulting in every page: a server reserves its memory at start (an
  // out-of-memory there, not under load later) and no step pays first-touch page faults.
  void prefault();

  // The K/V arrays of layer il (an attention layer).
  ops::PagedKv layer(int32_t il) const;

  int32_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }
  int64_t n_slots() const { return int64_t{n_blocks_} * block_size_; }
  size_t bytes() const { return n_floats_ * sizeof(float); }
  BlockAllocator& allocator() { return allocator_; }

 private:
  KvCache(int32_t n_blocks, int32_t block_size, int64_t n_kv_heads, int64_t head_dim);
  int32_t n_blocks_;
  int32_t block_size_;
  int64_t n_kv_heads_;
  int64_t head_dim_;
  int64_t layer_floats_ = 0;         // floats of K (or V) for one layer
  std::vector<int32_t> attn_index_;  // [n_layers] index among attention layers, -1 for other kinds
  size_t n_floats_ = 0;
  std::unique_ptr<float[]> data_;    // [n_attention_layers, 2 (K, V), n_blocks, n_kv_heads, block_size, head_dim] f32
  BlockAllocator allocator_;
};

}  // namespace gb

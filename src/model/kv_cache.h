// The paged KV cache — storage only: fixed-size blocks of token slots for every attention layer,
// preallocated. Hybrid models (Qwen3.5) also keep here, per linear-attention layer, a fixed-size
// recurrent state (conv window + delta state) for each of n_state_slots sequence slots: a sequence
// holds one slot for its lifetime, whatever its length. Which sequence owns which block or slot is
// not recorded here: the engine's BlockManager hands them out, and a batch names them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/huge_pages.h"
#include "core/status.h"
#include "model/config.h"
#include "ops/attention.h"

namespace gb {

class KvCache {
 public:
  // n_blocks blocks of block_size token slots for every attention layer of the model:
  // n_attention_layers · 2 · n_blocks · n_kv_heads · block_size · head_dim elements of `dtype`
  // (F32, BF16 or F16: K/V are rounded to it when stored); for hybrid models also n_state_slots
  // recurrent states, always f32 (ignored, and nothing allocated, otherwise).
  static Result<std::unique_ptr<KvCache>> create(const ModelConfig& config, int32_t n_blocks, int32_t block_size = 16,
                                                 int32_t n_state_slots = 8, DType dtype = DType::kF32);

  // Zero-fills the cache and the recurrent states, faulting in every page: a server reserves its
  // memory at start (an out-of-memory there, not under load later) and no step pays first-touch
  // page faults.
  void prefault();

  // The K/V arrays of layer il (an attention layer).
  ops::PagedKv layer(int32_t il) const;

  // Recurrent state of sequence slot `slot` in linear-attention layer il:
  // conv window [conv_kernel - 1, conv_dim] f32 and delta state [nv, dk, dv] f32.
  float* conv_state(int32_t il, int32_t slot) const { return state_at(il, slot); }
  float* delta_state(int32_t il, int32_t slot) const { return state_at(il, slot) + conv_floats_; }
  // Zeroes the slot's state in every layer (a sequence starting at position 0).
  void reset_state(int32_t slot);
  // Tokens the slot's state has consumed (the next position it accepts, besides 0 = restart).
  int32_t state_len(int32_t slot) const { return state_len_[slot]; }
  void set_state_len(int32_t slot, int32_t n) { state_len_[slot] = n; }
  int32_t n_state_slots() const { return n_state_slots_; }
  size_t state_bytes() const { return state_floats_ * sizeof(float); }

  int32_t n_blocks() const { return n_blocks_; }
  DType dtype() const { return dtype_; }
  int32_t block_size() const { return block_size_; }
  int64_t n_slots() const { return int64_t{n_blocks_} * block_size_; }
  size_t bytes() const { return n_elems_ * elem_bytes() + state_floats_ * sizeof(float); }
  // Floats of per-thread scratch that ops::attend_tile needs on this cache (tiles of up to
  // max_rows query rows).
  int64_t attend_scratch_floats(int64_t max_rows) const;

 private:
  KvCache(int32_t n_blocks, int32_t block_size, int64_t n_kv_heads, int64_t head_dim, int32_t n_state_slots,
          DType dtype);
  size_t elem_bytes() const { return dtype_ == DType::kF32 ? 4 : 2; }
  float* state_at(int32_t il, int32_t slot) const {
    return reinterpret_cast<float*>(state_->data()) + (int64_t{lin_index_[il]} * n_state_slots_ + slot) * slot_floats_;
  }
  int32_t n_blocks_;
  int32_t block_size_;
  int64_t n_kv_heads_;
  int64_t head_dim_;
  DType dtype_;
  int64_t layer_elems_ = 0;          // elements of K (or V) for one layer
  std::vector<int32_t> attn_index_;  // [n_layers] index among attention layers, -1 for other kinds
  size_t n_elems_ = 0;
  std::unique_ptr<HugePages> data_;  // [n_attention_layers, 2 (K, V), n_blocks, n_kv_heads, block] in dtype_
                                     // (a block of one head: see ops::PagedKv)
  int32_t n_state_slots_ = 0;
  std::vector<int32_t> lin_index_;  // [n_layers] index among linear-attention layers, -1 for other kinds
  int64_t conv_floats_ = 0;         // per slot and layer: conv window
  int64_t slot_floats_ = 0;         // per slot and layer: conv window + delta state
  size_t state_floats_ = 0;
  std::unique_ptr<HugePages> state_;  // [n_linear_layers, n_state_slots, slot_floats] f32
  std::vector<int32_t> state_len_;    // [n_state_slots]
};

}  // namespace gb

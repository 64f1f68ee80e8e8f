// Paged KV cache storage.
#include "model/kv_cache.h"

#include <algorithm>
#include <new>

namespace gb {

KvCache::KvCache(int32_t n_blocks, int32_t block_size, int64_t n_kv_heads, int64_t head_dim, int32_t n_state_slots,
                 DType dtype)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      n_state_slots_(n_state_slots),
      state_len_(n_state_slots, 0) {}

Result<std::unique_ptr<KvCache>> KvCache::create(const ModelConfig& config, int32_t n_blocks, int32_t block_size,
                                                 int32_t n_state_slots, DType dtype) {
  if (!ops::kv_dtype_supported(dtype)) {
    return Status::error("KV cache: unsupported element type " + std::string(dtype_name(dtype)) +
                         " (f32, bf16 or f16)");
  }
  if (n_blocks <= 0 || block_size <= 0) {
    return Status::error("KV cache: need a positive number of blocks and block size (got " + std::to_string(n_blocks) +
                         " blocks of " + std::to_string(block_size) + ")");
  }
  const int32_t n_lin = config.n_layers_of(LayerKind::kLinearAttention);
  if (n_lin > 0 && n_state_slots <= 0) {
    return Status::error("KV cache: a hybrid model needs at least one recurrent state slot (got " +
                         std::to_string(n_state_slots) + ")");
  }
  std::unique_ptr<KvCache> c(
      new KvCache(n_blocks, block_size, config.n_kv_heads, config.head_dim, n_lin > 0 ? n_state_slots : 0, dtype));
  if (n_lin > 0) {
    int32_t i = 0;
    for (LayerKind k : config.layer_kinds) c->lin_index_.push_back(k == LayerKind::kLinearAttention ? i++ : -1);
    c->conv_floats_ = config.lin_conv_state_floats();
    c->slot_floats_ = c->conv_floats_ + config.lin_delta_state_floats();
    c->state_floats_ = static_cast<size_t>(c->slot_floats_) * n_lin * n_state_slots;
    c->state_ = HugePages::allocate(c->state_floats_ * sizeof(float));  // zeroed
    if (c->state_ == nullptr) {
      return Status::error("KV cache: cannot allocate " + std::to_string(c->state_floats_ * sizeof(float) >> 20) +
                           " MiB of recurrent state for " + std::to_string(n_state_slots) + " sequences");
    }
  }
  int32_t n_attn = 0;
  for (LayerKind k : config.layer_kinds) c->attn_index_.push_back(k == LayerKind::kAttention ? n_attn++ : -1);
  c->layer_elems_ = int64_t{n_blocks} * block_size * config.n_kv_heads * config.head_dim;
  c->n_elems_ = static_cast<size_t>(c->layer_elems_) * 2 * n_attn;
  // Huge pages: a decode row reads one head's slice of each of its blocks, slices n_kv_heads
  // apart, so with 4 KiB pages nearly every slice is a TLB miss. Faulted in as touched, so a
  // short-lived user (the CLI) pays only for what it uses; the engine calls prefault().
  c->data_ = c->n_elems_ > 0 ? HugePages::allocate(c->n_elems_ * c->elem_bytes()) : nullptr;
  if (c->n_elems_ > 0 && c->data_ == nullptr) {
    return Status::error("KV cache: cannot allocate " + std::to_string(c->n_elems_ * c->elem_bytes() >> 20) +
                         " MiB for " + std::to_string(n_blocks) + " blocks");
  }
  return c;
}

void KvCache::prefault() {
  if (data_ != nullptr) std::fill_n(data_->data(), n_elems_ * elem_bytes(), uint8_t{0});
  if (state_ != nullptr) std::fill_n(state_->data(), state_floats_ * sizeof(float), uint8_t{0});
}

void KvCache::reset_state(int32_t slot) {
  for (int32_t il = 0; il < static_cast<int32_t>(lin_index_.size()); ++il) {
    if (lin_index_[il] < 0) continue;
    float* s = state_at(il, slot);
    std::fill(s, s + slot_floats_, 0.0f);
  }
  state_len_[slot] = 0;
}

ops::PagedKv KvCache::layer(int32_t il) const {
  const int64_t a = attn_index_[il];
  const int64_t layer_bytes = layer_elems_ * static_cast<int64_t>(elem_bytes());
  uint8_t* base = data_->data() + a * 2 * layer_bytes;
  return {base, base + layer_bytes, n_blocks_, n_kv_heads_, block_size_, head_dim_, dtype_};
}

int64_t KvCache::attend_scratch_floats(int64_t max_rows) const {
  const ops::PagedKv shape{nullptr, nullptr, n_blocks_, n_kv_heads_, block_size_, head_dim_, dtype_};
  return ops::attend_scratch_floats(shape, max_rows);
}

}  // namespace gb

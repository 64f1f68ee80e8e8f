// Causal attention of one query head over one sequence's keys and values in a paged KV cache.
#pragma once

#include <cstdint>

namespace gb::ops {

// One layer of a paged KV cache: K and V each [n_blocks, n_kv_heads, block_size, head_dim] f32.
// Head-major inside a block so that one head's keys are contiguous (block_size · head_dim floats)
// for the score loop; a token's slot is block · block_size + offset.
struct PagedKv {
  float* k = nullptr;  // [n_blocks, n_kv_heads, block_size, head_dim] f32
  float* v = nullptr;  // [n_blocks, n_kv_heads, block_size, head_dim] f32
  int64_t n_blocks = 0;
  int64_t n_kv_heads = 0;
  int64_t block_size = 0;
  int64_t head_dim = 0;

  float* k_at(int64_t block, int64_t kv_head) const {
    return k + (block * n_kv_heads + kv_head) * block_size * head_dim;
  }
  float* v_at(int64_t block, int64_t kv_head) const {
    return v + (block * n_kv_heads + kv_head) * block_size * head_dim;
  }
};

// Writes one token's k/v rows (all kv heads) into cache slot `slot`.
// k_row, v_row: [n_kv_heads, head_dim] f32.
void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row);

// out[head_dim] = softmax(scale · q·K[0..n_ctx)ᵀ) · V[0..n_ctx) for kv head `kv_head`, the
// positions of one sequence found through block_table[ceil(n_ctx / block_size)]. Online softmax
// one block at a time (running max and sum), so no buffer grows with the context;
// scores[block_size] is caller scratch. q[head_dim] f32.
// Attention sinks: with n_sink > 0, *sink_mass = the softmax weight this query put on key
// positions [0, min(n_sink, n_ctx)), from this softmax's own maximum and sum (those positions'
// scores are recomputed after the loop: n_sink dot products). n_sink = 0 costs one branch.
void attend_head(const float* q, const PagedKv& kv, int64_t kv_head, const int32_t* block_table, int64_t n_ctx,
                 float scale, float* out, float* scores, int64_t n_sink = 0, float* sink_mass = nullptr);

// Scalar reference: q[head_dim], keys/values contiguous k[n_ctx, head_dim], v[n_ctx, head_dim];
// two-pass softmax in double. sink_mass (may be null): the weight on positions < n_sink.
void attend_head_ref(const float* q, const float* k, const float* v, int64_t n_ctx, int64_t head_dim, float scale,
                     float* out, int64_t n_sink = 0, double* sink_mass = nullptr);

}  // namespace gb::ops

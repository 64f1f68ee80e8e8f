// Internal interface between the attention dispatcher (attention.cc) and the per-ISA tile kernels
// (attention_avx2.cc, attention_avx512.cc), which include attention_simd_inl.h.
#pragma once

#include <cstdint>

#include "ops/attention.h"

namespace gb::ops {

// Scratch layout shared by every kernel (floats): running max [R], running sum [R], scores
// [R, kAttnKeyPad-padded block], one block's keys widened [head_dim, padded block], one block's
// values widened [block_size, head_dim].
// (static: no copy of it is shared between files compiled with different -m flags.)
inline constexpr int64_t kAttnKeyPad = 16;
static inline int64_t attn_padded_block(int64_t block_size) {
  return (block_size + kAttnKeyPad - 1) / kAttnKeyPad * kAttnKeyPad;
}

// How far ahead of the block being attended the SIMD kernels prefetch a KV head's keys and
// values, in bytes of them (0: no software prefetch; bench_ops_attention --prefetch-kib sets it
// for A/B runs).
extern int64_t g_attn_prefetch_bytes;

#if defined(__x86_64__)
// kv_store: BF16 / F16 caches only (bitwise what the scalar rounding writes).
namespace avx2 {
void attend_tile(const AttendTile& t, const PagedKv& kv, float* scratch);
void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row, int64_t h0, int64_t h1);
}  // namespace avx2
namespace avx512 {
void attend_tile(const AttendTile& t, const PagedKv& kv, float* scratch);
void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row, int64_t h0, int64_t h1);
}  // namespace avx512
#endif

}  // namespace gb::ops

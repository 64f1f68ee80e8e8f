// Causal attention over a paged KV cache: a tile of query rows (the query heads that share one KV
// head × a few consecutive positions of one sequence) against the sequence's keys, one KV block at
// a time (flash-attention style), and the scalar reference it is tested against.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace gb::ops {

// One layer of a paged KV cache, K and V each [n_blocks, n_kv_heads, block] in `dtype` (F32, BF16
// or F16). Inside a block one head's keys are stored transposed, [head_dim, block_size] (the key
// index fastest: a vector of consecutive keys' element i is one load, so a query row's scores for
// a whole block are FMAs over head_dim with no horizontal sums), its values row-major,
// [block_size, head_dim]. A token's slot is block · block_size + offset.
struct PagedKv {
  void* k = nullptr;
  void* v = nullptr;
  int64_t n_blocks = 0;
  int64_t n_kv_heads = 0;
  int64_t block_size = 0;
  int64_t head_dim = 0;
  DType dtype = DType::kF32;

  int64_t elem_bytes() const { return dtype == DType::kF32 ? 4 : 2; }
  // One head's block: keys [head_dim, block_size], values [block_size, head_dim], in dtype.
  uint8_t* k_at(int64_t block, int64_t kv_head) const {
    return static_cast<uint8_t*>(k) + (block * n_kv_heads + kv_head) * block_size * head_dim * elem_bytes();
  }
  uint8_t* v_at(int64_t block, int64_t kv_head) const {
    return static_cast<uint8_t*>(v) + (block * n_kv_heads + kv_head) * block_size * head_dim * elem_bytes();
  }
  // Element i of the key / value in `slot` of kv head h, widened to f32 (tests, references).
  float key(int64_t slot, int64_t h, int64_t i) const;
  float value(int64_t slot, int64_t h, int64_t i) const;
};

// True for the KV element types the kernels read: F32, BF16, F16.
bool kv_dtype_supported(DType t);

// Writes one token's k/v rows into cache slot `slot`, rounded to the cache's dtype (round to
// nearest even): KV heads [h0, h1), all of them by default (h1 < 0). k_row, v_row:
// [n_kv_heads, head_dim] f32 (head h at h · head_dim).
void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row, int64_t h0 = 0, int64_t h1 = -1);

// A tile of query rows: n_pos consecutive positions pos0, pos0 + 1, ... of one sequence × n_q
// query heads sharing KV head kv_head. Row (i, j) attends over key positions [0, pos0 + i] (causal)
// found through block_table[ceil((pos0 + n_pos) / block_size)].
struct AttendTile {
  const float* q = nullptr;  // row (i, j) at q[i · q_stride + j · head_dim], head_dim f32
  int64_t q_stride = 0;
  float* out = nullptr;  // row (i, j) at out[i · out_stride + j · head_dim]
  int64_t out_stride = 0;
  int64_t n_pos = 0;
  int64_t n_q = 0;
  int64_t pos0 = 0;
  int64_t kv_head = 0;
  const int32_t* block_table = nullptr;
  float scale = 1.0f;
  // Attention sinks (null n_sink: none, one branch). For positions i < n_sink_pos with
  // n_sink[i] > 0, sink_mass[i · sink_stride + j] = the softmax weight row (i, j) put on key
  // positions [0, min(n_sink[i], pos0 + i + 1)), from this softmax's own final maximum and sum
  // (those scores are recomputed after the loop, bitwise the ones the loop normalised).
  const uint8_t* n_sink = nullptr;
  int64_t n_sink_pos = 0;
  float* sink_mass = nullptr;
  int64_t sink_stride = 0;
};

// Positions per tile for a group of n_q query heads (about 32 rows): the callers' choice, which
// the results do not depend on — a row's output is bitwise the same in any tile (its own keys,
// in the same block order and arithmetic), so batch composition and threading cannot change it.
int64_t attend_tile_positions(int64_t n_q);

// Per-thread scratch for attend_tile: floats for tiles of up to max_rows rows (n_pos · n_q).
int64_t attend_scratch_floats(const PagedKv& kv, int64_t max_rows);

// softmax(scale · q·Kᵀ) · V for every row of the tile, with an online softmax one KV block at a
// time: each block's keys and values are loaded (and widened from bf16/f16) once for all the
// tile's rows; running max and sum per row; no buffer grows with the context. scratch: at least
// attend_scratch_floats(kv, n_pos · n_q) floats. Kernels by active_isa(): AVX2 and AVX-512 give
// bitwise the same results (same per-lane FMA order); the portable one is the original per-row
// loop (8-lane dot, std::exp), bitwise what attend_head computed before the tiled kernels.
void attend_tile(const AttendTile& t, const PagedKv& kv, float* scratch);

// One query head of one position: a tile of one row. q[head_dim], out[head_dim], n_ctx keys
// (positions [0, n_ctx)). n_sink (at most 255) and sink_mass as in AttendTile.
void attend_head(const float* q, const PagedKv& kv, int64_t kv_head, const int32_t* block_table, int64_t n_ctx,
                 float scale, float* out, float* scratch, int64_t n_sink = 0, float* sink_mass = nullptr);

// Scalar reference: q[head_dim], keys/values contiguous k[n_ctx, head_dim], v[n_ctx, head_dim];
// two-pass softmax in double. sink_mass (may be null): the weight on positions < n_sink.
void attend_head_ref(const float* q, const float* k, const float* v, int64_t n_ctx, int64_t head_dim, float scale,
                     float* out, int64_t n_sink = 0, double* sink_mass = nullptr);

}  // namespace gb::ops

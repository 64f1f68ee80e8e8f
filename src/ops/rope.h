// Rotary position embedding: per-step cos/sin tables and the two rotation layouts in use.
#pragma once

#include <cstdint>

namespace gb::ops {

// Which dims of a head form a rotated pair (frequency i):
//   kNeox  (HF rotate_half; Qwen GGUFs):   (i, i + n_rot/2)
//   kPairs (Meta/llama2.c; llama GGUFs):   (2i, 2i + 1) — GGUF llama q/k rows are stored permuted
//          into this order, so using it there avoids un-permuting (copying) the weights.
enum class RopeStyle : uint8_t { kNeox, kPairs };

// cos/sin[n, n_rot/2] f32 for token positions[n], angle = position · inv_freq[i] computed in
// double (inv_freq[n_rot/2] already includes any llama3 / linear scaling).
void rope_tables(const int32_t* positions, int64_t n, const double* inv_freq, int64_t half, float* cos_out,
                 float* sin_out);

// Rotates the first n_rot dims of every head in place: x[n, n_heads, head_dim] f32 with row
// stride `stride` floats; cos/sin[n, n_rot/2] from rope_tables. Dims past n_rot pass through
// (partial rotary, as in Qwen3.5).
void rope(float* x, int64_t n, int64_t stride, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos,
          const float* sin, RopeStyle style);

// Scalar reference (angles and rotation in double) for tests.
void rope_ref(float* x, const int32_t* positions, int64_t n, int64_t stride, int64_t n_heads, int64_t head_dim,
              int64_t n_rot, const double* inv_freq, RopeStyle style);

}  // namespace gb::ops

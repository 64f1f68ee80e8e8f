// Row kernels of the glass box: the intervention ops applied to hidden-state rows inside the
// batch (scale / add / set / clamp / ablate / clip_massive) and the per-row statistics that the
// observation and the massive-activation detector are built from. Portable C++ (GCC vector types
// for the statistics' passes); each row is independent, so a row's result never depends on the
// other rows of the batch.
#pragma once

#include <cstdint>

namespace gb::ops {

// x[n_rows, width] f32, in place. dims: [n_dims] indices into a row, or null for the whole row.
void scale_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float s);  // x·(1+s)
void add_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float s);    // x + s
void set_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float s);    // x := s
void clamp_dims(float* x, int64_t n_rows, int64_t width, const int32_t* dims, int64_t n_dims, float c);  // |x| <= c
// x + s·v, v: [width] f32.
void add_vector(float* x, int64_t n_rows, int64_t width, const float* v, float s);
// x − s·(x·u)u, u: [width] f32 unit vector (s = 1 removes the projection on u entirely).
void ablate_direction(float* x, int64_t n_rows, int64_t width, const float* u, float s);
// Where |x_i| > t · median|x| of its row: x_i := mean[i] when mean is non-null, else x_i · factor.
// Returns the number of values changed.
int64_t clip_massive(float* x, int64_t n_rows, int64_t width, float t, float factor, const float* mean);

// Statistics of one row x[width].
struct RowStats {
  float max_abs = 0;     // max_i |x_i|
  int32_t max_dim = 0;   // its i (lowest on ties)
  float median_abs = 0;  // median of |x_i| (mean of the two middle values for an even width)
  double sum = 0;        // Σ x_i
  double sum_sq = 0;     // Σ x_i²
};
// max_abs, max_dim and median_abs only (the monitor's cheap path).
RowStats row_max_median(const float* x, int64_t width);
// Everything in RowStats.
RowStats row_stats(const float* x, int64_t width);

// The median of |x_i| over x[n] (mean of the two middle values for an even n; 0 for n = 0),
// exactly what sorting would give, with no workspace: a bracket narrowed on the bit pattern of
// |x|, each step a vector count over x (a 1024-wide row: ~5 steps). Also the massive rule's layer median
// over many rows of a sequence (x: those rows, contiguous).
float median_abs(const float* x, int64_t n);

// The k (<= 32) dims of largest |x_i| of a row, largest first (lower dim first on ties), into
// dims[k] / values[k] (values are |x_i|). Returns how many were written (min(k, width)).
int32_t row_top_k(const float* x, int64_t width, int32_t k, int32_t* dims, float* values);

}  // namespace gb::ops

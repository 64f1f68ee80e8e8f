// Matrix multiplication against weights in their storage dtype: the one op that decides decode
// speed (it streams every weight byte once per step). Dispatches at run time to the best
// kernel the CPU has; matmul_ref is the scalar reference every kernel is tested against.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace gb::ops {

// A weight matrix W [rows, cols] (rows = output features), row-major in its storage dtype;
// each row holds row_bytes(dtype, cols) bytes.
struct Weight {
  const uint8_t* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// y[n, rows] = x[n, cols] · Wᵀ, f32 in and out, f32 accumulation.
void matmul(ThreadPool& pool, const float* x, int64_t n, const Weight& w, float* y);

// Scalar reference: each row dequantized, products summed in double.
void matmul_ref(const float* x, int64_t n, const Weight& w, float* y);

// out[cols] = row r of w as f32 (embedding lookup, tests).
void dequantize_row(const Weight& w, int64_t r, float* out);

}  // namespace gb::ops

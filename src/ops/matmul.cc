#include "ops/matmul.h"

#include <cstring>
#include <vector>

#include "core/fp16.h"

namespace gb::ops {

void dequantize_row(const Weight& w, int64_t r, float* out) {
  const uint8_t* row = w.data + r * row_bytes(w.dtype, w.cols);
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(out, row, w.cols * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * 34;
        uint16_t d16;
        std::memcpy(&d16, blk, 2);
        const float d = f16_to_f32(d16);
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int i = 0; i < 32; ++i) out[b * 32 + i] = d * static_cast<float>(q[i]);
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * 18;
        uint16_t d16;
        std::memcpy(&d16, blk, 2);
        const float d = f16_to_f32(d16);
        for (int i = 0; i < 16; ++i) {
          out[b * 32 + i] = d * static_cast<float>((blk[2 + i] & 0x0f) - 8);
          out[b * 32 + i + 16] = d * static_cast<float>((blk[2 + i] >> 4) - 8);
        }
      }
      return;
    default:
      std::memset(out, 0, w.cols * sizeof(float));  // unsupported types are rejected at load time
      return;
  }
}

void matmul_ref(const float* x, int64_t n, const Weight& w, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0;
      for (int64_t i = 0; i < w.cols; ++i) acc += static_cast<double>(x[t * w.cols + i]) * row[i];
      y[t * w.rows + r] = static_cast<float>(acc);
    }
  }
}

// Placeholder until the SIMD kernels land: rows split across threads, scalar dot products.
void matmul(ThreadPool& pool, const float* x, int64_t n, const Weight& w, float* y) {
  pool.run([&](int ti) {
    const Range rr = split_range(w.rows, ti, pool.size());
    std::vector<float> row(w.cols);
    for (int64_t r = rr.begin; r < rr.end; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t t = 0; t < n; ++t) {
        float acc = 0;
        for (int64_t i = 0; i < w.cols; ++i) acc += x[t * w.cols + i] * row[i];
        y[t * w.rows + r] = acc;
      }
    }
  });
}

}  // namespace gb::ops

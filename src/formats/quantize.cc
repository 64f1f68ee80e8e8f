#include "formats/quantize.h"

#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace gb {

void quantize_row_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    uint8_t* blk = out + b * 34;
    std::memcpy(blk, &d16, 2);
    for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(xb[i] * id)));
  }
}

void quantize_row_q4_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f, max = 0.0f;  // max keeps the sign of the largest-magnitude value
    for (int i = 0; i < 32; ++i) {
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    uint8_t* blk = out + b * 18;
    std::memcpy(blk, &d16, 2);
    for (int i = 0; i < 16; ++i) {
      const uint8_t q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(xb[i] * id + 8.5f))));
      const uint8_t q1 =
          static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(xb[i + 16] * id + 8.5f))));
      blk[2 + i] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

Status convert_row(const float* x, int64_t n, DType dtype, uint8_t* out) {
  switch (dtype) {
    case DType::kF32: std::memcpy(out, x, n * sizeof(float)); return Status::ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return Status::ok();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return Status::ok();
    case DType::kQ8_0:
    case DType::kQ4_0:
      if (n % 32 != 0) return Status::error("row length " + std::to_string(n) + " is not a multiple of 32");
      (dtype == DType::kQ8_0 ? quantize_row_q8_0 : quantize_row_q4_0)(x, n, out);
      return Status::ok();
    default: return Status::error("cannot convert to " + std::string(dtype_name(dtype)));
  }
}

}  // namespace gb

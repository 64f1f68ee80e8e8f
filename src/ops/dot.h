// A portable f32 dot product for the attention loops (internal to gb_ops).
#pragma once

#include <cstdint>

namespace gb::ops {

// a·b with eight independent partial sums: without -ffast-math a single running sum is a serial
// dependency chain the compiler may not vectorise; eight lanes map onto SIMD registers. The
// summation order is fixed, so results do not depend on where it is called from.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace gb::ops

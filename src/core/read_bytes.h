// A plain read of memory at full speed: the denominator of "decode at x% of the memory
// bandwidth" (bench_ops_matmul --read, glassbox bench --read).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace gb {

// Sums the bytes [p, p + n) as 64-bit words with two SSE2 accumulators (n a multiple of 64; a
// tail is not read). The sum is returned so the reads cannot be dropped.
inline uint64_t read_bytes(const uint8_t* p, int64_t n) {
#if defined(__x86_64__)
  __m128i s0 = _mm_setzero_si128(), s1 = s0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    s0 = _mm_add_epi64(s0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
    s1 = _mm_add_epi64(s1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    s0 = _mm_add_epi64(s0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    s1 = _mm_add_epi64(s1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  uint64_t out[2];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_add_epi64(s0, s1));
  return out[0] + out[1];
#else
  uint64_t s = 0;
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);
    s += w;
  }
  return s;
#endif
}

}  // namespace gb

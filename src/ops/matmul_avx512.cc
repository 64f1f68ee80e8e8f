// AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels: 16-lane f32 FMA for float weights, vpdpbusd for
// the int8 block dot products. Same templates as AVX2 (matmul_simd_inl.h); the quantized path
// gives bitwise the same sums as AVX2 and scalar (exact integer block sums, the same f32 steps).
#if defined(__x86_64__)
// GCC 12's AVX-512 headers read _mm*_undefined_*() values (`__Y = __Y`), which -Wuninitialized
// reports at every inlined use; the values are don't-cares by design.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "ops/matmul_kernels.h"

namespace gb::ops::avx512 {
namespace {

struct V {
  using F = __m512;
  using I = __m512i;
  static constexpr int kLanes = 16;
  // 32 ZMM registers: larger float tiles than AVX2.
  static constexpr int kFloatRows[5] = {0, 8, 6, 4, 4};
  // Tokens per panel tile (2 panels of 8 rows): 4·2 int + 4·2 float accumulators.
  static constexpr int kPanelTokens = 4;
  static constexpr bool kVnni = true;

  static F zero() { return _mm512_setzero_ps(); }
  static F load_x(const float* p) { return _mm512_loadu_ps(p); }
  template <DType D>
  static F load_w(const uint8_t* row, int64_t i) {
    if constexpr (D == DType::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (D == DType::kF16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static I load_i(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static F bf16_even(I v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
  static F bf16_odd(I v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(-65536))); }
  static float hsum(F x);
  static __m256i dot_block(__m256i a, __m256i b) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b); }
  static __m256i dot_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_epi32(acc, a, b); }
  // vpdpwssd: the madd of int16 pairs and the accumulation in one instruction (same integers as AVX2).
  static __m256i kmadd(__m256i acc, __m256i p16, __m256i sc) { return _mm256_dpwssd_epi32(acc, p16, sc); }
};

#include "ops/matmul_simd_inl.h"

float V::hsum(F x) {
  // Upper half by a shuffle: GCC 12's _mm512_extractf64x4_pd trips -Werror=uninitialized.
  const __m512 hi = _mm512_shuffle_f32x4(x, x, 0x4e);
  return hsum8(_mm512_castps512_ps256(_mm512_add_ps(x, hi)));
}

}  // namespace

void rows(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) { rows_any(a, r0, r1, scratch); }

}  // namespace gb::ops::avx512
#endif

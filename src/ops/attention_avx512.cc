// AVX-512 tile kernel of ops::attend_tile (attention_simd_inl.h, 16 f32 lanes): bitwise the same
// results as the AVX2 one (per-lane arithmetic is the same; a 16-lane block sum adds its two
// 8-lane halves in the order AVX2 adds its two vectors).
#if defined(__x86_64__)
// GCC 12's AVX-512 headers read _mm*_undefined_*() values (`__Y = __Y`), which -Wuninitialized
// reports at every inlined use; the values are don't-cares by design.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "ops/attention_kernels.h"

namespace gb::ops::avx512 {
namespace {

struct V {
  using F = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kQkRows = 8, kQkVecs = 1;  // 16 accumulators of 32 ZMM registers
  static constexpr int kPvRows = 4, kPvVecs = 4;  // 16 accumulators + 4 value vectors

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F round(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F ldexp(F y, F n) {
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
  }
  static F zero_below(F x, F thr, F y) {
    const __mmask16 below = _mm512_cmp_ps_mask(x, thr, _CMP_LT_OQ);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~below), y);
  }
  static F mask_tail(F x, int64_t n) {
    if (n >= kLanes) return x;
    const __mmask16 keep = n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
    return _mm512_mask_blend_ps(keep, _mm512_set1_ps(-__builtin_inff()), x);
  }
  static float hmax(F x) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
  }
  // The two 8-lane halves in order (as AVX2 adds its two vectors of a 16-key block).
  static __m256 sum8(__m256 acc, F p) {
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(p));
    return _mm256_add_ps(acc, _mm512_extractf32x8_ps(p, 1));
  }
  static float first(F x) { return _mm512_cvtss_f32(x); }
  static F widen_f16(const uint16_t* s) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
  static F widen_bf16(const uint16_t* s) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

#include "ops/attention_simd_inl.h"

}  // namespace

void attend_tile(const AttendTile& t, const PagedKv& kv, float* scratch) { attend_tile_any(t, kv, scratch); }
void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row, int64_t h0, int64_t h1) {
  kv_store_any(kv, slot, k_row, v_row, h0, h1);
}

}  // namespace gb::ops::avx512
#endif

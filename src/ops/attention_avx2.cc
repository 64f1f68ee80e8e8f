// AVX2 + FMA + F16C tile kernel of ops::attend_tile (attention_simd_inl.h, 8 f32 lanes).
#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/attention_kernels.h"

namespace gb::ops::avx2 {
namespace {

struct V {
  using F = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kQkRows = 3, kQkVecs = 2;  // 12 accumulators + 2 key vectors of 16 YMM
  static constexpr int kPvRows = 6, kPvVecs = 2;  // 12 accumulators + 2 value vectors

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F round(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // y · 2^n for integral n in [-126, 127].
  static F ldexp(F y, F n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
  // x < thr ? 0 : y (NaN x keeps y).
  static F zero_below(F x, F thr, F y) { return _mm256_andnot_ps(_mm256_cmp_ps(x, thr, _CMP_LT_OQ), y); }
  // Lanes k >= n -> -inf.
  static F mask_tail(F x, int64_t n) {
    if (n >= kLanes) return x;
    const F idx = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const F keep = _mm256_cmp_ps(idx, _mm256_set1_ps(static_cast<float>(n < 0 ? 0 : n)), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), x, keep);
  }
  static float hmax(F x) {
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
  }
  static __m256 sum8(__m256 acc, F p) { return _mm256_add_ps(acc, p); }
  static float first(F x) { return _mm256_cvtss_f32(x); }
  static F widen_f16(const uint16_t* s) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
  static F widen_bf16(const uint16_t* s) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

#include "ops/attention_simd_inl.h"

}  // namespace

void attend_tile(const AttendTile& t, const PagedKv& kv, float* scratch) { attend_tile_any(t, kv, scratch); }
void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row, int64_t h0, int64_t h1) {
  kv_store_any(kv, slot, k_row, v_row, h0, h1);
}

}  // namespace gb::ops::avx2
#endif

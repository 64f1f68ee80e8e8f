// AVX2 + FMA + F16C matmul kernels and activation quantization (the main optimised path on
// x86-64 without AVX-512). The kernels themselves live in matmul_simd_inl.h.
#if defined(__x86_64__)
#include <immintrin.h>

#include "ops/matmul_kernels.h"

namespace gb::ops::avx2 {
namespace {

struct V {
  using F = __m256;
  using I = __m256i;
  static constexpr int kLanes = 8;
  // Rows per register tile for T = 0..4 tokens: T·R accumulators + R weight vectors fit in the
  // 16 YMM registers.
  static constexpr int kFloatRows[5] = {0, 8, 4, 3, 2};
  static constexpr int kPanelsK = 1;  // panels per K-quant panel tile (rows_packed)
  static constexpr bool kVnni = false;

  static F zero() { return _mm256_setzero_ps(); }
  static F load_x(const float* p) { return _mm256_loadu_ps(p); }
  template <DType D>
  static F load_w(const uint8_t* row, int64_t i) {
    if constexpr (D == DType::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (D == DType::kF16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    } else {  // bf16 is the top half of an f32
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static I load_i(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static F bf16_even(I v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
  static F bf16_odd(I v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536))); }
  static float hsum(F x);
  // int32 lanes of Σ a·b over groups of 4 bytes; a unsigned (|w| ≤ 127), b signed. The int16
  // pair sums of maddubs cannot saturate: 2·127·127 < 32767.
  static __m256i dot_block(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
  }
  static __m256i dot_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, dot_block(a, b)); }
  // acc + int32 lanes of Σ p16·sc over int16 pairs (exact: |p16| ≤ 2·63·127, |sc| ≤ 128).
  static __m256i kmadd(__m256i acc, __m256i p16, __m256i sc) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, sc));
  }
};

#include "ops/matmul_simd_inl.h"

float V::hsum(F x) { return hsum8(x); }

}  // namespace

void rows(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) { rows_any(a, r0, r1, scratch); }

// ggml's quantize_row_q8_K_ref, vectorized (bitwise equal to scalar::quantize_k): per block of
// 256, max = the first value of largest magnitude, iscale = -127/max, q = round-half-even(x·iscale),
// d = 1/iscale; a block with a non-finite value or a scale that overflows is all zeros.
void quantize_k(const float* x, int64_t cols, float* d, int8_t* q, int16_t* b16, int32_t* b32) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 big = _mm256_set1_ps(3.402823466e38f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t b = 0; b < cols / kKBlock; ++b) {
    const float* xb = x + b * kKBlock;
    int8_t* qb = q + b * kKBlock;
    __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < kKBlock; i += 8) {
      const __m256 ax = _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(xb + i));
      m = _mm256_max_ps(m, ax);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(ax, big, _CMP_NLE_UQ));  // NaN or ±inf
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    float iscale = 0.0f;
    if (_mm256_movemask_ps(bad) == 0 && amax != 0.0f) {
      const __m256 am = _mm256_set1_ps(amax);
      for (int i = 0; i < kKBlock; i += 8) {
        const int hit =
            _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign_bit, _mm256_loadu_ps(xb + i)), am, _CMP_EQ_OQ));
        if (hit != 0) {
          iscale = -127.f / xb[i + __builtin_ctz(static_cast<unsigned>(hit))];
          break;
        }
      }
      if (!(iscale - iscale == 0.0f)) iscale = 0.0f;  // overflowed to ±inf
    }
    if (iscale == 0.0f) {
      d[b] = 0.0f;
      __builtin_memset(qb, 0, kKBlock);
      for (int j = 0; j < kKBlock / 16; ++j) b16[b * 16 + j] = 0;
      for (int j = 0; j < kKBlock / 32; ++j) b32[b * 8 + j] = 0;
      continue;
    }
    d[b] = 1.0f / iscale;
    const __m256 mul = _mm256_set1_ps(iscale);
    for (int i = 0; i < kKBlock; i += 32) {
      __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i), mul), kRound));
      __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 8), mul), kRound));
      __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 16), mul), kRound));
      __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i + 24), mul), kRound));
      // Sums of 16 before packing (the codes are in [-127, 127], so packing saturates nothing).
      const __m256i s01 = _mm256_add_epi32(i0, i1), s23 = _mm256_add_epi32(i2, i3);
      i0 = _mm256_packs_epi32(i0, i1);
      i2 = _mm256_packs_epi32(i2, i3);
      i0 = _mm256_packs_epi16(i0, i2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + i), _mm256_permutevar8x32_epi32(i0, perm));
      alignas(32) int32_t s[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(s), s01);
      _mm256_store_si256(reinterpret_cast<__m256i*>(s + 8), s23);
      const int32_t lo = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
      const int32_t hi = s[8] + s[9] + s[10] + s[11] + s[12] + s[13] + s[14] + s[15];
      b16[b * 16 + i / 16] = static_cast<int16_t>(lo);
      b16[b * 16 + i / 16 + 1] = static_cast<int16_t>(hi);
      b32[b * 8 + i / 32] = lo + hi;
    }
  }
}

// ggml's AVX2 quantize_row_q8_0: d = amax/127 (stored as fp16), q = round-half-even(x·(127/amax));
// s = each block's code sum.
void quantize(const float* x, int64_t cols, float* d, int8_t* q, int32_t* s) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < cols / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
    __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
    __m256 m = _mm256_andnot_ps(sign_bit, v0);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v1));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v2));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.f, 0));
    const __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    const int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), kRound));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), kRound));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), kRound));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), kRound));
    if (s != nullptr) s[b] = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    // packs work per 128-bit lane; the permute restores element order.
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, perm);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQBlock), i0);
  }
}

namespace {

// 8 bytes at p (unsigned or signed) -> 8 f32.
inline __m256 u8_to_f32(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8_to_f32(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// ggml's get_scale_min_k4 (6-bit scales and mins of Q4_K).
inline void q4k_scale_min(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// y = (d·sc)·q - dmin·m per element, as two roundings (mul, then sub) like the scalar code.
// Q4_K (kFiveBits false) and Q5_K (codes' bit 4 from qh: bit 2j / 2j + 1 of qh[l] for group j).
template <bool kFiveBits>
void dequant_min_k_block(const uint8_t* blk, float* out) {
  const float d = _cvtsh_ss(static_cast<uint16_t>(blk[0] | blk[1] << 8));
  const float dmin = _cvtsh_ss(static_cast<uint16_t>(blk[2] | blk[3] << 8));
  const uint8_t* scales = blk + 4;
  const uint8_t* q = blk + (kFiveBits ? 48 : 16);
  const __m256i low = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
  alignas(32) uint8_t nib[64];
  for (int j = 0; j < 4; ++j) {
    int sc, m;
    q4k_scale_min(2 * j, scales, &sc, &m);
    const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc)), m1 = _mm256_set1_ps(dmin * static_cast<float>(m));
    q4k_scale_min(2 * j + 1, scales, &sc, &m);
    const __m256 d2 = _mm256_set1_ps(d * static_cast<float>(sc)), m2 = _mm256_set1_ps(dmin * static_cast<float>(m));
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j));
    __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    if constexpr (kFiveBits) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(nib), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(nib + 32), hi);
    float* o = out + 64 * j;
    for (int k = 0; k < 4; ++k) {
      _mm256_storeu_ps(o + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d1, u8_to_f32(nib + 8 * k)), m1));
      _mm256_storeu_ps(o + 32 + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d2, u8_to_f32(nib + 32 + 8 * k)), m2));
    }
  }
}

// y = (d·scale)·(q6 - 32); q6 = 4 low bits from ql, 2 high bits from qh.
void dequant_q6_k_block(const uint8_t* blk, float* out) {
  const uint8_t* ql = blk;
  const uint8_t* qh = blk + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
  const float d = _cvtsh_ss(static_cast<uint16_t>(blk[208] | blk[209] << 8));
  const __m256i low = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
  alignas(32) int8_t q[128];
  for (int half = 0; half < 2; ++half) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    auto hi2 = [&](int shift) {  // bits shift..shift+1 of qh, moved to bits 4..5
      return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, shift), two), 4);
    };
    const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, low), hi2(0));
    const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l1, low), hi2(2));
    const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low), hi2(4));
    const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low), hi2(6));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_sub_epi8(q1, off));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32), _mm256_sub_epi8(q2, off));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64), _mm256_sub_epi8(q3, off));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 96), _mm256_sub_epi8(q4, off));
    // Element 32·k + l uses scale sc[2k + l/16].
    for (int k = 0; k < 4; ++k) {
      for (int g = 0; g < 2; ++g) {
        const __m256 s = _mm256_set1_ps(d * static_cast<float>(sc[2 * k + g]));
        const int e = 32 * k + 16 * g;
        _mm256_storeu_ps(out + e, _mm256_mul_ps(s, i8_to_f32(q + e)));
        _mm256_storeu_ps(out + e + 8, _mm256_mul_ps(s, i8_to_f32(q + e + 8)));
      }
    }
    out += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

namespace {

// T tokens × G groups of 8 rows: per block one load of each group's 8 f16 offsets, one broadcast of
// each token's block sum, T·G independent fma chains (scalar::add_mins, lane by lane).
template <int T, int G>
void mins_tile(const KernelArgs& a, int64_t t0, int64_t g0) {
  const int64_t nb = a.cols / kQBlock;
  __m256 acc[T][G];
  for (int t = 0; t < T; ++t)
    for (int g = 0; g < G; ++g) acc[t][g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256 m[G];
    for (int g = 0; g < G; ++g)
      m[g] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.mins + ((g0 + g) * nb + b) * 8)));
    for (int t = 0; t < T; ++t) {
      const __m256 s = _mm256_broadcast_ss(a.xsd + (t0 + t) * nb + b);
      for (int g = 0; g < G; ++g) acc[t][g] = _mm256_fmadd_ps(m[g], s, acc[t][g]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int g = 0; g < G; ++g) {
      float* y = a.y + (t0 + t) * a.y_stride + (g0 + g) * 8;
      _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), acc[t][g]));
    }
  }
}

// Few tokens: 4 groups at once, so that the chains' latency overlaps.
template <int T>
void mins_tokens(const KernelArgs& a, int64_t t0, int64_t g0, int64_t g1) {
  constexpr int G = T >= 4 ? 2 : 4;
  int64_t g = g0;
  for (; g + G <= g1; g += G) mins_tile<T, G>(a, t0, g);
  for (; g < g1; ++g) mins_tile<T, 1>(a, t0, g);
}

}  // namespace

void add_mins(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t full = a.rows / 8 * 8, nb = a.cols / kQBlock;
  const int64_t g0 = r0 / 8, g1 = (r1 < full ? r1 : full) / 8;
  if (g1 > g0) {
    int64_t t = 0;
    for (; t + 4 <= a.n; t += 4) mins_tokens<4>(a, t, g0, g1);
    switch (a.n - t) {
      case 3: mins_tokens<3>(a, t, g0, g1); break;
      case 2: mins_tokens<2>(a, t, g0, g1); break;
      case 1: mins_tokens<1>(a, t, g0, g1); break;
      default: break;
    }
  }
  for (int64_t r = r0 > full ? r0 : full; r < r1; ++r) {  // rows past the last whole group
    for (int64_t t = 0; t < a.n; ++t) {
      float macc = 0.0f;
      for (int64_t b = 0; b < nb; ++b)
        macc = __builtin_fmaf(_cvtsh_ss(a.mins[mins_index(a.rows, nb, r, b)]), a.xsd[t * nb + b], macc);
      a.y[t * a.y_stride + r] += macc;
    }
  }
}

void dequant_k(DType dtype, const uint8_t* row, int64_t cols, float* out) {
  dequant_k_row<dequant_min_k_block<false>, dequant_min_k_block<true>, dequant_q6_k_block>(dtype, row, cols, out);
}

}  // namespace gb::ops::avx2
#endif

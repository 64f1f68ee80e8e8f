// AVX-512 (F/BW/VL/DQ + VNNI) matmul kernels: 16-lane f32 FMA for float weights, vpdpbusd for
// the int8 block dot products, and (reached only at Isa::kAvx512Bf16) vdpbf16ps for BF16 weights. Same templates as
// AVX2 (matmul_simd_inl.h); the quantized path gives bitwise the same sums as AVX2 and scalar (exact integer block
// sums, the same f32 steps).
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
  static constexpr int kPanelsK = 2;  // panels per K-quant panel tile (rows_packed)
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

// ---- BF16 weights against bf16-rounded activations (AVX512_BF16) ----
//
// Each product of two bf16 values is exact in f32; vdpbf16ps adds a lane's two products to it
// rounding to nearest even, denormals flushed. The order of those additions is fixed per kernel:
//  - n ≥ kPanelMinTokens (panels): the weights of up to kPackRows rows are repacked per call into
//    panels of 16 rows, column pair i of the 16 rows in the 64 bytes at 64·i (row j's bf16 pair
//    (2i, 2i+1) at 4j; an odd last column pairs with 0). A token's bf16 pair broadcast against it
//    gives 16 rows' products at once; per (token, row) one f32 lane runs over the pairs in order.
//  - n < kPanelMinTokens (in place, decode): per (token, row) 16 lanes, lane l over the pairs
//    16s + l in order, then hsum's order (tile_bf16dot).
// Within each regime a token's result does not depend on n, the other tokens or the threads
// (bitwise); between them it does (the last bits): the one exception to matmul's batch
// invariance, taken because the panel order costs decode a 16×16 transpose per 32 columns
// (measured 20% slower decode) and the in-place order costs prefill a third of its speed.

inline __m512bh as_bh(__m512i v) {
  __m512bh b;
  __builtin_memcpy(&b, &v, sizeof b);  // a bit cast (the vector types' element types differ by compiler)
  return b;
}

// The 16×16 transpose of 32-bit elements: v[j] holds row j's pairs 0..15; afterwards v[i]
// holds pair i of rows 0..15.
inline void transpose16x32(__m512i* v) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {  // u[4k + j]: column 4L + j of rows 4k..4k+3 in 128-bit lane L
    u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i lo01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), hi01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
    const __m512i lo23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i hi23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    v[j] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);
    v[4 + j] = _mm512_shuffle_i32x4(lo01, lo23, 0xdd);
    v[8 + j] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);
    v[12 + j] = _mm512_shuffle_i32x4(hi01, hi23, 0xdd);
  }
}

// Column pairs [first, (cols + 1) / 2) of rows a.w .. (m ≤ 16 of them) into panel layout at out.
inline void pack_bf16_tail(const KernelArgs& a, int64_t m, int64_t first, uint8_t* out) {
  const int64_t cols = a.cols, pairs = (cols + 1) / 2;
  for (int64_t i = first; i < pairs; ++i) {
    uint32_t lanes[16];
    for (int j = 0; j < 16; ++j) {
      uint16_t lo = 0, hi = 0;
      if (j < m) {
        __builtin_memcpy(&lo, a.w + j * a.w_stride + 4 * i, 2);
        if (2 * i + 1 < cols) __builtin_memcpy(&hi, a.w + j * a.w_stride + 4 * i + 2, 2);
      }
      lanes[j] = lo | static_cast<uint32_t>(hi) << 16;
    }
    __builtin_memcpy(out + 64 * (i - first), lanes, 64);
  }
}

// Rows [r0, r0 + m), m ≤ 16, into one panel (rows past m: zeros).
inline void pack_bf16_panel(const KernelArgs& a, int64_t r0, int64_t m, uint8_t* out) {
  const int64_t steps = a.cols / 32;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 16, steps > 0 ? steps : 1);
  for (int64_t s = 0; s < steps; ++s) {
    pf.step(w, s);
    __m512i v[16];
    for (int j = 0; j < 16; ++j)
      v[j] = j < m ? _mm512_loadu_si512(w + j * a.w_stride + 64 * s) : _mm512_setzero_si512();
    transpose16x32(v);
    for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out + 64 * (16 * s + i), v[i]);
  }
  KernelArgs sub = a;
  sub.w = w;
  pack_bf16_tail(sub, m, 16 * steps, out + 64 * 16 * steps);
}

// y for T tokens from t0 and NP panels (16·NP rows from r0, of which `valid` exist).
template <int T, int NP>
inline void panel_tile_bf16(const KernelArgs& a, const uint8_t* pan, int64_t pan_stride, int64_t t0, int64_t r0,
                            int64_t valid) {
  const int64_t pairs = (a.cols + 1) / 2, xs = bf16_x_stride(a.cols);
  const uint16_t* x = a.xb + t0 * xs;
  __m512 acc[T][NP];
  for (int t = 0; t < T; ++t)
    for (int p = 0; p < NP; ++p) acc[t][p] = _mm512_setzero_ps();
  // Packed weights stream from memory, NP panels as NP streams: the first token tile prefetches
  // each kAhead lines ahead of where it reads (the last panel's stream runs on into the next
  // rows' first panel). Measured on Zen 5 (bench_ops_matmul --read, n = 1, 2 threads, from DRAM)
  // against fetching the whole next 16·NP rows ahead (128 KiB at 1024 columns, the first block of
  // every chunk cold): 73–86% of a plain read of the same bytes → 96–134%.
  constexpr int64_t kAhead = 16;
  const int64_t ahead_end =
      a.packed && t0 == 0 && !(g_kernel_variant & 1) ? (min64(a.rows, r0 + 32 * NP) - r0) * a.w_stride : 0;
  for (int64_t i = 0; i < pairs; ++i) {
    for (int p = 0; p < NP; ++p) {
      const int64_t o = p * pan_stride + 64 * (i + kAhead);
      if (o < ahead_end) _mm_prefetch(reinterpret_cast<const char*>(pan + o), _MM_HINT_T0);
    }
    __m512i wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = _mm512_loadu_si512(pan + p * pan_stride + 64 * i);
    for (int t = 0; t < T; ++t) {
      int32_t x2;
      __builtin_memcpy(&x2, x + t * xs + 2 * i, 4);
      const __m512i xv = _mm512_set1_epi32(x2);
      for (int p = 0; p < NP; ++p) acc[t][p] = _mm512_dpbf16_ps(acc[t][p], as_bh(xv), as_bh(wv[p]));
    }
  }
  for (int t = 0; t < T; ++t) {
    float* yt = a.y + (t0 + t) * a.y_stride + r0;
    for (int p = 0; p < NP; ++p) {
      const int64_t left = valid - 16 * p;
      if (left >= 16) {
        _mm512_storeu_ps(yt + 16 * p, acc[t][p]);
      } else if (left > 0) {
        _mm512_mask_storeu_ps(yt + 16 * p, static_cast<__mmask16>((1u << left) - 1), acc[t][p]);
      }
    }
  }
}

// Few tokens (n < kPanelMinTokens), straight from the weights' layout: per (token, row) a
// 16-lane accumulator over the columns in order, 32 per step (lane l takes columns 32s + 2l and
// 32s + 2l + 1), then hsum's order, then the columns past the last multiple of 32 one by one.
template <int T, int R>
inline void tile_bf16dot(const KernelArgs& a, int64_t t0, int64_t r0) {
  const int64_t cols = a.cols, xs = bf16_x_stride(cols);
  const uint16_t* x = a.xb + t0 * xs;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const int pf_rows = prefetch_rows<R>(a, r0);
  __m512 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = _mm512_setzero_ps();
  const int64_t cv = cols / 32 * 32;
  for (int64_t i = 0; i < cv; i += 32) {
    for (int r = 0; r < pf_rows; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(w + (R + r) * a.w_stride + i * 2), _MM_HINT_T0);
    __m512i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + r * a.w_stride + i * 2);
    for (int t = 0; t < T; ++t) {
      const __m512i xv = _mm512_loadu_si512(x + t * xs + i);
      for (int r = 0; r < R; ++r) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], as_bh(xv), as_bh(wv[r]));
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float s = V::hsum(acc[t][r]);
      for (int64_t i = cv; i < cols; ++i) {
        const uint32_t xu = static_cast<uint32_t>(x[t * xs + i]) << 16;
        float xf;
        __builtin_memcpy(&xf, &xu, 4);
        s += xf * load_bf16_scalar(w + r * a.w_stride + 2 * i);
      }
      a.y[(t0 + t) * a.y_stride + r0 + r] = s;
    }
  }
}

template <int T>
inline void sweep_rows_bf16dot(const KernelArgs& a, int64_t t0, int64_t rb, int64_t re) {
  constexpr int R = V::kFloatRows[T];
  int64_t r = rb;
  for (; r + R <= re; r += R) tile_bf16dot<T, R>(a, t0, r);
  for (; r < re; ++r) tile_bf16dot<T, 1>(a, t0, r);
}

template <int T>
inline void panel_tokens_bf16(const KernelArgs& a, const uint8_t* pan, int64_t pan_stride, int64_t np, int64_t t0,
                              int64_t r0, int64_t m) {
  switch (np) {
    case 4: panel_tile_bf16<T, 4>(a, pan, pan_stride, t0, r0, m); return;
    case 3: panel_tile_bf16<T, 3>(a, pan, pan_stride, t0, r0, m); return;
    case 2: panel_tile_bf16<T, 2>(a, pan, pan_stride, t0, r0, m); return;
    default: panel_tile_bf16<T, 1>(a, pan, pan_stride, t0, r0, m); return;
  }
}

}  // namespace

void rows(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) { rows_any(a, r0, r1, scratch); }

void rows_bf16dot(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
  if (a.dtype != DType::kBF16) {
    rows_any(a, r0, r1, scratch);
    return;
  }
  static_assert(kPackRows == 64, "a row block is four 16-row panels");
  const int64_t pan_stride = (a.cols + 1) / 2 * 64;
  if (a.packed) {  // the panels were made at load: one order for every n (r0, r1: multiples of 16)
    for (int64_t rb = r0; rb < r1; rb += kPackRows) {
      const int64_t m = min64(kPackRows, r1 - rb);
      const uint8_t* pan = a.w + rb * a.w_stride;
      token_tiles(0, a.n,
                  [&]<int T>(TokTile<T>, int64_t t) { panel_tokens_bf16<T>(a, pan, pan_stride, m / 16, t, rb, m); });
    }
    return;
  }
  if (a.n < kPanelMinTokens || scratch == nullptr) {
    for (int64_t rb = r0; rb < r1; rb += 16) {
      const int64_t re = min64(r1, rb + 16);
      token_tiles(0, a.n, [&]<int T>(TokTile<T>, int64_t t) { sweep_rows_bf16dot<T>(a, t, rb, re); });
    }
    return;
  }
  for (int64_t rb = r0; rb < r1; rb += kPackRows) {
    const int64_t m = min64(kPackRows, r1 - rb), np = (m + 15) / 16;
    for (int64_t p = 0; p < np; ++p) pack_bf16_panel(a, rb + 16 * p, min64(16, m - 16 * p), scratch + p * pan_stride);
    token_tiles(0, a.n,
                [&]<int T>(TokTile<T>, int64_t t) { panel_tokens_bf16<T>(a, scratch, pan_stride, np, t, rb, m); });
  }
}

// f32_to_bf16's rounding, 16 at a time: u + 0x7fff + (bit 16 of u), the top half; NaN: the top
// half with the quiet bit set.
void round_bf16(const float* x, int64_t count, uint16_t* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < count; ++i) {
    uint32_t u;
    __builtin_memcpy(&u, x + i, 4);
    out[i] = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40)
                                             : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

}  // namespace gb::ops::avx512
#endif

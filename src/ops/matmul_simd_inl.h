// The SIMD matmul kernels, written once against a small vector vocabulary V (load / convert /
// fma / reduce / int8 block dot) and instantiated per ISA: matmul_avx2.cc and matmul_avx512.cc
// include this file inside their own namespace after defining V, so each ISA gets its own
// copies (no symbol is shared between files compiled with different -m flags).
// No include guard on purpose.

// ---- helpers that must not come from baseline headers (see matmul_kernels.h) ----

inline float load_f16_scalar(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float load_bf16_scalar(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

template <DType D>
inline float weight_scalar(const uint8_t* row, int64_t i) {
  if constexpr (D == DType::kF32) {
    float f;
    __builtin_memcpy(&f, row + 4 * i, 4);
    return f;
  } else if constexpr (D == DType::kF16) {
    return load_f16_scalar(row + 2 * i);
  } else {
    return load_bf16_scalar(row + 2 * i);
  }
}

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// How many rows of the next R-row tile exist to prefetch (0 with prefetch switched off for an
// A/B run). Prefetching past the matrix is not just waste: addresses beyond a buffer may be
// unmapped, and each such prefetch costs a page walk (measured: 10x slower K-quant path).
template <int R>
inline int prefetch_rows(const KernelArgs& a, int64_t r0) {
  if (g_kernel_variant & 1) return 0;
  const int64_t left = a.rows - (r0 + R);
  return left <= 0 ? 0 : left < R ? static_cast<int>(left) : R;
}

// ggml's hsum_float_8, so that the Q8_0/Q4_0 sums reduce in the same order as llama.cpp's AVX2.
inline float hsum8(__m256 x) {
  __m128 r = _mm256_extractf128_ps(x, 1);
  r = _mm_add_ps(r, _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// ---- float-weight family (F32 / F16 / BF16): weights widened to f32, f32 FMA ----

// BF16 weights, 2·kLanes per step: one load of 2·kLanes bf16 values; the even ones widen to f32
// by a shift, the odd ones by masking off the low half, each multiplied with the matching half
// of the de-interleaved activations (KernelArgs::xp). Half the widening work of a zero-extend.
template <int T, int R>
inline void tile_bf16(const KernelArgs& a, int64_t t0, int64_t r0) {
  using F = typename V::F;
  using I = typename V::I;
  constexpr int64_t kStep = 2 * V::kLanes;
  const int64_t cols = a.cols;
  const float* x = a.x + t0 * cols;
  const float* xp = a.xp + t0 * cols;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const int pf_rows = prefetch_rows<R>(a, r0);
  F acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = V::zero();
  const int64_t cv = cols / kStep * kStep;
  constexpr int64_t kLinesEvery = 64 / (kStep * 2) > 0 ? 64 / (kStep * 2) : 1;
  for (int64_t i = 0; i < cv; i += kStep) {
    if ((i / kStep) % kLinesEvery == 0) {
      for (int r = 0; r < pf_rows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + (R + r) * a.w_stride + i * 2), _MM_HINT_T0);
    }
    F we[R], wo[R];
    for (int r = 0; r < R; ++r) {
      const I v = V::load_i(w + r * a.w_stride + i * 2);
      we[r] = V::bf16_even(v);
      wo[r] = V::bf16_odd(v);
    }
    for (int t = 0; t < T; ++t) {
      const F xe = V::load_x(xp + t * cols + i);
      const F xo = V::load_x(xp + t * cols + i + V::kLanes);
      for (int r = 0; r < R; ++r) {
        acc[t][r] = V::fma(xe, we[r], acc[t][r]);
        acc[t][r] = V::fma(xo, wo[r], acc[t][r]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float s = V::hsum(acc[t][r]);
      for (int64_t i = cv; i < cols; ++i) s += x[t * cols + i] * load_bf16_scalar(w + r * a.w_stride + 2 * i);
      a.y[(t0 + t) * a.y_stride + r0 + r] = s;
    }
  }
}

// y[t0..t0+T, r0..r0+R] over all cols. Each (token, row) pair has one vector accumulator that
// runs over the columns in order, so its result does not depend on the tile it was computed in
// (T, R, thread split) — the basis of batch and thread invariance.
template <DType D, int T, int R>
inline void tile_float(const KernelArgs& a, int64_t t0, int64_t r0) {
  using F = typename V::F;
  const int64_t cols = a.cols;
  const float* x = a.x + t0 * cols;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const int pf_rows = prefetch_rows<R>(a, r0);
  F acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = V::zero();
  if constexpr (D == DType::kBF16) {
    if ((g_kernel_variant & 2) == 0) {
      tile_bf16<T, R>(a, t0, r0);
      return;
    }
  }
  const int64_t cv = cols / V::kLanes * V::kLanes;
  constexpr int64_t kEsize = D == DType::kF32 ? 4 : 2;
  constexpr int64_t kLinesEvery = 64 / (V::kLanes * kEsize) > 0 ? 64 / (V::kLanes * kEsize) : 1;
  for (int64_t i = 0; i < cv; i += V::kLanes) {
    if ((i / V::kLanes) % kLinesEvery == 0) {
      for (int r = 0; r < pf_rows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w + (R + r) * a.w_stride + i * kEsize), _MM_HINT_T0);
    }
    F wv[R];
    for (int r = 0; r < R; ++r) wv[r] = V::template load_w<D>(w + r * a.w_stride, i);
    for (int t = 0; t < T; ++t) {
      const F xv = V::load_x(x + t * cols + i);
      for (int r = 0; r < R; ++r) acc[t][r] = V::fma(xv, wv[r], acc[t][r]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      float s = V::hsum(acc[t][r]);
      for (int64_t i = cv; i < cols; ++i) s += x[t * cols + i] * weight_scalar<D>(w + r * a.w_stride, i);
      a.y[(t0 + t) * a.y_stride + r0 + r] = s;
    }
  }
}

// ---- quantized-weight family (Q8_0 / Q4_0) against Q8_0-rounded activations ----

// The 32 weight codes of one block as maddubs wants them: Q8_0 signed (the sign moves onto the
// activations), Q4_0 as unsigned nibbles 0..15 (its -8 offset comes from KernelArgs::xc);
// low nibbles are elements 0..15.
template <DType D>
inline __m256i load_wq(const uint8_t* qs) {
  if constexpr (D == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  } else {
    const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i bytes = _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
    return _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f));
  }
}

template <DType D>
inline constexpr int64_t block_bytes() {
  return D == DType::kQ8_0 ? 34 : 18;
}

// f16 block scale broadcast to all lanes (vpbroadcastw + vcvtph2ps: fewer ops than scalar
// conversion and a broadcast).
inline __m256 load_scale8(const uint8_t* p) {
  int16_t h;
  __builtin_memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(h));
}

// Same sums as ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 on AVX2: per block, int32 lanes of the exact
// products of 4 consecutive elements, converted to f32, times the f32 product d_w·d_x, fma'd into
// one 8-lane accumulator; hsum8 at the end. The lanes are computed differently (Q8_0:
// |x|·sign(w, x); Q4_0: q·x - 8·Σx) but are the same integers, so the results match ggml's bitwise.
template <DType D, int T, int R>
inline void tile_q(const KernelArgs& a, int64_t t0, int64_t r0) {
  const int64_t cols = a.cols;
  const int64_t nb = cols / kQBlock;
  const int8_t* xq = a.xq + t0 * cols;
  const uint8_t* xa = a.xa + t0 * cols;
  const int32_t* xc = a.xc + t0 * (cols / 4);
  const float* xd = a.xd + t0 * nb;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const int pf_rows = prefetch_rows<R>(a, r0);
  __m256 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // Prefetch the next tile's rows at the same column: R rows ahead (several KB) hides DRAM
    // latency that the hardware prefetcher, juggling R interleaved streams, does not.
    for (int r = 0; r < pf_rows; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(w + (R + r) * a.w_stride + b * block_bytes<D>()), _MM_HINT_T0);
    __m256i wq[R];
    __m256 dw[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = w + r * a.w_stride + b * block_bytes<D>();
      wq[r] = load_wq<D>(blk + 2);
      dw[r] = load_scale8(blk);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * cols + b * kQBlock));
      const __m256 dx = _mm256_set1_ps(xd[t * nb + b]);
      for (int r = 0; r < R; ++r) {
        __m256i p;
        if constexpr (D == DType::kQ8_0) {
          const __m256i xabs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa + t * cols + b * kQBlock));
          p = V::dot_block(xabs, _mm256_sign_epi8(wq[r], xv));
        } else {
          const __m256i off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + t * (cols / 4) + b * 8));
          p = _mm256_add_epi32(V::dot_block(wq[r], xv), off);
        }
        acc[t][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[t][r]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.y_stride + r0 + r] = hsum8(acc[t][r]);
}

// ---- drivers ----

template <DType D, int T>
inline void sweep_rows(const KernelArgs& a, int64_t t0, int64_t rb, int64_t re) {
  constexpr bool kQuant = D == DType::kQ8_0 || D == DType::kQ4_0;
  constexpr int R = kQuant ? V::kQuantRows[T] : V::kFloatRows[T];
  int64_t r = rb;
  for (; r + R <= re; r += R) {
    if constexpr (kQuant) {
      tile_q<D, T, R>(a, t0, r);
    } else {
      tile_float<D, T, R>(a, t0, r);
    }
  }
  for (; r < re; ++r) {
    if constexpr (kQuant) {
      tile_q<D, T, 1>(a, t0, r);
    } else {
      tile_float<D, T, 1>(a, t0, r);
    }
  }
}

// Cache blocking for prefill: a chunk of tokens whose activations stay in L2 is swept by
// blocks of kRowBlock weight rows, so each weight block is loaded once per chunk and reused
// by every 4-token tile of it. Decode (n <= 4) degenerates to one pass streaming each row once.
inline constexpr int64_t kActChunkBytes = 160 * 1024;
inline constexpr int64_t kRowBlock = 16;

template <DType D>
inline void rows_dtype(const KernelArgs& a, int64_t r0, int64_t r1) {
  constexpr bool kQuant = D == DType::kQ8_0 || D == DType::kQ4_0;
  const int64_t act_bytes = kQuant ? a.cols : a.cols * 4;
  int64_t tb = kActChunkBytes / (act_bytes > 0 ? act_bytes : 1);
  tb = tb < 4 ? 4 : tb / 4 * 4;
  for (int64_t t0 = 0; t0 < a.n; t0 += tb) {
    const int64_t t1 = min64(a.n, t0 + tb);
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t re = min64(r1, rb + kRowBlock);
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) sweep_rows<D, 4>(a, t, rb, re);
      switch (t1 - t) {
        case 3: sweep_rows<D, 3>(a, t, rb, re); break;
        case 2: sweep_rows<D, 2>(a, t, rb, re); break;
        case 1: sweep_rows<D, 1>(a, t, rb, re); break;
        default: break;
      }
    }
  }
}

inline void rows_any(const KernelArgs& a, int64_t r0, int64_t r1) {
  switch (a.dtype) {
    case DType::kF32: rows_dtype<DType::kF32>(a, r0, r1); return;
    case DType::kF16: rows_dtype<DType::kF16>(a, r0, r1); return;
    case DType::kBF16: rows_dtype<DType::kBF16>(a, r0, r1); return;
    case DType::kQ8_0: rows_dtype<DType::kQ8_0>(a, r0, r1); return;
    case DType::kQ4_0: rows_dtype<DType::kQ4_0>(a, r0, r1); return;
    default: return;  // the dispatcher never passes other dtypes
  }
}

// ---- K-quant family (Q4_K / Q6_K) against Q8_K-rounded activations ----
//
// The numerics are defined by scalar::rows_k (matmul.cc): per super-block of 256, eight int32
// lanes, lane m holding the exact integer Σ over the 8 chunks k of 32 elements of
// scale(k, m)·Σ_{e=4m..4m+3} code·x (what maddubs + madd, or maddubs + vpdpwssd, produce for a
// chunk), Q6_K's -32 offset folded in as -32·(sc[2m]·bsum[2m] + sc[2m+1]·bsum[2m+1]) and Q4_K's
// mins as a second lane vector min_m·Σ(codes of sub-block m); then per lane
// acc = fma(d_w·d_x, lane, acc) (Q4_K: acc = fma(-(dmin_w·d_x), min lane, acc)) and hsum8.
// Every ISA computes the same integers and the same f32 operations, so the bits agree.

inline constexpr int64_t k_block_bytes(DType d) { return d == DType::kQ4_K ? 144 : 210; }

// One row's super-block as madd operands.
struct KScales {
  __m256i sc[8];  // chunk k: 16 int16 scales (Q4_K: all sc_k; Q6_K: 8 × sc[2k], then 8 × sc[2k+1])
  __m256i extra;  // Q4_K: min_m as int32 in lane m; Q6_K: the 16 scales as int16 (offset term)
  float d, dmin;
};

inline void k_scales_q4(const uint8_t* blk, KScales* s) {
  uint32_t u[3];
  __builtin_memcpy(u, blk + 4, 12);
  // 6-bit scales and mins (ggml's get_scale_min_k4), four at a time per 32-bit word.
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, mn_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  const __m128i v = _mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo), static_cast<int>(sc_hi),
                                  static_cast<int>(sc_lo));  // bytes: sc0..7, mn0..7
  const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(v));
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k)
    s->sc[k] = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * k)));
  s->extra = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
  s->d = load_f16_scalar(blk);
  s->dmin = load_f16_scalar(blk + 2);
}

inline void k_scales_q6(const uint8_t* blk, KScales* s) {
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
  s->extra = sc16;
  const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);  // sc0..7 in both halves
  const __m256i hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);  // sc8..15 in both halves
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const int kk = k % 4;
    const __m256i mask = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>((4 * kk + 2) | (4 * kk + 3) << 8)),
                                          _mm_set1_epi16(static_cast<short>((4 * kk) | (4 * kk + 1) << 8)));
    s->sc[k] = _mm256_shuffle_epi8(k < 4 ? lo : hi, mask);
  }
  s->d = load_f16_scalar(blk + 208);
  s->dmin = 0.0f;
}

// The 32 unsigned codes of chunk k (elements 32k..32k+31) of a super-block.
template <DType D>
inline __m256i k_codes(const uint8_t* blk, int k) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  if constexpr (D == DType::kQ4_K) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * (k / 2)));
    if (k % 2) v = _mm256_srli_epi16(v, 4);
    return _mm256_and_si256(v, m4);
  } else {
    const int h = k / 4, g = k % 4;
    __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (g & 1)));
    if (g >= 2) lo = _mm256_srli_epi16(lo, 4);
    lo = _mm256_and_si256(lo, m4);
    __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    hb = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * g), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
  }
}

template <DType D, int T, int R>
inline void tile_k(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kBB = k_block_bytes(D);
  const int64_t cols = a.cols;
  const int64_t nb = cols / kKBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const int pf_rows = prefetch_rows<R>(a, r0);
  __m256 acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // The next tile's rows at the same super-block (every cache line it touches).
    for (int r = 0; r < pf_rows; ++r) {
      const char* p = reinterpret_cast<const char*>(w + (R + r) * a.w_stride + b * kBB);
      for (int64_t o = 0; o < kBB; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
      _mm_prefetch(p + kBB - 1, _MM_HINT_T0);
    }
    const uint8_t* blk[R];
    KScales ks[R];
    for (int r = 0; r < R; ++r) {
      blk[r] = w + r * a.w_stride + b * kBB;
      if constexpr (D == DType::kQ4_K) {
        k_scales_q4(blk[r], &ks[r]);
      } else {
        k_scales_q6(blk[r], &ks[r]);
      }
    }
    __m256i sumi[T][R];
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) sumi[t][r] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m256i wq[R];
      for (int r = 0; r < R; ++r) wq[r] = k_codes<D>(blk[r], k);
      for (int t = 0; t < T; ++t) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.kq + (t0 + t) * cols + b * kKBlock + 32 * k));
        for (int r = 0; r < R; ++r) sumi[t][r] = V::kmadd(sumi[t][r], _mm256_maddubs_epi16(wq[r], xv), ks[r].sc[k]);
      }
    }
    for (int t = 0; t < T; ++t) {
      const float dx = a.kd[(t0 + t) * nb + b];
      if constexpr (D == DType::kQ4_K) {
        const __m256i bs =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.kb32 + (t0 + t) * (cols / 32) + b * 8));
        for (int r = 0; r < R; ++r) {
          // min_m (high half 0) times the int16-ranged code sum of sub-block m.
          const __m256i mins = _mm256_madd_epi16(ks[r].extra, bs);
          acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(ks[r].d * dx), _mm256_cvtepi32_ps(sumi[t][r]), acc[t][r]);
          acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(-(ks[r].dmin * dx)), _mm256_cvtepi32_ps(mins), acc[t][r]);
        }
      } else {
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.kb + (t0 + t) * (cols / 16) + b * 16));
        for (int r = 0; r < R; ++r) {
          const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(ks[r].extra, bs), 5);
          acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(ks[r].d * dx),
                                      _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t][r], off)), acc[t][r]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.y_stride + r0 + r] = hsum8(acc[t][r]);
}

template <DType D, int T>
inline void sweep_rows_k(const KernelArgs& a, int64_t t0, int64_t rb, int64_t re) {
  constexpr int R = V::kKRows[T];
  int64_t r = rb;
  for (; r + R <= re; r += R) tile_k<D, T, R>(a, t0, r);
  for (; r < re; ++r) tile_k<D, T, 1>(a, t0, r);
}

// The same cache blocking as rows_dtype (activations: ~1 byte per element).
template <DType D>
inline void rows_kquant(const KernelArgs& a, int64_t r0, int64_t r1) {
  int64_t tb = kActChunkBytes / (a.cols > 0 ? a.cols : 1);
  tb = tb < 4 ? 4 : tb / 4 * 4;
  for (int64_t t0 = 0; t0 < a.n; t0 += tb) {
    const int64_t t1 = min64(a.n, t0 + tb);
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t re = min64(r1, rb + kRowBlock);
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) sweep_rows_k<D, 4>(a, t, rb, re);
      switch (t1 - t) {
        case 3: sweep_rows_k<D, 3>(a, t, rb, re); break;
        case 2: sweep_rows_k<D, 2>(a, t, rb, re); break;
        case 1: sweep_rows_k<D, 1>(a, t, rb, re); break;
        default: break;
      }
    }
  }
}

inline void rows_k_any(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.dtype == DType::kQ4_K) rows_kquant<DType::kQ4_K>(a, r0, r1);
  if (a.dtype == DType::kQ6_K) rows_kquant<DType::kQ6_K>(a, r0, r1);
}

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

// tile_bf16's software prefetch of its R rows (w: the first), one line per row per 64 bytes of
// columns: each row's stream kStreamAhead bytes ahead in its own row; once that passes the row's
// end, the next R rows' starts (the first `rows` of them, prefetch_rows). The line for column
// byte c is at base + r·stride + c: base moves once, from w + ahead to the next rows. Measured
// on Zen 5, AVX2, 1 token, 2 threads, weights from DRAM, against prefetching the next R rows at
// the same column (16–48 KiB ahead, as tile_float still does): bf16 qkv / up / down / lm_head 91
// / 91 / 93 / 90% of a read of the same bytes → 100 / 99 / 95 / 98% (8 or 32 lines ahead: less);
// Qwen3-0.6B bf16 decode +6–8% (tg64 37.3–38.5 → 39.7–40.7 t/s, 3 interleaved pairs). F16
// through tile_float measured 8–10% slower with it on AVX2 and the same on AVX-512: not used.
inline constexpr int64_t kStreamAhead = 16 * 64;
template <int R>
struct RowStreamPrefetch {
  const uint8_t* base;
  int rows;
  int64_t turn;  // from this column byte on, base points into the next rows
  const uint8_t* next_base;
  int next_rows;
  RowStreamPrefetch(const KernelArgs& a, const uint8_t* w, int pf_rows) {
    const bool off = (g_kernel_variant & 1) != 0;
    const bool long_rows = a.w_stride > kStreamAhead;  // else: the next rows at the same column
    base = w + kStreamAhead;
    rows = off ? 0 : R;
    turn = long_rows ? a.w_stride - kStreamAhead : 0;
    next_base = w + R * a.w_stride + (long_rows ? kStreamAhead - a.w_stride : 0);
    next_rows = pf_rows;  // never past the matrix's last row
  }
  void at(int64_t c, int64_t stride) {
    if (c >= turn) base = next_base, rows = next_rows;
    for (int r = 0; r < rows; ++r) _mm_prefetch(reinterpret_cast<const char*>(base + r * stride + c), _MM_HINT_T0);
  }
};

// Token tiles: f(TokTile<4>{}, t) for every 4 tokens of [t0, t1), then one tile of the 3, 2 or 1
// left (T is a template parameter of the tile kernels).
template <int T>
struct TokTile {};
template <typename F>
inline void token_tiles(int64_t t0, int64_t t1, const F& f) {
  int64_t t = t0;
  for (; t + 4 <= t1; t += 4) f(TokTile<4>{}, t);
  switch (t1 - t) {
    case 3: f(TokTile<3>{}, t); break;
    case 2: f(TokTile<2>{}, t); break;
    case 1: f(TokTile<1>{}, t); break;
    default: break;
  }
}

// Software prefetch of the next group of rows while a group of R rows is swept block by block:
// the next rows are contiguous (R·w_stride bytes), so they are fetched in address order, spread
// evenly over the current group's blocks, one cache line each. Measured against prefetching
// each next row at the current column (R interleaved streams, each line touched about twice):
// 2x the decode GB/s for Q4_0 and Q8_0 on Zen 4 (bench_ops_matmul --variant 1 switches it off).
// (For BF16's 8-row tiles the same scheme measured 0.65x of the per-row one, so they keep theirs.)
//
// How far ahead: one group, but in decode-shaped calls (kDecodeShapedTokens) at most
// kDecodeAheadBytes — a group of long rows (down's 3072 columns: 13.8 KB of Q4_0 per 8 rows) is
// fetched that far into itself, then on into the next. Measured on Zen 5 (Qwen3-0.6B tg64, 2
// threads, medians of interleaved pairs, twenty-second pass): the cap everywhere, 6 pairs, q4_0
// +2.4%, q8_0 +2.1%, q4_k_m ±0; as here, 4 pairs, q4_0 +0.7%, q8_0 +2.6%, q4_k_m +4.5%, and on
// AVX2 code (3 pairs) q4_0 +3.9%, q8_0 +1.6%. In prefill the cap measured 0…−12%: not applied
// there. (The group after next instead measured 4–20% slower decode on Zen 4; 2 or 3 groups ahead
// also slower on Zen 5.)
inline constexpr int64_t kDecodeAheadBytes = 4608;
struct NextRowsPrefetch {
  int64_t start, per_step, end;  // byte offsets from the current group's first row
  // The group of `rows` rows from r0 is swept in `steps` steps.
  NextRowsPrefetch(const KernelArgs& a, int64_t r0, int rows, int64_t steps) {
    const int64_t left = (g_kernel_variant & 1) ? 0 : a.rows - (r0 + rows);
    const int64_t n = left <= 0 ? 0 : min64(left, rows);
    const int64_t group = rows * a.w_stride;
    start = a.n <= kDecodeShapedTokens ? min64(group, kDecodeAheadBytes) : group;
    per_step = (group + steps - 1) / steps;
    end = n > 0 ? group + n * a.w_stride : 0;
  }
  void step(const uint8_t* w, int64_t i) const {
    for (int64_t o = start + i * per_step, e = min64(o + per_step, end); o < e; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + o), _MM_HINT_T0);
  }
  // step() where a step is kBytes, known at compile time (the packed kernels: a step is one block
  // of the group's rows): a fixed run of prefetches, no loop bounds to work out per block. Its
  // last run may reach up to 63 bytes past the next rows (a prefetch never faults). In cache, Q4_0
  // decode (3 prefetches a block of 8 rows) ran 12% faster than with step()'s loop (Zen 5, 1 thread).
  template <int64_t kBytes>
  void step(const uint8_t* w, int64_t i) const {
    const int64_t o = start + i * kBytes;
    if (o >= end) return;
    for (int64_t k = 0; k < kBytes; k += 64) _mm_prefetch(reinterpret_cast<const char*>(w + o + k), _MM_HINT_T0);
  }
};

// Keeps v in a register: an empty asm that claims to change it. Without it GCC 12 folds a
// vector load into every FMA that uses it (T·R loads per step instead of T), and the float
// tiles become load-bound. Measured on Zen 5 (up, n = 512, 1 thread), AVX2: BF16 36.6 → 33.1
// ms, F16 41.9 → 36.6, F32 55.8 → 48.9; AVX-512 unchanged. (Rows per tile 3 instead of 2 at 4
// tokens, or row blocks of 8, 24 or 32 rows, measured no better.)
template <typename X>
inline void in_register(X& v) {
  __asm__("" : "+v"(v));
}

// The horizontal sum of 8 f32 lanes (the float kernels' final reduction).
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
  RowStreamPrefetch<R> pf(a, w, prefetch_rows<R>(a, r0));
  F acc[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = V::zero();
  const int64_t cv = cols / kStep * kStep;
  constexpr int64_t kLinesEvery = 64 / (kStep * 2) > 0 ? 64 / (kStep * 2) : 1;
  for (int64_t i = 0; i < cv; i += kStep) {
    if ((i / kStep) % kLinesEvery == 0) pf.at(i * 2, a.w_stride);
    // The even columns, then the odd ones (the weights loaded again, from L1): measured a little
    // faster than widening both halves at once (AVX2, 3 alternating runs: 35.1–35.5 ms against
    // 36.5–40.3), the same per-accumulator order.
    for (int h = 0; h < 2; ++h) {
      F wh[R];
      for (int r = 0; r < R; ++r) {
        const I v = V::load_i(w + r * a.w_stride + i * 2);
        wh[r] = h == 0 ? V::bf16_even(v) : V::bf16_odd(v);
      }
      for (int t = 0; t < T; ++t) {
        F xv = V::load_x(xp + t * cols + i + h * V::kLanes);
        in_register(xv);
        for (int r = 0; r < R; ++r) acc[t][r] = V::fma(xv, wh[r], acc[t][r]);
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
      F xv = V::load_x(x + t * cols + i);
      in_register(xv);
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

// ---- quantized-weight family (Q8_0 / Q4_0 / Q5_0 / IQ4_NL) against Q8_0-rounded activations ----
//
// The numerics, the same in every kernel and at every ISA level (scalar::rows states them): for
// weight row r, token t and block b, isum = the exact integer dot product of the block's 32 weight
// codes with the token's 32 activation codes (|isum| ≤ 32·127·128 < 2^24, so f32(isum) is exact
// as well); then acc = fma(f32(d_w)·d_x, f32(isum), acc) over the blocks in order, from 0. Since
// isum is exact, how a kernel computes it (maddubs, vpdpbusd, codes offset to unsigned) does not
// matter: every path gives the same bits, whatever n, tile or thread computes the pair.

// Bytes whose mask bits are all set in sel (each byte tested against its own mask byte) as 0x10,
// the others 0: Q5_0's fifth code bits, placed by a byte shuffle of its qh words.
inline __m256i fifth_bits(__m256i sel, __m256i mask) {
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(sel, mask), mask), _mm256_set1_epi8(0x10));
}

// Codes used signed (Q8_0's, IQ4_NL's table levels: + 128 for VNNI's unsigned operand; on AVX2
// |x|·sign(w, x) in place and int16 in the panels, panel_tile_wide) or unsigned (Q4_0 0..15, Q5_0
// 0..31: their −8 / −16 as 8·Σx / 16·Σx).
template <DType D>
inline constexpr bool kSignedCodes = has_signed_codes(D);

// IQ4_NL's 16 levels (ggml's kvalues_iq4nl) in both 128-bit lanes, the vpshufb table from nibbles.
inline __m256i iq4nl_levels() {
  return _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113, -127, -104, -83,
                          -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}

// The 32 weight codes of one block in element order (p: the block's bytes after d): Q8_0 signed,
// Q4_0 as unsigned nibbles 0..15 (the low nibbles are elements 0..15, the high ones 16..31),
// Q5_0 as unsigned 0..31 (Q4_0's nibbles, bit i of the qh word before them as bit 4 of element i),
// IQ4_NL as its signed levels (Q4_0's nibbles looked up), Q4_1 / Q5_1 as Q4_0 / Q5_0 after their
// f16 offset m (which the kernels skip: matmul adds the offsets' term from Weight::mins).
template <DType D>
inline constexpr bool kHasQh = D == DType::kQ5_0 || D == DType::kQ5_1;
template <DType D>
inline constexpr bool kHasM = D == DType::kQ4_1 || D == DType::kQ5_1;

template <DType D>
inline __m256i load_wq(const uint8_t* p) {
  if constexpr (D == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  } else {
    if constexpr (kHasM<D>) p += 2;
    const uint8_t* qs = kHasQh<D> ? p + 4 : p;
    const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i bytes = _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
    const __m256i nib = _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f));
    if constexpr (D == DType::kIQ4_NL) return _mm256_shuffle_epi8(iq4nl_levels(), nib);
    if constexpr (!kHasQh<D>) return nib;
    int32_t qh;
    __builtin_memcpy(&qh, p, 4);
    const __m256i sel =
        _mm256_shuffle_epi8(_mm256_set1_epi32(qh), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2,
                                                                    2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    return _mm256_or_si256(nib, fifth_bits(sel, _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL))));
  }
}

template <DType D>
inline constexpr int64_t block_bytes() {
  return D == DType::kQ8_0 ? 34 : D == DType::kQ5_0 || D == DType::kQ5_1 ? 22 + 2 * kHasM<D> : 18 + 2 * kHasM<D>;
}

// Q4_0 / Q5_0 codes are used unsigned: Σ (w + k)·x = Σ w·x + k·Σx, k = 8 / 16 as log2 k (-1:
// no such term — Q4_1 / Q5_1, whose codes are unsigned as stored).
template <DType D>
inline constexpr int kUnsignedShift = D == DType::kQ4_0   ? 3
                                      : D == DType::kQ5_0 ? 4
                                                          : -1;

// Packed blocks of the nibble types: the 4 code vectors after the 8 rows' d (and m), the qh
// vector after them.
template <DType D>
inline constexpr int64_t kPackedCodes = kHasM<D> ? 32 : 16;
template <DType D>
inline constexpr int64_t kPackedQh = kPackedCodes<D> + 128;

// The f16 block scales of 8 rows (the block at p, rows `stride` bytes apart) as 8 f32 lanes.
inline __m256 load_scales8(const uint8_t* p, int64_t stride) {
  uint16_t h[8];
  for (int j = 0; j < 8; ++j) __builtin_memcpy(&h[j], p + j * stride, 2);
  return _mm256_cvtph_ps(_mm_setr_epi16(
      static_cast<int16_t>(h[0]), static_cast<int16_t>(h[1]), static_cast<int16_t>(h[2]), static_cast<int16_t>(h[3]),
      static_cast<int16_t>(h[4]), static_cast<int16_t>(h[5]), static_cast<int16_t>(h[6]), static_cast<int16_t>(h[7])));
}

// p[j]'s 8 int32 lanes summed, as lane j of the result.
inline __m256i reduce8(const __m256i* p) {
  const __m256i a0 = _mm256_hadd_epi32(p[0], p[1]), a1 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i a2 = _mm256_hadd_epi32(p[4], p[5]), a3 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);  // [p0..p3 | p0..p3] halves
  return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// The 8 int32 lanes of one block's products (4 elements each) of a weight row with a token.
template <DType D>
inline __m256i block_lanes(__m256i wq, __m256i xv, __m256i xabs) {
  if constexpr (kSignedCodes<D>) {
    return V::dot_block(xabs, _mm256_sign_epi8(wq, xv));  // |x|·sign(w, x): unsigned × signed
  } else {
    (void)xabs;
    return V::dot_block(wq, xv);  // nibbles 0..15 × x; the -8 offset is taken off as 8·Σx
  }
}

// Decode-shaped work (few tokens): y for 8 rows [r0, r0 + 8) and T tokens from t0, straight from
// the weights' own layout. Per block: 8 rows' lane vectors reduced to one vector of 8 isums.
template <DType D, int T>
inline void rows8_q(const KernelArgs& a, int64_t t0, int64_t r0) {
  const int64_t cols = a.cols, nb = cols / kQBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const NextRowsPrefetch pf(a, r0, 8, nb);
  for (int64_t b = 0; b < nb; ++b) {
    pf.step(w, b);
    const uint8_t* blk = w + b * block_bytes<D>();
    __m256i wq[8];
    for (int r = 0; r < 8; ++r) wq[r] = load_wq<D>(blk + r * a.w_stride + 2);
    const __m256 dw = load_scales8(blk, a.w_stride);
    for (int t = 0; t < T; ++t) {
      const int64_t tt = t0 + t;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + tt * cols + b * kQBlock));
      const __m256i xabs = _mm256_abs_epi8(xv);
      __m256i p[8];
      for (int r = 0; r < 8; ++r) p[r] = block_lanes<D>(wq[r], xv, xabs);
      __m256i isum = reduce8(p);
      if constexpr (kUnsignedShift<D> >= 0)
        isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(a.xs[tt * nb + b] << kUnsignedShift<D>));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(a.xd[tt * nb + b]));
      acc[t] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

// One row, T tokens (the rows left over after the 8-row groups).
template <DType D, int T>
inline void row1_q(const KernelArgs& a, int64_t t0, int64_t r) {
  const int64_t cols = a.cols, nb = cols / kQBlock;
  const uint8_t* w = a.w + r * a.w_stride;
  float acc[T];
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * block_bytes<D>();
    const __m256i wq = load_wq<D>(blk + 2);
    const float dw = load_f16_scalar(blk);
    for (int t = 0; t < T; ++t) {
      const int64_t tt = t0 + t;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + tt * cols + b * kQBlock));
      int32_t isum = hsum_i32(block_lanes<D>(wq, xv, _mm256_abs_epi8(xv)));
      if constexpr (kUnsignedShift<D> >= 0) isum -= a.xs[tt * nb + b] << kUnsignedShift<D>;
      acc[t] = __builtin_fmaf(dw * a.xd[tt * nb + b], static_cast<float>(isum), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.y_stride + r] = acc[t];
}

// The in-place driver of the quantized types: rows outer, tokens inner, so a group of 8 rows (a
// few KB) stays in L1 while every token passes. rows8(TokTile<T>, t, r) computes rows r..r+7 of
// tokens t..t+T-1, row1(TokTile<T>, t, r) one row (the rows past the last group of 8).
template <typename Rows8, typename Row1>
inline void rows_in_place(const KernelArgs& a, int64_t r0, int64_t r1, const Rows8& rows8, const Row1& row1) {
  for (int64_t rb = r0; rb < r1; rb += 8) {
    const int64_t re = min64(r1, rb + 8);
    token_tiles(0, a.n, [&]<int T>(TokTile<T> tile, int64_t t) {
      if (re - rb == 8) {
        rows8(tile, t, rb);
      } else {
        for (int64_t r = rb; r < re; ++r) row1(tile, t, r);
      }
    });
  }
}

template <DType D>
inline void rows_q_small(const KernelArgs& a, int64_t r0, int64_t r1) {
  rows_in_place(
      a, r0, r1, [&]<int T>(TokTile<T>, int64_t t, int64_t r) { rows8_q<D, T>(a, t, r); },
      [&]<int T>(TokTile<T>, int64_t t, int64_t r) { row1_q<D, T>(a, t, r); });
}

// Prefill-shaped work: the weights of up to kPackRows rows are first repacked into panels of 8
// rows (once per call and row block, in the calling thread's scratch), so that one 32-byte load
// holds 4 consecutive codes of each of 8 rows; a token's 4 codes broadcast against it give the 8
// rows' partial sums in the 8 lanes of one vpdpbusd (maddubs + madd on AVX2), with no horizontal
// reduction; per block, one conversion and one fma per 8 rows. Panel block layout (288 bytes):
// group g = 0..7 at byte 32·g holds row j's codes 4g..4g+3 at bytes 4j..4j+3 (Q4_0: nibbles
// 0..15; Q5_0: 0..31; Q8_0: signed codes, or codes + 128 with VNNI, which wants the unsigned operand there),
// then the 8 rows' scales as f32 at byte 256.

// The correction for codes used unsigned, Σ (w + k)·x = Σ w·x + k·Σx, as log2 k (-1: none).
template <DType D>
inline constexpr int panel_shift() {
  return !kSignedCodes<D> ? kUnsignedShift<D> : (V::kVnni ? 7 : -1);
}

// The 8×8 transpose of 32-bit elements: v[j] holds row j's groups 0..7; afterwards v[g] holds
// group g of rows 0..7.
inline void transpose8x32(__m256i* v) {
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
  v[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
  v[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
  v[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
  v[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
  v[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
  v[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
  v[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
  v[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// Rows [r0, r0 + m), m ≤ 8, into one panel (rows past m: zero codes and scales).
template <DType D>
inline void pack_panel(const KernelArgs& a, int64_t r0, int64_t m, uint8_t* out) {
  const int64_t nb = a.cols / kQBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  for (int64_t b = 0; b < nb; ++b) {
    pf.step(w, b);
    const uint8_t* blk = w + b * block_bytes<D>();
    __m256i v[8];
    uint16_t h[8];
    for (int j = 0; j < 8; ++j) {
      if (j < m) {
        v[j] = load_wq<D>(blk + j * a.w_stride + 2);
        if constexpr (kSignedCodes<D> && V::kVnni) v[j] = _mm256_xor_si256(v[j], _mm256_set1_epi8(-128));
        __builtin_memcpy(&h[j], blk + j * a.w_stride, 2);
      } else {
        v[j] = _mm256_setzero_si256();
        h[j] = 0;
      }
    }
    transpose8x32(v);
    uint8_t* o = out + b * kPanelBlock;
    for (int g = 0; g < 8; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * g), v[g]);
    _mm256_storeu_ps(reinterpret_cast<float*>(o + 256),
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))));
  }
}

// A panel tile's results: acc[t][p] holds rows r0 + 8p .. r0 + 8p + 7 of token t0 + t; rows from
// `valid` on do not exist.
template <int T, int P>
inline void store_panel_tile(const KernelArgs& a, const __m256 (&acc)[T][P], int64_t t0, int64_t r0, int64_t valid) {
  for (int t = 0; t < T; ++t) {
    float* yt = a.y + (t0 + t) * a.y_stride + r0;
    for (int p = 0; p < P; ++p) {
      if (8 * p + 8 <= valid) {
        _mm256_storeu_ps(yt + 8 * p, acc[t][p]);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[t][p]);
        for (int64_t j = 8 * p; j < valid; ++j) yt[j] = tmp[j - 8 * p];
      }
    }
  }
}

// y for T tokens from t0 and P panels (8·P rows from r0, of which `valid` exist) over all blocks.
// Codes unsigned, or signed with VNNI (panel_shift); AVX2 takes signed codes through panel_tile_wide.
template <DType D, int T, int P>
inline void panel_tile(const KernelArgs& a, const uint8_t* pan, int64_t pan_stride, int64_t t0, int64_t r0,
                       int64_t valid) {
  static_assert(!kSignedCodes<D> || V::kVnni);
  const int64_t cols = a.cols, nb = cols / kQBlock;
  constexpr int kShift = panel_shift<D>();
  __m256 acc[T][P];
  for (int t = 0; t < T; ++t)
    for (int p = 0; p < P; ++p) acc[t][p] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = pan + b * kPanelBlock;
    __m256i is[T][P];
    for (int t = 0; t < T; ++t)
      for (int p = 0; p < P; ++p) is[t][p] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      __m256i wv[P];
      for (int p = 0; p < P; ++p)
        wv[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + p * pan_stride + 32 * g));
      for (int t = 0; t < T; ++t) {
        int32_t x4;
        __builtin_memcpy(&x4, a.xq + (t0 + t) * cols + b * kQBlock + 4 * g, 4);
        const __m256i xb = _mm256_set1_epi32(x4);
        for (int p = 0; p < P; ++p) is[t][p] = V::dot_acc(is[t][p], wv[p], xb);
      }
    }
    for (int t = 0; t < T; ++t) {
      const int64_t tb = (t0 + t) * nb + b;
      const __m256 dx = _mm256_set1_ps(a.xd[tb]);
      __m256i corr = _mm256_setzero_si256();
      if constexpr (kShift >= 0) corr = _mm256_set1_epi32(a.xs[tb] << kShift);
      for (int p = 0; p < P; ++p) {
        const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + p * pan_stride + 256));
        const __m256i isum = kShift >= 0 ? _mm256_sub_epi32(is[t][p], corr) : is[t][p];
        acc[t][p] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc[t][p]);
      }
    }
  }
  store_panel_tile<T, P>(a, acc, t0, r0, valid);
}

// The panel driver of the quantized types: per kPackRows rows, pack(r, m, out) repacks m ≤ 8
// rows from r into the panel at out (pan_stride bytes apart); then
// tile(TokTile<T>, TokTile<P>, pan, t, r, valid) computes T tokens from t × P panels from pan
// (rows from r, `valid` of them real): kT tokens × kP panels, then the rest.
//
// kT = kPanelTokens = 4 on both ISAs; kP = 2, except K-quants on AVX2 (V::kPanelsK = 1): 4·2
// int + 4·2 float accumulators spill some of AVX2's 16 YMM registers, and the K-quant tile also
// holds each sub-block's int16 sums and scales. Measured on Zen 5 (bench_ops_matmul --isa avx2,
// up, n = 512, 1 thread, best of runs), against 2 tokens × 2 panels: Q8_0 23.0 → 21.1 ms, Q4_0
// 22.0 → 16.8 ms at 4 × 2 (4 × 1: Q4_0 19.3 ms); Q4_K 19.6 → 17.4 ms at 4 × 2, 17.8–18.0 ms at
// 4 × 1 against 4 × 2's 18.8–19.3 in the same runs (Q6_K 18.1–18.2 vs 18.3–19.3; 5 × 1, 6 × 1,
// 3 × 2 within those, 8 × 1 slower: 23.4 ms). AVX-512 (32 registers): Q4_K 10.5 ms at 4 × 2,
// 12.1 at 4 × 1.
inline constexpr int kPanelTokens = 4;
template <int kT, int kP, typename Pack, typename Tile>
inline void rows_packed(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch, int64_t pan_stride,
                        const Pack& pack, const Tile& tile) {
  for (int64_t rb = r0; rb < r1; rb += kPackRows) {
    const int64_t m = min64(kPackRows, r1 - rb), np = (m + 7) / 8;
    for (int64_t p = 0; p < np; ++p) pack(rb + 8 * p, min64(8, m - 8 * p), scratch + p * pan_stride);
    auto tokens = [&]<int T>(TokTile<T> tt, int64_t t) {
      int64_t p = 0;
      for (; p + kP <= np; p += kP)
        tile(tt, TokTile<kP>{}, scratch + p * pan_stride, t, rb + 8 * p, min64(8 * kP, m - 8 * p));
      for (; p < np; ++p) tile(tt, TokTile<1>{}, scratch + p * pan_stride, t, rb + 8 * p, min64(8, m - 8 * p));
    };
    int64_t t = 0;
    for (; t + kT <= a.n; t += kT) tokens(TokTile<kT>{}, t);
    for (; t < a.n; ++t) tokens(TokTile<1>{}, t);
  }
}

// ---- wide panels: signed codes (Q8_0, IQ4_NL; IQ4_XS: pack_panel_iq4xs_wide) as int16 where
// KernelSet::wide_signed_panels ----
//
// maddubs wants one operand unsigned, so on AVX2 signed codes go in as |x|·sign(w, x): one
// vpsignb per maddubs, which on Zen shares the multiplies' two pipes (Q8_0 panels ran at 137
// GFLOP/s against Q4_0's 189, whose codes are unsigned; precomputing |x| changed nothing).
// Widened to int16 the codes need no trick: one vpmaddwd per 16 products, the multiply count of
// maddubs + madd per 32, and nothing else on those pipes. The panels double (544 bytes per block
// of 8 rows) and stay in L2; the activations are widened once per call (KernelArgs::xw).
// Block layout: vector h = 0..15 at byte 32·h holds row j's codes 2h, 2h+1 as int16 at bytes
// 4j..4j+3; the 8 rows' scales as f32 at byte 512.
// A group vector (row j's 4 signed codes at bytes 4j..4j+3) as two wide vectors: *first holds
// each row's first pair as int16 (row j at 4j), *second its second pair.
inline void widen_group(__m256i v, __m256i* first, __m256i* second) {
  // Rows 0..3 (lo) and 4..7 (hi) as int16, each 32-bit lane one pair; then the first pairs of
  // rows 0..3 in the low half, the second pairs in the high half.
  const __m256i pairs_by_row = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i lo = _mm256_permutevar8x32_epi32(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), pairs_by_row);
  const __m256i hi = _mm256_permutevar8x32_epi32(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)), pairs_by_row);
  *first = _mm256_permute2x128_si256(lo, hi, 0x20);
  *second = _mm256_permute2x128_si256(lo, hi, 0x31);
}

inline void widen_panel(const uint8_t* in, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = in + b * kPanelBlock;
    uint8_t* o = out + b * kPanelBlockWide;
    for (int g = 0; g < 8; ++g) {
      __m256i first, second;
      widen_group(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * g)), &first, &second);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64 * g), first);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64 * g + 32), second);
    }
    __builtin_memcpy(o + 512, p + 256, 32);
  }
}

// One block's integer sums of a T-token × P-panel tile over wide panels (pb: the block of the
// first panel, xb: the tile's first token's pairs of the block, n_h: the block's pairs): is[t][p]
// = Σ_h madd(vector h of panel p, token t's pair h broadcast).
template <int T, int P>
inline void wide_sums(const uint8_t* pb, int64_t pan_stride, const int16_t* xb, int64_t n_h, __m256i (&is)[T][P]) {
  if constexpr (T == 4 && P == 2) {
    // The main tile in assembly: 8 sums, 2 weight vectors, a broadcast and a product in 12 of
    // the 16 YMM registers. Written with intrinsics, GCC 12 adds each product into a fresh
    // register and copies it back, and the copies spill sums to the stack: 100–155 GFLOP/s
    // depending on the surrounding code, against 160–163 here (Q8_0, 512 tokens, 1 thread).
    __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00,
            w0, w1, x, prod;
    const uint8_t* w = pb;
    const int16_t* xh = xb;
    int64_t h = n_h;
    __asm__(
        "1:\n\t"
        "vmovdqu (%[w]), %[w0]\n\t"
        "vmovdqu (%[w],%[stride]), %[w1]\n\t"
        "vpbroadcastd (%[xh]), %[x]\n\t"
        "vpmaddwd %[w0], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s00], %[s00]\n\t"
        "vpmaddwd %[w1], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s01], %[s01]\n\t"
        "vpbroadcastd 4(%[xh]), %[x]\n\t"
        "vpmaddwd %[w0], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s10], %[s10]\n\t"
        "vpmaddwd %[w1], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s11], %[s11]\n\t"
        "vpbroadcastd 8(%[xh]), %[x]\n\t"
        "vpmaddwd %[w0], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s20], %[s20]\n\t"
        "vpmaddwd %[w1], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s21], %[s21]\n\t"
        "vpbroadcastd 12(%[xh]), %[x]\n\t"
        "vpmaddwd %[w0], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s30], %[s30]\n\t"
        "vpmaddwd %[w1], %[x], %[prod]\n\t"
        "vpaddd %[prod], %[s31], %[s31]\n\t"
        "add $32, %[w]\n\t"
        "add $16, %[xh]\n\t"
        "dec %[h]\n\t"
        "jnz 1b"
        : [s00] "+x"(s00), [s01] "+x"(s01), [s10] "+x"(s10), [s11] "+x"(s11), [s20] "+x"(s20), [s21] "+x"(s21),
          [s30] "+x"(s30), [s31] "+x"(s31), [w0] "=&x"(w0), [w1] "=&x"(w1), [x] "=&x"(x), [prod] "=&x"(prod),
          [w] "+r"(w), [xh] "+r"(xh), [h] "+r"(h)
        : [stride] "r"(pan_stride)
        : "cc", "memory");
    is[0][0] = s00, is[0][1] = s01, is[1][0] = s10, is[1][1] = s11;
    is[2][0] = s20, is[2][1] = s21, is[3][0] = s30, is[3][1] = s31;
  } else {  // the edges: fewer than 4 tokens or one panel
    for (int t = 0; t < T; ++t)
      for (int p = 0; p < P; ++p) is[t][p] = _mm256_setzero_si256();
    for (int64_t h = 0; h < n_h; ++h) {
      __m256i wv[P];
      for (int p = 0; p < P; ++p)
        wv[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + p * pan_stride + 32 * h));
      for (int t = 0; t < T; ++t) {
        int32_t x2;
        __builtin_memcpy(&x2, xb + 8 * h + 2 * t, 4);
        const __m256i xv = _mm256_set1_epi32(x2);
        for (int p = 0; p < P; ++p) is[t][p] = _mm256_add_epi32(is[t][p], _mm256_madd_epi16(wv[p], xv));
      }
    }
  }
}

// panel_tile over wide panels of blocks of kBlock columns: Q8_0 / IQ4_NL (32, the activations'
// Q8_0 scales xd) or IQ4_XS (256, their Q8_K scales kd).
template <int64_t kBlock, int T, int P>
inline void panel_tile_wide(const KernelArgs& a, const uint8_t* pan, int64_t pan_stride, int64_t t0, int64_t r0,
                            int64_t valid) {
  constexpr int64_t kBytes = wide_panel_block_bytes(kBlock), kScales = kBytes - 32;
  const int64_t cols = a.cols, nb = cols / kBlock;
  const float* xd = kBlock == kQBlock ? a.xd : a.kd;
  // The f32 sums live in y (or, for a tile past the last row, in tmp) between blocks, leaving the
  // 16 YMM registers to the 8 integer sums, 2 weight vectors and the broadcast.
  alignas(32) float tmp[T][8 * P];
  const bool whole = 8 * P <= valid;
  float* out = whole ? a.y + t0 * a.y_stride + r0 : &tmp[0][0];
  const int64_t out_stride = whole ? a.y_stride : 8 * P;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = pan + b * kBytes;
    __m256i is[T][P];
    wide_sums<T, P>(pb, pan_stride, a.xw + wide_x_offset(t0, b * kBlock / 2, cols), kBlock / 2, is);
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(xd[(t0 + t) * nb + b]);
      for (int p = 0; p < P; ++p) {
        const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + p * pan_stride + kScales));
        float* o = out + t * out_stride + 8 * p;
        const __m256 prev = b == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(o);
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(is[t][p]), prev));
      }
    }
  }
  if (!whole)
    for (int t = 0; t < T; ++t)
      for (int64_t j = 0; j < valid; ++j) a.y[(t0 + t) * a.y_stride + r0 + j] = tmp[t][j];
}

// The panel path of the Q8_0 family; pack_bytes(r, m, out) builds pack_panel's layout of m ≤ 8
// rows from r at out.
template <DType D, typename PackBytes>
inline void rows_q_panels(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch, const PackBytes& pack_bytes) {
  const int64_t nb = a.cols / kQBlock;
  if constexpr (kSignedCodes<D> && !V::kVnni) {  // a.xw is set (act_form's kQ8_0Wide)
    const int64_t pan_stride = nb * kPanelBlockWide;
    uint8_t* bytes = scratch + kPackRows / 8 * pan_stride;  // panel_scratch_bytes keeps room for it
    rows_packed<kPanelTokens, 2>(
        a, r0, r1, scratch, pan_stride,
        [&](int64_t r, int64_t m, uint8_t* out) {
          pack_bytes(r, m, bytes);
          widen_panel(bytes, nb, out);
        },
        [&]<int T, int P>(TokTile<T>, TokTile<P>, const uint8_t* pan, int64_t t, int64_t r, int64_t valid) {
          panel_tile_wide<kQBlock, T, P>(a, pan, pan_stride, t, r, valid);
        });
  } else {
    const int64_t pan_stride = nb * kPanelBlock;
    rows_packed<kPanelTokens, 2>(
        a, r0, r1, scratch, pan_stride, pack_bytes,
        [&]<int T, int P>(TokTile<T>, TokTile<P>, const uint8_t* pan, int64_t t, int64_t r, int64_t valid) {
          panel_tile<D, T, P>(a, pan, pan_stride, t, r, valid);
        });
  }
}

// ---- drivers ----

template <DType D, int T>
inline void sweep_rows(const KernelArgs& a, int64_t t0, int64_t rb, int64_t re) {
  constexpr int R = V::kFloatRows[T];
  int64_t r = rb;
  for (; r + R <= re; r += R) tile_float<D, T, R>(a, t0, r);
  for (; r < re; ++r) tile_float<D, T, 1>(a, t0, r);
}

// Cache blocking for prefill: a chunk of tokens whose activations stay in L2 is swept by
// blocks of kRowBlock weight rows, so each weight block is loaded once per chunk and reused
// by every 4-token tile of it. Decode (n <= 4) degenerates to one pass streaming each row once.
inline constexpr int64_t kActChunkBytes = 160 * 1024;
inline constexpr int64_t kRowBlock = 16;

// sweep(TokTile<T>{}, t, rb, re) over chunks of tokens (act_bytes per token) × row blocks.
template <typename Sweep>
inline void cache_blocked(const KernelArgs& a, int64_t r0, int64_t r1, int64_t act_bytes, const Sweep& sweep) {
  int64_t tb = kActChunkBytes / (act_bytes > 0 ? act_bytes : 1);
  tb = tb < 4 ? 4 : tb / 4 * 4;
  for (int64_t t0 = 0; t0 < a.n; t0 += tb) {
    const int64_t t1 = min64(a.n, t0 + tb);
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t re = min64(r1, rb + kRowBlock);
      token_tiles(t0, t1, [&]<int T>(TokTile<T> tile, int64_t t) { sweep(tile, t, rb, re); });
    }
  }
}

template <DType D>
inline void rows_dtype(const KernelArgs& a, int64_t r0, int64_t r1) {
  cache_blocked(a, r0, r1, a.cols * 4,
                [&]<int T>(TokTile<T>, int64_t t, int64_t rb, int64_t re) { sweep_rows<D, T>(a, t, rb, re); });
}

// ---- Q8_0 / Q4_0 weights repacked at load (KernelArgs::packed, see pack_weight) ----
//
// Group block b of rows 8g..8g+7 (8 · block_bytes bytes): the 8 rows' f16 scales, then the codes
// in 32-byte vectors of 4 bytes per row (row j at 4j). Q8_0: vector v holds codes 4v..4v+3 (8
// vectors, signed). Q4_0: vector v holds the raw bytes 4v..4v+3, i.e. codes 4v..4v+3 in the low
// nibbles and 16+4v.. in the high ones (4 vectors). A token's 4 codes broadcast against a vector
// give the 8 rows' partial sums in the lanes of one vpdpbusd: no reduction across lanes, one
// stream of contiguous bytes per 8 rows. Same integers and f32 steps as the row-major kernels.

// Packed Q5_0: the shuffle that gives every byte of row j's 4-byte lane the qh byte `b` of row j
// (qh vector: row j's word at 4j), and the mask of the bits 4·half + k for the lane's bytes k —
// the fifth bits of the codes in nibble vector 2b + half (low nibbles; b = 2 + ...: high ones).
inline __m256i q5_select(int b) {
  return _mm256_add_epi8(_mm256_set1_epi8(static_cast<char>(b)),
                         _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4, 4, 8,
                                          8, 8, 8, 12, 12, 12, 12));
}
inline __m256i q5_mask(int half) { return _mm256_set1_epi32(static_cast<int>(0x08040201u << (4 * half))); }

// The 8 code vectors of one packed block in group order (group g: codes 4g..4g+3 of the 8
// rows), as the panel layout has them: Q4_0 unsigned nibbles; Q5_0 unsigned 0..31 (group g's
// fifth bits: qh bits 4g..4g+3 of each row); Q8_0 + 128 with VNNI (vpdpbusd wants the unsigned
// operand there), else signed.
template <DType D>
inline void packed_codes(const uint8_t* blk, __m256i* v) {
  if constexpr (D == DType::kQ8_0) {
    for (int g = 0; g < 8; ++g) {
      v[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * g));
      if constexpr (V::kVnni) v[g] = _mm256_xor_si256(v[g], _mm256_set1_epi8(-128));
    }
  } else {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int g = 0; g < 4; ++g) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedCodes<D> + 32 * g));
      v[g] = _mm256_and_si256(raw, m4);
      v[g + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    }
    if constexpr (kHasQh<D>) {
      const __m256i hq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedQh<D>));
      for (int g = 0; g < 8; ++g)
        v[g] = _mm256_or_si256(v[g], fifth_bits(_mm256_shuffle_epi8(hq, q5_select(g / 2)), q5_mask(g % 2)));
    }
    if constexpr (D == DType::kIQ4_NL) {  // the levels, + 128 with VNNI (a table of level ^ 0x80)
      const __m256i lv = V::kVnni ? _mm256_xor_si256(iq4nl_levels(), _mm256_set1_epi8(-128)) : iq4nl_levels();
      for (int g = 0; g < 8; ++g) v[g] = _mm256_shuffle_epi8(lv, v[g]);
    }
  }
}

// Decode-shaped work on packed weights: the 8 rows from r0 (a whole group) and T tokens from t0.
template <DType D, int T>
inline void rows8_packed_q(const KernelArgs& a, int64_t t0, int64_t r0) {
  const int64_t cols = a.cols, nb = cols / kQBlock;
  constexpr int64_t kGB = 8 * block_bytes<D>();
  constexpr int kShift = panel_shift<D>();
  const uint8_t* w = a.w + r0 * a.w_stride;  // groups are 8 rows' bytes, contiguous
  const NextRowsPrefetch pf(a, r0, 8, nb);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<kGB>(w, b);
    const uint8_t* blk = w + b * kGB;
    __m256i v[8];
    packed_codes<D>(blk, v);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    for (int t = 0; t < T; ++t) {
      const int64_t tb = (t0 + t) * nb + b;
      const int8_t* xq = a.xq + (t0 + t) * cols + b * kQBlock;
      __m256i is = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        int32_t x4;
        __builtin_memcpy(&x4, xq + 4 * g, 4);
        const __m256i xb = _mm256_set1_epi32(x4);
        if constexpr (kSignedCodes<D> && !V::kVnni) {
          is = V::dot_acc(is, _mm256_abs_epi8(xb), _mm256_sign_epi8(v[g], xb));
        } else {
          is = V::dot_acc(is, v[g], xb);
        }
      }
      if constexpr (kShift >= 0) is = _mm256_sub_epi32(is, _mm256_set1_epi32(a.xs[tb] << kShift));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a.xd[tb])), _mm256_cvtepi32_ps(is), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

#if defined(__AVX512F__)
// rows8_packed_q in 512-bit vectors: one vpdpbusd takes two of a block's groups (g in the low
// half, g + 1 in the high one: the packed layout has them 32 bytes apart), the token's codes
// placed to match by one vpermd; the halves' int32 sums are added before the scale, so every
// integer and f32 step is rows8_packed_q's. Half the dot products and broadcasts per block:
// Q4_0 decode is compute-bound on Zen 5 at 2 threads (bench_ops_matmul, cache-resident, below
// the DRAM read) — PERFORMANCE.md, twelfth pass.
// The two halves' int32 lanes added: per row, the sum over the two groups of a 512-bit dot product.
inline __m256i kzmm_fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

template <DType D, int T>
inline void rows8_packed_q_zmm(const KernelArgs& a, int64_t t0, int64_t r0) {
  const int64_t cols = a.cols, nb = cols / kQBlock;
  constexpr int64_t kGB = 8 * block_bytes<D>();
  constexpr int kShift = panel_shift<D>();
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  // Code vector k holds groups g | g + 1, g = kLow[k] (Q4_0: a raw pair's low nibbles, then its
  // high ones); idx[k] moves the token's code dwords g and g + 1 into the matching halves.
  __m512i idx[4];
  constexpr int kLow[2][4] = {{0, 2, 4, 6}, {0, 4, 2, 6}};
  for (int k = 0; k < 4; ++k) {
    const int g = kLow[D != DType::kQ8_0][k];
    idx[k] = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(g), _mm512_set1_epi32(g + 1));
  }
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<kGB>(w, b);
    const uint8_t* blk = w + b * kGB;
    __m512i v[4];
    if constexpr (D == DType::kQ8_0) {
      for (int k = 0; k < 4; ++k)
        v[k] = _mm512_xor_si512(_mm512_loadu_si512(blk + 16 + 64 * k), _mm512_set1_epi8(-128));
    } else {
      const __m512i m4 = _mm512_set1_epi8(0x0f);
      for (int k = 0; k < 2; ++k) {
        const __m512i raw = _mm512_loadu_si512(blk + kPackedCodes<D> + 64 * k);
        v[2 * k] = _mm512_and_si512(raw, m4);
        v[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      }
      if constexpr (D == DType::kIQ4_NL) {  // the levels + 128 (vpdpbusd's unsigned operand)
        const __m512i lv = _mm512_broadcast_i64x4(_mm256_xor_si256(iq4nl_levels(), _mm256_set1_epi8(-128)));
        for (int k = 0; k < 4; ++k) v[k] = _mm512_shuffle_epi8(lv, v[k]);
      }
      if constexpr (kHasQh<D>) {  // v[k] holds groups g | g + 1 (g even): qh byte g / 2, bits 0..3 | 4..7
        const __m512i hz =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kPackedQh<D>)));
        const __m512i mask = _mm512_inserti64x4(_mm512_castsi256_si512(q5_mask(0)), q5_mask(1), 1);
        for (int k = 0; k < 4; ++k) {
          const __m512i sel = _mm512_shuffle_epi8(hz, _mm512_broadcast_i64x4(q5_select(kLow[1][k] / 2)));
          v[k] = _mm512_mask_add_epi8(v[k], _mm512_test_epi8_mask(sel, mask), v[k], _mm512_set1_epi8(0x10));
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    for (int t = 0; t < T; ++t) {
      const int64_t tb = (t0 + t) * nb + b;
      const __m512i x = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + (t0 + t) * cols + b * kQBlock)));
      __m512i is2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[0], _mm512_permutexvar_epi32(idx[0], x));
      for (int k = 1; k < 4; ++k) is2 = _mm512_dpbusd_epi32(is2, v[k], _mm512_permutexvar_epi32(idx[k], x));
      __m256i is = kzmm_fold(is2);
      if constexpr (kShift >= 0) is = _mm256_sub_epi32(is, _mm256_set1_epi32(a.xs[tb] << kShift));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a.xd[tb])), _mm256_cvtepi32_ps(is), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

// 32 (or 16, 8) bytes at a and at b as one 512-bit (256-, 128-bit) vector, a in the low half.
inline __m512i join256(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}
inline __m256i join128(const uint8_t* a, const uint8_t* b) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}
inline __m128i join64(const uint8_t* a, const uint8_t* b) {
  return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
}
inline __m512i set1_x4(const int8_t* p) {
  int32_t x4;
  __builtin_memcpy(&x4, p, 4);
  return _mm512_set1_epi32(x4);
}

// Two packed groups at once (rows r0 .. r0 + 15, T tokens from t0): a 512-bit vector holds one
// code vector of each group (rows r0..r0+7 in the low half, r0+8..r0+15 in the high one), so
// every lane wants the same 4 token codes, which vpdpbusd takes as a broadcast memory operand:
// no permute and no fold per block, 16 rows' sums in the 16 lanes. The integers and f32 steps
// per row are rows8_packed_q's. Only the first token tile of a group (t0 == 0) prefetches the
// next rows; later tiles find the group in cache.
template <DType D, int T>
inline void rows16_packed_q_zmm(const KernelArgs& a, int64_t t0, int64_t r0) {
  const int64_t cols = a.cols, nb = cols / kQBlock;
  constexpr int64_t kGB = 8 * block_bytes<D>();
  constexpr int kShift = panel_shift<D>();
  constexpr int kVecs = D == DType::kQ8_0 ? 8 : 4;  // 32-byte code vectors per group block (Q5_0: + qh)
  const uint8_t* wa = a.w + r0 * a.w_stride;
  const uint8_t* wb = wa + 8 * a.w_stride;
  const NextRowsPrefetch pf(a, t0 == 0 ? r0 : a.rows, 16, nb);  // past the last row: none
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<2 * kGB>(wa, b);
    const uint8_t* ba = wa + b * kGB;
    const uint8_t* bb = wb + b * kGB;
    // v[g]: codes 4g..4g+3 of the 16 rows (Q4_0 nibbles; Q8_0 + 128).
    __m512i v[8];
    for (int k = 0; k < kVecs; ++k) {
      const __m512i raw = join256(ba + kPackedCodes<D> + 32 * k, bb + kPackedCodes<D> + 32 * k);
      if constexpr (D == DType::kQ8_0) {
        v[k] = _mm512_xor_si512(raw, _mm512_set1_epi8(-128));
      } else {
        v[k] = _mm512_and_si512(raw, _mm512_set1_epi8(0x0f));
        v[k + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), _mm512_set1_epi8(0x0f));
      }
    }
    if constexpr (D == DType::kIQ4_NL) {  // the levels + 128 (vpdpbusd's unsigned operand)
      const __m512i lv = _mm512_broadcast_i64x4(_mm256_xor_si256(iq4nl_levels(), _mm256_set1_epi8(-128)));
      for (int g = 0; g < 8; ++g) v[g] = _mm512_shuffle_epi8(lv, v[g]);
    }
    if constexpr (kHasQh<D>) {  // group g: qh byte g / 2, bits 4·(g % 2) + k, both groups alike
      const __m512i hz = join256(ba + kPackedQh<D>, bb + kPackedQh<D>);
      for (int g = 0; g < 8; ++g) {
        const __m512i sel = _mm512_shuffle_epi8(hz, _mm512_broadcast_i64x4(q5_select(g / 2)));
        v[g] = _mm512_mask_add_epi8(v[g], _mm512_test_epi8_mask(sel, _mm512_broadcast_i64x4(q5_mask(g % 2))), v[g],
                                    _mm512_set1_epi8(0x10));
      }
    }
    const __m512 dw = _mm512_cvtph_ps(join128(ba, bb));
    for (int t = 0; t < T; ++t) {
      const int64_t tb = (t0 + t) * nb + b;
      const int8_t* xq = a.xq + (t0 + t) * cols + b * kQBlock;
      __m512i is[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      for (int g = 0; g < 8; ++g) is[g & 1] = _mm512_dpbusd_epi32(is[g & 1], v[g], set1_x4(xq + 4 * g));
      __m512i s = _mm512_add_epi32(is[0], is[1]);
      if constexpr (kShift >= 0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(a.xs[tb] << kShift));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.xd[tb])), _mm512_cvtepi32_ps(s), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

// Packed Q4_0 / Q8_0 through rows16_packed_q_zmm, for every token count from rows16_min_tokens
// on (no panels): per 64 rows, the tokens in tiles of 8 (then 4, 3, 2, 1), each tile over the 4
// groups of 16 rows, so the 64 rows' codes stay in L1/L2 while all tokens pass, as the panels
// did, without building them; a last group of 8 rows (rows ≡ 8 mod 16) goes to
// rows8_packed_q_zmm. Measured on Zen 5, 2 threads, weights from DRAM (PERFORMANCE.md,
// sixteenth pass): Q4_0 from 4 tokens and Q8_0 from 8 on faster than the 8-row kernel and the
// panels at every count up to 512; Q8_0 at 4–7 tokens and both types at 1–3 slower (16 rows
// read as two streams 8 rows apart; single-token decode is bound by the read, which the 8-row
// kernel's one stream follows best).
template <DType D>
inline constexpr int64_t rows16_min_tokens() {
  return D != DType::kQ8_0 ? 4 : kPanelMinTokens;
}

// The 16-row drivers' blocking: per 64 rows, the tokens in tiles (of 8 first when kT8, then 4,
// 3, 2, 1), each tile over the 64 rows: tile16(TokTile<T>, t, r) for each pair of groups, then
// tile8 for a last group of 8 (rows ≡ 8 mod 16).
template <bool kT8, typename Tile16, typename Tile8>
inline void rows16_blocked(const KernelArgs& a, int64_t r0, int64_t r1, const Tile16& tile16, const Tile8& tile8) {
  for (int64_t rb = r0; rb < r1; rb += 64) {
    const int64_t re = min64(r1, rb + 64);
    const auto groups = [&]<int T>(TokTile<T> tt, int64_t t) {
      int64_t r = rb;
      for (; r + 16 <= re; r += 16) tile16(tt, t, r);
      if (r < re) tile8(tt, t, r);
    };
    int64_t t = 0;
    if constexpr (kT8)
      for (; t + 8 <= a.n; t += 8) groups(TokTile<8>{}, t);
    token_tiles(t, a.n, groups);
  }
}

template <DType D>
inline void rows16_q(const KernelArgs& a, int64_t r0, int64_t r1) {
  rows16_blocked<true>(
      a, r0, r1, [&]<int T>(TokTile<T>, int64_t t, int64_t r) { rows16_packed_q_zmm<D, T>(a, t, r); },
      [&]<int T>(TokTile<T>, int64_t t, int64_t r) { rows8_packed_q_zmm<D, T>(a, t, r); });
}
#endif

// A panel (pack_panel's layout) from a packed group: no transpose, the codes are in place.
template <DType D>
inline void panel_from_packed(const KernelArgs& a, int64_t r0, uint8_t* out) {
  const int64_t nb = a.cols / kQBlock;
  constexpr int64_t kGB = 8 * block_bytes<D>();
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  for (int64_t b = 0; b < nb; ++b) {
    pf.step(w, b);
    const uint8_t* blk = w + b * kGB;
    __m256i v[8];
    packed_codes<D>(blk, v);
    uint8_t* o = out + b * kPanelBlock;
    for (int g = 0; g < 8; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * g), v[g]);
    _mm256_storeu_ps(reinterpret_cast<float*>(o + 256),
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))));
  }
}

template <DType D>
inline void rows_q(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
  if (a.packed) {  // r0, r1 and the matrix's rows are multiples of 8
#if defined(__AVX512F__)
    if (!(g_kernel_variant & (16 | 32)) && a.n >= rows16_min_tokens<D>()) return rows16_q<D>(a, r0, r1);
#endif
    if (scratch != nullptr && a.n >= kPanelMinTokens) {
      rows_q_panels<D>(a, r0, r1, scratch, [&](int64_t r, int64_t, uint8_t* out) { panel_from_packed<D>(a, r, out); });
    } else {
      for (int64_t rb = r0; rb < r1; rb += 8)
        token_tiles(0, a.n, [&]<int T>(TokTile<T>, int64_t t) {
#if defined(__AVX512F__)
          if (!(g_kernel_variant & 16)) return rows8_packed_q_zmm<D, T>(a, t, rb);
#endif
          rows8_packed_q<D, T>(a, t, rb);
        });
    }
  } else if (scratch != nullptr && a.n >= kPanelMinTokens) {
    rows_q_panels<D>(a, r0, r1, scratch, [&](int64_t r, int64_t m, uint8_t* out) { pack_panel<D>(a, r, m, out); });
  } else {
    rows_q_small<D>(a, r0, r1);
  }
}

// ---- K-quant family (Q4_K / Q5_K / Q6_K) against Q8_K-rounded activations ----
//
// The numerics are defined by scalar::rows_k (matmul.cc): per super-block of 256 the exact int32
// isum = Σ_sub-block scale·Σ code·x (Q6_K's -32 offset as -32·Σ scale·bsum16) and, for Q4_K /
// Q5_K, msum = Σ_sub-block min·bsum32; then one f32 accumulator per (token, row) over the
// super-blocks in order: acc = fma(d_w·d_x, f32(isum), acc), Q4_K / Q5_K also acc =
// fma(-(dmin_w·d_x), f32(msum), acc).
// How a kernel forms the integers does not matter (they are exact), so the in-place kernel
// (lanes per row, then an 8-row reduction) and the panel kernel (rows in lanes) give the same
// bits, at every ISA level and whatever n, tile or thread computes a pair.

inline constexpr int64_t k_block_bytes(DType d) { return dtype_info(d).block_bytes; }

// One row's super-block as madd operands.
struct KScales {
  __m256i sc[8];  // chunk k: 16 int16 scales (Q4_K / Q5_K: all sc_k; Q6_K: 8 × sc[2k], then 8 × sc[2k+1])
  __m256i extra;  // Q4_K / Q5_K: min_m as int32 in lane m; Q6_K: the 16 scales as int16 (offset term)
};

// Q4_K's 6-bit scales and mins (ggml's get_scale_min_k4), four at a time per 32-bit word, as
// bytes sc0..7, mn0..7.
inline __m128i q4k_scales_mins(const uint8_t* blk) {
  uint32_t u[3];
  __builtin_memcpy(u, blk + 4, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, mn_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  return _mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo), static_cast<int>(sc_hi),
                       static_cast<int>(sc_lo));
}

inline void k_scales_q4(const uint8_t* blk, KScales* s) {
  const __m128i v = q4k_scales_mins(blk);
  const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(v));
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k)
    s->sc[k] = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * k)));
  s->extra = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
}

// IQ4_XS's 8 scales − 32 (one per sub-block of 32) as madd operands: sc[k] = 16 × scale k.
inline void k_scales_iq4xs(const uint8_t* blk, KScales* s) {
  uint16_t h;
  uint32_t l;
  __builtin_memcpy(&h, blk + 2, 2);
  __builtin_memcpy(&l, blk + 4, 4);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k)
    s->sc[k] = _mm256_set1_epi16(static_cast<short>((((l >> (4 * k)) & 0xf) | ((h >> (2 * k)) & 3) << 4) - 32));
  s->extra = _mm256_setzero_si256();
}

// Q3_K's 16 scales − 32 as int8 (ggml's unpacking of its 12 scale bytes, four at a time).
inline void q3k_scales16(const uint8_t* blk, int8_t* out) {
  uint32_t u[3];
  __builtin_memcpy(u, blk + 96, 12);
  const uint32_t w[4] = {(u[0] & 0x0f0f0f0fu) | ((u[2] & 0x03030303u) << 4),
                         (u[1] & 0x0f0f0f0fu) | (((u[2] >> 2) & 0x03030303u) << 4),
                         ((u[0] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 4) & 0x03030303u) << 4),
                         ((u[1] >> 4) & 0x0f0f0f0fu) | (((u[2] >> 6) & 0x03030303u) << 4)};
  uint8_t b[16];
  __builtin_memcpy(b, w, 16);
  for (int k = 0; k < 16; ++k) out[k] = static_cast<int8_t>(b[k] - 32);
}

// Q6_K's (and Q3_K's) 16 int8 scales at sc as madd operands.
inline void k_scales_signed(const int8_t* sc, KScales* s) {
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
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
}

// The 32 unsigned codes of chunk k (elements 32k..32k+31) of a super-block (Q3_K: its codes
// 0..7 + 28, Q6_K's range, so that Q6_K's − 32 applies; IQ4_XS: its signed levels).
template <DType D>
inline __m256i k_codes(const uint8_t* blk, int k) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  if constexpr (D == DType::kQ2_K) {  // bits 2g..2g+1 of qs[32h + l]
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * (k / 4)));
    return _mm256_and_si256(_mm256_srli_epi16(qs, 2 * (k % 4)), _mm256_set1_epi8(3));
  } else if constexpr (D == DType::kIQ4_XS) {  // sub-block k's 16 bytes: low nibbles elements 0..15, high 16..31
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8 + 16 * k));
    return _mm256_shuffle_epi8(iq4nl_levels(), _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), m4));
  } else if constexpr (D == DType::kQ3_K) {  // bits 2g..2g+1 of qs[32h + l], bit 4h + g of hmask[l]
    const int h = k / 4, g = k % 4;
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 32 * h));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * g), _mm256_set1_epi8(3));
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), _mm256_set1_epi8(1));
    return _mm256_add_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 2)), _mm256_set1_epi8(28));
  } else if constexpr (kquant_has_mins(D)) {
    constexpr int kNibbles = D == DType::kQ4_K ? 16 : 48;
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kNibbles + 32 * (k / 2)));
    if (k % 2) v = _mm256_srli_epi16(v, 4);
    v = _mm256_and_si256(v, m4);
    if constexpr (D == DType::kQ5_K) {  // bit k of qh[l] is bit 4 of code l
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, k), _mm256_set1_epi8(1));
      v = _mm256_or_si256(v, _mm256_slli_epi16(hb, 4));
    }
    return v;
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

// One row's super-block b against T tokens from t0, in place: lanes whose sum is isum (in[t])
// and, for Q4_K / Q5_K, lanes whose sum is msum (mn[t]).
template <DType D, int T>
inline void k_row_lanes(const KernelArgs& a, const uint8_t* blk, int64_t t0, int64_t b, __m256i* in, __m256i* mn) {
  const int64_t cols = a.cols;
  KScales ks;
  if constexpr (kquant_has_mins(D)) {
    k_scales_q4(blk, &ks);
  } else if constexpr (D == DType::kIQ4_XS) {
    k_scales_iq4xs(blk, &ks);
  } else if constexpr (D == DType::kQ2_K) {  // scales: the low nibbles; extra: the mins (high nibbles) as int16
    const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
    alignas(16) int8_t sc[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_and_si128(sb, _mm_set1_epi8(0x0f)));
    k_scales_signed(sc, &ks);
    ks.extra = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0f)));
  } else if constexpr (D == DType::kQ6_K) {
    k_scales_signed(reinterpret_cast<const int8_t*>(blk + 192), &ks);
  } else {
    int8_t sc[16];
    q3k_scales16(blk, sc);
    k_scales_signed(sc, &ks);
  }
  __m256i s[T];
  for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const __m256i wq = k_codes<D>(blk, k);
    for (int t = 0; t < T; ++t) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.kq + (t0 + t) * cols + b * kKBlock + 32 * k));
      if constexpr (D == DType::kIQ4_XS) {  // signed levels: |level| · (x with the level's sign), ≤ 2·127² per pair
        s[t] = V::kmadd(s[t], _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq)), ks.sc[k]);
      } else {
        s[t] = V::kmadd(s[t], _mm256_maddubs_epi16(wq, xv), ks.sc[k]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    if constexpr (D == DType::kIQ4_XS) {
      in[t] = s[t];
      mn[t] = _mm256_setzero_si256();
    } else if constexpr (D == DType::kQ2_K) {  // min_s times the code sum of sub-block s (of 16)
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.kb + (t0 + t) * (cols / 16) + b * 16));
      in[t] = s[t];
      mn[t] = _mm256_madd_epi16(ks.extra, bs);
    } else if constexpr (kquant_has_mins(D)) {
      // min_m (high half 0) times the int16-ranged code sum of sub-block m.
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.kb32 + (t0 + t) * (cols / 32) + b * 8));
      in[t] = s[t];
      mn[t] = _mm256_madd_epi16(ks.extra, bs);
    } else {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.kb + (t0 + t) * (cols / 16) + b * 16));
      in[t] = _mm256_sub_epi32(s[t], _mm256_slli_epi32(_mm256_madd_epi16(ks.extra, bs), 5));
      mn[t] = _mm256_setzero_si256();
    }
  }
}

// Decode-shaped work: 8 rows from r0 and T tokens from t0 in the weights' own layout; per
// super-block the 8 rows' lane vectors are reduced to one vector of 8 sums (rows in lanes).
template <DType D, int T>
inline void rows8_k(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kBB = k_block_bytes(D);
  const int64_t nb = a.cols / kKBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step(w, b);
    const uint8_t* blk = w + b * kBB;
    __m256i in[8][T], mn[8][T];
    for (int r = 0; r < 8; ++r) k_row_lanes<D, T>(a, blk + r * a.w_stride, t0, b, in[r], mn[r]);
    const __m256 dw = load_scales8(blk + kquant_d_offset(D), a.w_stride);
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(a.kd[(t0 + t) * nb + b]);
      __m256i p[8];
      for (int r = 0; r < 8; ++r) p[r] = in[r][t];
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(reduce8(p)), acc[t]);
      if constexpr (kquant_min_term(D)) {
        for (int r = 0; r < 8; ++r) p[r] = mn[r][t];
        const __m256 dm = load_scales8(blk + kquant_dmin_offset(D), a.w_stride);
        acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(reduce8(p)), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

// One row, T tokens (the rows left over after the 8-row groups).
template <DType D, int T>
inline void row1_k(const KernelArgs& a, int64_t t0, int64_t r) {
  constexpr int64_t kBB = k_block_bytes(D);
  const int64_t nb = a.cols / kKBlock;
  const uint8_t* w = a.w + r * a.w_stride;
  float acc[T];
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kBB;
    __m256i in[T], mn[T];
    k_row_lanes<D, T>(a, blk, t0, b, in, mn);
    for (int t = 0; t < T; ++t) {
      const float dx = a.kd[(t0 + t) * nb + b];
      acc[t] =
          __builtin_fmaf(load_f16_scalar(blk + kquant_d_offset(D)) * dx, static_cast<float>(hsum_i32(in[t])), acc[t]);
      if constexpr (kquant_min_term(D))
        acc[t] = __builtin_fmaf(-(load_f16_scalar(blk + kquant_dmin_offset(D)) * dx),
                                static_cast<float>(hsum_i32(mn[t])), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.y_stride + r] = acc[t];
}

template <DType D>
inline void rows_k_small(const KernelArgs& a, int64_t r0, int64_t r1) {
  rows_in_place(
      a, r0, r1, [&]<int T>(TokTile<T>, int64_t t, int64_t r) { rows8_k<D, T>(a, t, r); },
      [&]<int T>(TokTile<T>, int64_t t, int64_t r) { row1_k<D, T>(a, t, r); });
}

// Sub-block sums of K-quant codes (unsigned) times activation codes, per row lane, then times
// the sub-block's scale. VNNI: vpdpbusd into int32, one vpmulld by the int32 scales. AVX2: the
// int16 pair sums of maddubs added in int16 — at most kRunGroups<D> groups of 4 codes, the most
// whose sum cannot leave int16 (Q4_K 8 · 2·15·127 = 30480, Q5_K 4 · 2·31·127 = 31496, Q6_K 2 ·
// 2·63·127 = 32004) — then one
// madd by (scale, scale) int16 pairs, which also adds each pair into int32. Exact either way, so
// the bits do not depend on the ISA. Measured on Zen 5 (AVX2, up, n = 512, 1 thread): the panel
// tile Q4_K 25.2 → 19.7 ms, Q6_K 26.1 → 20.8 ms against maddubs + madd(1) + vpmulld.
template <DType D>
inline constexpr int kRunGroups = V::kVnni            ? 64
                                  : D == DType::kQ4_K ? 8
                                  : D == DType::kQ5_K ? 4
                                                      : 2;  // Q6_K, Q3_K (its codes + 28 in panels)
inline __m256i kdot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (V::kVnni) {
    return V::dot_acc(acc, w, x);
  } else {
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
  }
}
// sc: kscale_operand's form.
inline __m256i kscale(__m256i is, __m256i dot, __m256i sc) {
  if constexpr (V::kVnni) {
    return _mm256_add_epi32(is, _mm256_mullo_epi32(dot, sc));
  } else {
    return _mm256_add_epi32(is, _mm256_madd_epi16(dot, sc));
  }
}
// int32 scales (each within int16) -> kscale's operand.
inline __m256i kscale_operand(__m256i sc32) {
  if constexpr (V::kVnni) {
    return sc32;
  } else {
    return _mm256_blend_epi16(sc32, _mm256_slli_epi32(sc32, 16), 0xaa);
  }
}
inline int32_t kscale_operand(int32_t sc) {
  return V::kVnni ? sc : static_cast<int32_t>((static_cast<uint32_t>(sc) & 0xffffu) * 0x10001u);
}
// Q4_K's activation code sums of sub-blocks 2p and 2p + 1 (each within int16: |Σ| ≤ 32·127) as
// one int16 pair, the operand the mins term's vpmaddwd takes against (min, min) pairs.
inline int32_t bsum32_pair(const int32_t* b32, int p) {
  return static_cast<int32_t>((static_cast<uint32_t>(b32[2 * p]) & 0xffffu) |
                              (static_cast<uint32_t>(b32[2 * p + 1]) << 16));
}

// Prefill-shaped work: panels of 8 rows as for Q8_0 / Q4_0, one panel block per super-block
// (panel_block_bytes): 64 groups of 4 codes at byte 32·g (row j's codes 4g..4g+3 at 4j..4j+3,
// unsigned: Q4_K 0..15, Q5_K 0..31, Q6_K 0..63), then per sub-block the 8 rows' scales as int32 (AVX2: (scale, scale)
// int16 pairs; Q4_K / Q5_K: 8 sub-blocks of 32; Q6_K: 16 of 16), then per pair of sub-blocks the 8 rows' (min, min)
// (Q4_K / Q5_K) or (scale, scale) (Q6_K) as int16 pairs, then d (and the mins' dmin) as 8 f32. A token's 4 codes
// broadcast against a group give the 8 rows' partial sums in one vpdpbusd; per sub-block one multiply by the scales;
// the mins and Q6_K's offset are int16 pair products with the code sums.
template <DType D>
struct KPanel {
  static constexpr int kSubs = kquant_has_mins(D) ? 8 : 16;                       // sub-blocks per super-block
  static constexpr int kGroups = 64 / kSubs;                                      // groups of 4 codes per sub-block
  static constexpr int kRun = kRunGroups<D> < kGroups ? kRunGroups<D> : kGroups;  // groups per kscale
  static constexpr int64_t kScales = 2048;
  static constexpr int64_t kPairs = kScales + 32 * kSubs;
  static constexpr int64_t kD = kPairs + 32 * (kSubs / 2);
  static constexpr int64_t kDmin = kD + 32;
  static constexpr int64_t kBytes = panel_block_bytes(D);
  static_assert(kBytes == kD + (kquant_has_mins(D) ? 64 : 32));
};

// Rows [r0, r0 + m), m ≤ 8, into one panel (rows past m: zero codes, scales and d).
template <DType D>
inline void pack_panel_k_block(const uint8_t* blk, int64_t stride, int64_t m, uint8_t* o) {
  using P = KPanel<D>;
  for (int k = 0; k < 8; ++k) {
    __m256i v[8];
    for (int j = 0; j < 8; ++j) v[j] = j < m ? k_codes<D>(blk + j * stride, k) : _mm256_setzero_si256();
    transpose8x32(v);
    for (int g = 0; g < 8; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * (8 * k + g)), v[g]);
  }
  int32_t sc[P::kSubs][8];
  int16_t pairs[P::kSubs][8];  // [2i + e][j]: element e of row j's pair i, stored as (pair i, row j)
  float d[8], dmin[8];
  for (int j = 0; j < 8; ++j) {
    const uint8_t* bj = blk + j * stride;
    const bool real = j < m;
    if constexpr (kquant_has_mins(D)) {
      alignas(16) uint8_t sm[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(sm), q4k_scales_mins(bj));
      for (int s = 0; s < 8; ++s) {
        sc[s][j] = real ? sm[s] : 0;
        pairs[s][j] = real ? sm[8 + s] : 0;
      }
      d[j] = real ? load_f16_scalar(bj) : 0.0f;
      dmin[j] = real ? load_f16_scalar(bj + 2) : 0.0f;
    } else {
      int8_t s6[16] = {};
      if (real) {
        if constexpr (D == DType::kQ6_K) {
          __builtin_memcpy(s6, bj + 192, 16);
        } else {
          q3k_scales16(bj, s6);
        }
      }
      for (int s = 0; s < 16; ++s) {
        sc[s][j] = real ? s6[s] : 0;
        pairs[s][j] = real ? s6[s] : 0;
      }
      d[j] = real ? load_f16_scalar(bj + kquant_d_offset(D)) : 0.0f;
    }
  }
  for (int s = 0; s < P::kSubs; ++s) {
    if constexpr (!V::kVnni)  // (sc, sc) as int16 pairs: the madd operand
      for (int j = 0; j < 8; ++j)
        sc[s][j] = static_cast<int32_t>((static_cast<uint32_t>(sc[s][j]) & 0xffffu) * 0x10001u);
    __builtin_memcpy(o + P::kScales + 32 * s, sc[s], 32);
  }
  for (int i = 0; i < P::kSubs / 2; ++i)
    for (int j = 0; j < 8; ++j) {
      __builtin_memcpy(o + P::kPairs + 32 * i + 4 * j, &pairs[2 * i][j], 2);
      __builtin_memcpy(o + P::kPairs + 32 * i + 4 * j + 2, &pairs[2 * i + 1][j], 2);
    }
  __builtin_memcpy(o + P::kD, d, 32);
  if constexpr (kquant_has_mins(D)) __builtin_memcpy(o + P::kDmin, dmin, 32);
}

// Rows [r0, r0 + m), m ≤ 8, into one panel (rows past m: zero codes, scales and d): from the
// row-major weights, or (KernelArgs::packed) from a packed group, each super-block first put
// back into the 8 rows' own layout.
template <DType D>
inline void pack_panel_k(const KernelArgs& a, int64_t r0, int64_t m, uint8_t* out) {
  constexpr int64_t kBB = k_block_bytes(D);
  const int64_t nb = a.cols / kKBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  for (int64_t b = 0; b < nb; ++b) {
    pf.step(w, b);
    if (a.packed) {
      const uint8_t* g = w + b * 8 * kBB;
      uint8_t rows[8 * kBB];
      for (int64_t j = 0; j < 8; ++j)
        for (int64_t i = 0; i < kBB; i += packed_run(D, i))
          __builtin_memcpy(rows + j * kBB + i, g + packed_offset(D, j, i), packed_run(D, i));
      pack_panel_k_block<D>(rows, kBB, 8, out + b * KPanel<D>::kBytes);
    } else {
      pack_panel_k_block<D>(w + b * kBB, a.w_stride, m, out + b * KPanel<D>::kBytes);
    }
  }
}

// y for T tokens from t0 and NP panels (8·NP rows from r0, of which `valid` exist) over all
// super-blocks.
template <DType D, int T, int NP>
inline void panel_tile_k(const KernelArgs& a, const uint8_t* pan, int64_t pan_stride, int64_t t0, int64_t r0,
                         int64_t valid) {
  using P = KPanel<D>;
  const int64_t cols = a.cols, nb = cols / kKBlock;
  __m256 acc[T][NP];
  for (int t = 0; t < T; ++t)
    for (int p = 0; p < NP; ++p) acc[t][p] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = pan + b * P::kBytes;
    const int8_t* xb = a.kq + t0 * cols + b * kKBlock;
    __m256i is[T][NP];
    for (int t = 0; t < T; ++t)
      for (int p = 0; p < NP; ++p) is[t][p] = _mm256_setzero_si256();
        // Not unrolled: unrolling the sub-blocks (as before) let GCC 12 spread one super-block's
        // loads and products over the stack. Measured on Zen 5 (up, n = 512, 1 thread), unrolled →
        // not: AVX2 Q4_K 17.6 → 17.5 ms, Q6_K 18.0 → 16.0; AVX-512 Q4_K 10.5 → 9.5, Q6_K 15.2 → 11.1.
#pragma GCC unroll 1
    for (int s = 0; s < P::kSubs; ++s) {
      __m256i sc[NP];
      for (int p = 0; p < NP; ++p)
        sc[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + p * pan_stride + P::kScales + 32 * s));
#pragma GCC unroll 8
      for (int c = 0; c < P::kGroups / P::kRun; ++c) {
        __m256i dot[T][NP];
        for (int t = 0; t < T; ++t)
          for (int p = 0; p < NP; ++p) dot[t][p] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int gg = 0; gg < P::kRun; ++gg) {
          const int g = s * P::kGroups + c * P::kRun + gg;
          __m256i wv[NP];
          for (int p = 0; p < NP; ++p)
            wv[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + p * pan_stride + 32 * g));
          for (int t = 0; t < T; ++t) {
            int32_t x4;
            __builtin_memcpy(&x4, xb + t * cols + 4 * g, 4);
            const __m256i xv = _mm256_set1_epi32(x4);
            for (int p = 0; p < NP; ++p) dot[t][p] = kdot(dot[t][p], wv[p], xv);
          }
        }
        for (int p = 0; p < NP; ++p)
          for (int t = 0; t < T; ++t) is[t][p] = kscale(is[t][p], dot[t][p], sc[p]);
      }
    }
    for (int t = 0; t < T; ++t) {
      const int64_t tt = t0 + t;
      const __m256 dx = _mm256_set1_ps(a.kd[tt * nb + b]);
      // Code sums as int16 pairs: Q4_K / Q5_K (bsum32[2i], bsum32[2i+1]); Q6_K (bsum16[2i], bsum16[2i+1]).
      int32_t bp[P::kSubs / 2];
      if constexpr (kquant_has_mins(D)) {
        const int32_t* b32 = a.kb32 + tt * (cols / 32) + b * 8;
        for (int i = 0; i < 4; ++i) bp[i] = bsum32_pair(b32, i);
      } else {
        __builtin_memcpy(bp, a.kb + tt * (cols / 16) + b * 16, 32);
      }
      for (int p = 0; p < NP; ++p) {
        const uint8_t* pp = pb + p * pan_stride;
        __m256i ex = _mm256_setzero_si256();
        for (int i = 0; i < P::kSubs / 2; ++i)
          ex = _mm256_add_epi32(
              ex, _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pp + P::kPairs + 32 * i)),
                                    _mm256_set1_epi32(bp[i])));
        const __m256 dw = _mm256_loadu_ps(reinterpret_cast<const float*>(pp + P::kD));
        if constexpr (kquant_has_mins(D)) {
          const __m256 dm = _mm256_loadu_ps(reinterpret_cast<const float*>(pp + P::kDmin));
          acc[t][p] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(is[t][p]), acc[t][p]);
          acc[t][p] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(ex), acc[t][p]);
        } else {
          const __m256i isum = _mm256_sub_epi32(is[t][p], _mm256_slli_epi32(ex, 5));
          acc[t][p] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc[t][p]);
        }
      }
    }
  }
  store_panel_tile<T, NP>(a, acc, t0, r0, valid);
}

// ---- Q4_K / Q6_K weights repacked at load (KernelArgs::packed, matmul_kernels.h's layout) ----
//
// Decode: per super-block, 32-byte vectors of 4 codes of each of the 8 rows against a token's 4
// codes broadcast: vpdpbusd (maddubs + madd on AVX2) gives the 8 rows' partial sums in 8 lanes,
// per sub-block one vpmulld by the 8 rows' scales. The same exact integers as rows8_k, so the
// same bits.

// 4 activation codes broadcast to every 32-bit lane.
inline __m256i bcast4(const int8_t* p) {
  int32_t x4;
  __builtin_memcpy(&x4, p, 4);
  return _mm256_set1_epi32(x4);
}

// The 8 rows' int8 / uint8 scales at p (one per row) as int32 lanes.
inline __m256i scales8_i8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i scales8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// A packed Q4_K group block's 6-bit scales and mins of its 8 rows (ggml's get_scale_min_k4 on
// byte planes): sub-block s's scale of row j to scb[8s + j], its min to mnb[8s + j].
inline void q4k_scales_mins8(const uint8_t* blk, uint8_t* scb, uint8_t* mnb) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), m63 = _mm256_set1_epi8(63);
  const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32));
  const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64));
  const __m256i y2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 96));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(scb), _mm256_and_si256(y0, m63));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(mnb), _mm256_and_si256(y1, m63));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(scb + 32),
                      _mm256_or_si256(_mm256_and_si256(y2, m4), _mm256_and_si256(_mm256_srli_epi16(y0, 2), m30)));
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(mnb + 32),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y2, 4), m4), _mm256_and_si256(_mm256_srli_epi16(y1, 2), m30)));
}

// Two planes of the 8 rows' 8-bit factors at p (sub-blocks s, s + 1) as int16 pairs: lane j =
// (f_s of row j, f_s+1 of row j), the form _mm256_madd_epi16 takes. Sign-extended: Q6_K's int8
// scales, and Q4_K's uint8 mins (≤ 63, so the sign bit is clear).
inline __m256i scale_pairs8(const uint8_t* p) {
  const __m128i planes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i inter = _mm_shuffle_epi8(planes, _mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15));
  return _mm256_cvtepi8_epi16(inter);
}

// Z (AVX-512 builds, a token tile of at most 2): the code vectors in 512 bits, as
// rows8_packed_q_zmm does for Q4_0 / Q8_0. Groups q and q + 1 of a super-block's codes lie 32
// bytes apart, so one 64-byte load holds both (q in the low half, q + 1 in the high one); one
// vpermd places the token's matching code dwords, one vpdpbusd takes both, and the halves' int32
// sums are added before the sub-block's scale: the same exact integers, so the same bits, with
// half the loads, nibble splits and dot products.
#if defined(__AVX512F__)
// idx[k]: dword 2k of a 64-byte activation run in the low half, 2k + 1 in the high one.
inline void kzmm_pair_index(__m512i* idx) {
  for (int k = 0; k < 8; ++k)
    idx[k] = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(2 * k), _mm512_set1_epi32(2 * k + 1));
}
#endif

// Q6_K's four code vectors (6 bits, 0..63) of a packed step from its two vectors of low nibbles
// and its vector of high bit pairs, in 256 or 512 bits (U: the unsigned 64-bit lane view, for
// logical shifts). The shifts' lane width does not matter: every byte is masked after its shift,
// which keeps only bits that came from that same byte.
typedef unsigned long long KLanes256 __attribute__((vector_size(32)));
typedef unsigned long long KLanes512 __attribute__((vector_size(64)));
template <class U, class I>
inline void q6k_codes(I l0_, I l1_, I hv_, I* cv) {
  static_assert(sizeof(U) == sizeof(I));
  U l0, l1, hv;
  __builtin_memcpy(&l0, &l0_, sizeof l0);
  __builtin_memcpy(&l1, &l1_, sizeof l1);
  __builtin_memcpy(&hv, &hv_, sizeof hv);
  const U m4 = U{} + 0x0f0f0f0f0f0f0f0fULL, m30 = U{} + 0x3030303030303030ULL;
  const U c[4] = {(l0 & m4) | ((hv << 4) & m30), (l1 & m4) | ((hv << 2) & m30), ((l0 >> 4) & m4) | (hv & m30),
                  ((l1 >> 4) & m4) | ((hv >> 2) & m30)};
  __builtin_memcpy(cv, c, sizeof c);
}

// Q3_K's four code vectors (0..7) of a packed step (elements 128h + 32g + 4q + i, g = 0..3)
// from its qs vector (8h + q) and its hmask vector (q): bits 2g..2g+1 of each qs byte, bit
// 4h + g of each hmask byte as bit 2. As in q6k_codes, every byte is masked after its shift
// (right by at most 6, left by at most 2), which keeps only bits from that same byte.
template <class U, class I>
inline void q3k_codes(I qs_, I hm_, int h, I* cv) {
  static_assert(sizeof(U) == sizeof(I));
  U qs, hm;
  __builtin_memcpy(&qs, &qs_, sizeof qs);
  __builtin_memcpy(&hm, &hm_, sizeof hm);
  const U m3 = U{} + 0x0303030303030303ULL, m4 = U{} + 0x0404040404040404ULL;
  U c[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const int b = 4 * h + g;
    c[g] = ((qs >> (2 * g)) & m3) | ((b >= 2 ? hm >> (b - 2) : hm << (2 - b)) & m4);
  }
  __builtin_memcpy(cv, c, sizeof c);
}

// A packed Q3_K group block's 16 scales − 32 of its 8 rows as int8 planes (scale s of row j at
// out[8s + j], Q6_K's packed layout) from its 12 packed scale-byte planes: low 4 bits from planes
// 0..7 (scales 8..15: their high nibbles), high 2 bits from planes 8..11 (bits 2·(s / 4)). 16-bit
// shifts by at most 4, each byte masked after.
inline void q3k_scale_planes8(const uint8_t* blk, uint8_t* out) {
  const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
  const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 48));
  const __m256i y2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 80));
  const __m256i m0f = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
  const __m256i v[4] = {_mm256_or_si256(_mm256_and_si256(y0, m0f), _mm256_and_si256(_mm256_slli_epi16(y2, 4), m30)),
                        _mm256_or_si256(_mm256_and_si256(y1, m0f), _mm256_and_si256(_mm256_slli_epi16(y2, 2), m30)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y0, 4), m0f), _mm256_and_si256(y2, m30)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(y1, 4), m0f),
                                        _mm256_and_si256(_mm256_srli_epi16(y2, 2), m30))};
  for (int k = 0; k < 4; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * k), _mm256_sub_epi8(v[k], c32));
}

// Q6_K / Q3_K packed group blocks: where the 16 int8 scale planes are (Q3_K: unpacked into buf),
// and the shift of the codes' offset (Q6_K − 32, Q3_K − 4).
template <DType D>
inline const uint8_t* k_signed_scales(const uint8_t* blk, uint8_t* buf) {
  if constexpr (D == DType::kQ3_K) {
    q3k_scale_planes8(blk, buf);
    return buf;
  } else {
    return blk + 16;
  }
}
template <DType D>
inline constexpr int kOffsetShift = D == DType::kQ3_K ? 2 : 5;

// A packed step's codes, low nibbles to cl (sub-block 2c of group c) and high nibbles to ch
// (sub-block 2c + 1), from its code vector raw; Q5_K also their fifth bits from its qh vector hv
// (qh bytes in the same lanes): bit 2c of each byte into cl, bit 2c + 1 into ch. (256 bits:
// shifts of 16-bit lanes by at most 4 keep bit 4 of each byte from that same byte, and every
// byte is masked after.)
template <DType D, class I>
inline void k_packed_codes(I raw, I hv, int c, I* cl, I* ch) {
  if constexpr (sizeof(I) == 64) {
#if defined(__AVX512F__)
    const __m512i m0f = _mm512_set1_epi8(0x0f);
    *cl = _mm512_and_si512(raw, m0f);
    *ch = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m0f);
    if constexpr (D == DType::kQ5_K) {  // + 16 in the bytes whose bit is set (no shift by c)
      const __m512i m10 = _mm512_set1_epi8(0x10);
      *cl = _mm512_mask_add_epi8(*cl, _mm512_test_epi8_mask(hv, _mm512_set1_epi8(static_cast<char>(1 << 2 * c))), *cl,
                                 m10);
      *ch = _mm512_mask_add_epi8(*ch, _mm512_test_epi8_mask(hv, _mm512_set1_epi8(static_cast<char>(2 << 2 * c))), *ch,
                                 m10);
    }
#endif
  } else {
    const __m256i m0f = _mm256_set1_epi8(0x0f);
    *cl = _mm256_and_si256(raw, m0f);
    *ch = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m0f);
    if constexpr (D == DType::kQ5_K) {
      const int up_lo = 4 - 2 * c, up_hi = 3 - 2 * c;  // left shifts that bring bits 2c, 2c + 1 to 4
      const __m256i m10 = _mm256_set1_epi8(0x10);
      const __m256i hl = up_lo >= 0 ? _mm256_slli_epi16(hv, up_lo) : _mm256_srli_epi16(hv, -up_lo);
      const __m256i hh = up_hi >= 0 ? _mm256_slli_epi16(hv, up_hi) : _mm256_srli_epi16(hv, -up_hi);
      *cl = _mm256_or_si256(*cl, _mm256_and_si256(hl, m10));
      *ch = _mm256_or_si256(*ch, _mm256_and_si256(hh, m10));
    }
  }
}

template <DType D, int T, bool Z = false>
inline void rows8_packed_k(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kGB = 8 * k_block_bytes(D);
  const int64_t cols = a.cols, nb = cols / kKBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
#if defined(__AVX512F__)
  __m512i idx[8];
  if constexpr (Z) kzmm_pair_index(idx);
#endif
  __m256 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<kGB>(w, b);
    const uint8_t* blk = w + b * kGB;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    __m256i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    if constexpr (kquant_has_mins(D)) {
      // The 6-bit scales and mins of the 8 rows (ggml's get_scale_min_k4 on byte planes):
      // sc[s][j] at scb[8s + j], min at mnb[8s + j].
      alignas(32) uint8_t scb[64], mnb[64];
      q4k_scales_mins8(blk, scb, mnb);
#pragma GCC unroll 8
      for (int c = 0; c < 4; ++c) {  // 64 elements: sub-blocks 2c (low nibbles) and 2c + 1
        const __m256i s0 = kscale_operand(scales8_u8(scb + 16 * c));
        const __m256i s1 = kscale_operand(scales8_u8(scb + 16 * c + 8));
        __m256i lo[T], hi[T];
        if constexpr (Z) {
#if defined(__AVX512F__)
          __m512i zlo[T], zhi[T], xv[T];  // xv: the token's 64 codes of this c (low sub-block, then high)
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            zlo[t] = zhi[t] = _mm512_setzero_si512();
            xv[t] = _mm512_loadu_si512(a.kq + (t0 + t) * cols + b * kKBlock + 64 * c);
          }
#pragma GCC unroll 8
          for (int p = 0; p < 4; ++p) {  // groups 2p and 2p + 1
            __m512i cl, ch;
            k_packed_codes<D>(_mm512_loadu_si512(blk + 128 + 32 * (8 * c + 2 * p)),
                              D == DType::kQ5_K ? _mm512_loadu_si512(blk + 1152 + 64 * p) : __m512i{}, c, &cl, &ch);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
              zlo[t] = _mm512_dpbusd_epi32(zlo[t], cl, _mm512_permutexvar_epi32(idx[p], xv[t]));
              zhi[t] = _mm512_dpbusd_epi32(zhi[t], ch, _mm512_permutexvar_epi32(idx[4 + p], xv[t]));
            }
          }
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            lo[t] = kzmm_fold(zlo[t]), hi[t] = kzmm_fold(zhi[t]);
            isum[t] = kscale(kscale(isum[t], lo[t], s0), hi[t], s1);
          }
#endif
        } else {
          // AVX2's int16 runs: Q4_K all 8 groups at once, Q5_K two runs of 4 (kRunGroups).
          constexpr int kRun = kRunGroups<D> < 8 ? kRunGroups<D> : 8;
#pragma GCC unroll 8
          for (int q0 = 0; q0 < 8; q0 += kRun) {
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int q = q0; q < q0 + kRun; ++q) {
              __m256i cl, ch;
              k_packed_codes<D>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * (8 * c + q))),
                                D == DType::kQ5_K
                                    ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 1152 + 32 * q))
                                    : __m256i{},
                                c, &cl, &ch);
#pragma GCC unroll 8
              for (int t = 0; t < T; ++t) {
                const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 64 * c + 4 * q;
                lo[t] = kdot(lo[t], cl, bcast4(xq));
                hi[t] = kdot(hi[t], ch, bcast4(xq + 32));
              }
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) isum[t] = kscale(kscale(isum[t], lo[t], s0), hi[t], s1);
          }
        }
      }
      const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
      // The mins term Σ_s min_s·bsum32_s as int16 pair products (mins ≤ 63, |bsum32| ≤ 32·127).
      __m256i mpairs[4];
#pragma GCC unroll 8
      for (int p = 0; p < 4; ++p) mpairs[p] = scale_pairs8(mnb + 16 * p);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const int32_t* b32 = a.kb32 + (t0 + t) * (cols / 32) + b * 8;
        __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int p = 0; p < 4; ++p)
          msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mpairs[p], _mm256_set1_epi32(bsum32_pair(b32, p))));
        const __m256 dx = _mm256_set1_ps(a.kd[(t0 + t) * nb + b]);
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(msum), acc[t]);
      }
    } else {
      // Element 128h + 32g + 4q + i of each row: Q6_K: low 4 bits from ql vector 16h + 8(g & 1) + q
      // (g ≥ 2: its high nibbles), high 2 bits from qh vector 8h + q (bits 2g); Q3_K: q3k_codes of qs
      // vector 8h + q and hmask vector q. Sub-block 8h + 2g + q/4.
      alignas(32) uint8_t q3s[128];
      const uint8_t* scp = k_signed_scales<D>(blk, q3s);
#if defined(__AVX512F__)
      // Z: each sub-block's sums scaled in both halves (the scales broadcast), halves folded once
      // per super-block (the same exact int32 sums).
      __m512i zsum[T];
      if constexpr (Z)
        for (int t = 0; t < T; ++t) zsum[t] = _mm512_setzero_si512();
#endif
#pragma GCC unroll 8
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
        for (int qq = 0; qq < 2; ++qq) {
          __m256i sc[4];  // sub-blocks 8h + 2g + qq
#pragma GCC unroll 8
          for (int g = 0; g < 4; ++g) sc[g] = kscale_operand(scales8_i8(scp + 8 * (8 * h + 2 * g + qq)));
          if constexpr (Z) {
#if defined(__AVX512F__)
            // Groups q = 4qq + 2p and q + 1 (one sub-block per g); element 128h + 32g + 4q + i's
            // activation code is dword 8(g & 1) + q of the 64 bytes at 128h + 64(g >> 1).
            __m512i zs[T][4], xv[T][2];
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
              for (int g = 0; g < 4; ++g) zs[t][g] = _mm512_setzero_si512();
              for (int k = 0; k < 2; ++k)
                xv[t][k] = _mm512_loadu_si512(a.kq + (t0 + t) * cols + b * kKBlock + 128 * h + 64 * k);
            }
#pragma GCC unroll 8
            for (int p = 0; p < 2; ++p) {
              const int q = 4 * qq + 2 * p;
              __m512i cv[4];
              if constexpr (D == DType::kQ3_K) {
                q3k_codes<KLanes512>(_mm512_loadu_si512(blk + 112 + 32 * (8 * h + q)),
                                     _mm512_loadu_si512(blk + 624 + 32 * q), h, cv);
              } else {
                const __m512i hv = _mm512_loadu_si512(blk + 1168 + 32 * (8 * h + q));
                const __m512i l0 = _mm512_loadu_si512(blk + 144 + 32 * (16 * h + q));
                const __m512i l1 = _mm512_loadu_si512(blk + 144 + 32 * (16 * h + 8 + q));
                q6k_codes<KLanes512>(l0, l1, hv, cv);
              }
#pragma GCC unroll 8
              for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
                for (int g = 0; g < 4; ++g)
                  zs[t][g] = _mm512_dpbusd_epi32(zs[t][g], cv[g],
                                                 _mm512_permutexvar_epi32(idx[4 * (g & 1) + q / 2], xv[t][g >> 1]));
            }
#pragma GCC unroll 8
            for (int g = 0; g < 4; ++g) {
              const __m512i sz = _mm512_broadcast_i64x4(sc[g]);
#pragma GCC unroll 8
              for (int t = 0; t < T; ++t) zsum[t] = _mm512_add_epi32(zsum[t], _mm512_mullo_epi32(zs[t][g], sz));
            }
#endif
            continue;
          }
          constexpr int kRun = kRunGroups<D> < 4 ? kRunGroups<D> : 4;
#pragma GCC unroll 8
          for (int q0 = 4 * qq; q0 < 4 * qq + 4; q0 += kRun) {
            __m256i s4[T][4];
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
              for (int g = 0; g < 4; ++g) s4[t][g] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int q = q0; q < q0 + kRun; ++q) {
              __m256i cv[4];
              if constexpr (D == DType::kQ3_K) {
                q3k_codes<KLanes256>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 112 + 32 * (8 * h + q))),
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 624 + 32 * q)), h, cv);
              } else {
                const __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 1168 + 32 * (8 * h + q)));
                const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 144 + 32 * (16 * h + q)));
                const __m256i l1 =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 144 + 32 * (16 * h + 8 + q)));
                q6k_codes<KLanes256>(l0, l1, hv, cv);
              }
#pragma GCC unroll 8
              for (int t = 0; t < T; ++t) {
                const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 128 * h + 4 * q;
#pragma GCC unroll 8
                for (int g = 0; g < 4; ++g) s4[t][g] = kdot(s4[t][g], cv[g], bcast4(xq + 32 * g));
              }
            }
#pragma GCC unroll 8
            for (int g = 0; g < 4; ++g)
#pragma GCC unroll 8
              for (int t = 0; t < T; ++t) isum[t] = kscale(isum[t], s4[t][g], sc[g]);
          }
        }
      }
#if defined(__AVX512F__)
      if constexpr (Z)
        for (int t = 0; t < T; ++t) isum[t] = kzmm_fold(zsum[t]);
#endif
      // The codes' −32 (Q3_K −4): isum −= 32·Σ_s sc_s·bsum_s, as 8 int16 pair products (sub-blocks
      // 2p, 2p + 1) per token. The same int32 as subtracting 32·bsum_s from each sub-block's sum.
      __m256i off[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) off[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) {
        const __m256i pairs = scale_pairs8(scp + 16 * p);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          int32_t bs2;
          __builtin_memcpy(&bs2, a.kb + (t0 + t) * (cols / 16) + b * 16 + 2 * p, 4);
          off[t] = _mm256_add_epi32(off[t], _mm256_madd_epi16(pairs, _mm256_set1_epi32(bs2)));
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256 dx = _mm256_set1_ps(a.kd[(t0 + t) * nb + b]);
        const __m256i sum = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off[t], kOffsetShift<D>));
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(sum), acc[t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

#if defined(__AVX512F__)
// Q4_K / Q6_K, two packed groups at once (rows r0 .. r0 + 15, T tokens from t0), as
// rows16_packed_q_zmm does for Q4_0 / Q8_0: each 512-bit code vector joins the same 32-byte
// vector of both groups, the token's 4 codes are a broadcast operand of vpdpbusd, and the
// sub-block scales, mins and d of the 16 rows fill 16 lanes. The integers and f32 steps per row
// are rows8_packed_k's (so the same bits). First token tile only (t0 == 0) prefetches.
template <DType D, int T>
inline void rows16_packed_k_zmm(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kGB = 8 * k_block_bytes(D);
  const int64_t cols = a.cols, nb = cols / kKBlock;
  const uint8_t* wa = a.w + r0 * a.w_stride;
  const uint8_t* wb = wa + 8 * a.w_stride;
  const NextRowsPrefetch pf(a, t0 == 0 ? r0 : a.rows, 16, nb);  // past the last row: none
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<2 * kGB>(wa, b);
    const uint8_t* ba = wa + b * kGB;
    const uint8_t* bb = wb + b * kGB;
    const __m512 dw = _mm512_cvtph_ps(join128(ba, bb));
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    if constexpr (kquant_has_mins(D)) {
      // Each group's 6-bit scales and mins as in rows8_packed_k: sc[s][j] at scb[g][8s + j].
      alignas(32) uint8_t scb[2][64], mnb[2][64];
      q4k_scales_mins8(ba, scb[0], mnb[0]);
      q4k_scales_mins8(bb, scb[1], mnb[1]);
      for (int c = 0; c < 4; ++c) {  // 64 elements: sub-blocks 2c (low nibbles) and 2c + 1
        __m512i lo[T], hi[T];
        for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
        for (int q = 0; q < 8; ++q) {
          __m512i cl, ch;
          k_packed_codes<D>(join256(ba + 128 + 32 * (8 * c + q), bb + 128 + 32 * (8 * c + q)),
                            D == DType::kQ5_K ? join256(ba + 1152 + 32 * q, bb + 1152 + 32 * q) : __m512i{}, c, &cl,
                            &ch);
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 64 * c + 4 * q;
            lo[t] = _mm512_dpbusd_epi32(lo[t], cl, set1_x4(xq));
            hi[t] = _mm512_dpbusd_epi32(hi[t], ch, set1_x4(xq + 32));
          }
        }
        const __m512i s0 = _mm512_cvtepu8_epi32(join64(scb[0] + 16 * c, scb[1] + 16 * c));
        const __m512i s1 = _mm512_cvtepu8_epi32(join64(scb[0] + 16 * c + 8, scb[1] + 16 * c + 8));
        for (int t = 0; t < T; ++t)
          isum[t] =
              _mm512_add_epi32(_mm512_add_epi32(isum[t], _mm512_mullo_epi32(lo[t], s0)), _mm512_mullo_epi32(hi[t], s1));
      }
      const __m512 dm = _mm512_cvtph_ps(join128(ba + 16, bb + 16));
      __m512i mpairs[4];
      for (int p = 0; p < 4; ++p)
        mpairs[p] =
            _mm512_inserti64x4(_mm512_castsi256_si512(scale_pairs8(mnb[0] + 16 * p)), scale_pairs8(mnb[1] + 16 * p), 1);
      for (int t = 0; t < T; ++t) {
        const int32_t* b32 = a.kb32 + (t0 + t) * (cols / 32) + b * 8;
        __m512i msum = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p)
          msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mpairs[p], _mm512_set1_epi32(bsum32_pair(b32, p))));
        const __m512 dx = _mm512_set1_ps(a.kd[(t0 + t) * nb + b]);
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[t]), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(msum), acc[t]);
      }
    } else {
      // Element 128h + 32g + 4q + i of each row: as in rows8_packed_k; sub-block 8h + 2g + q/4.
      alignas(32) uint8_t q3s[2][128];
      const uint8_t* spa = k_signed_scales<D>(ba, q3s[0]);
      const uint8_t* spb = k_signed_scales<D>(bb, q3s[1]);
      for (int h = 0; h < 2; ++h) {
        for (int qq = 0; qq < 2; ++qq) {
          __m512i sc[4];
          for (int g = 0; g < 4; ++g) {
            const int64_t o = 8 * (8 * h + 2 * g + qq);
            sc[g] = _mm512_cvtepi8_epi32(join64(spa + o, spb + o));
          }
          __m512i s4[T][4];
          for (int t = 0; t < T; ++t)
            for (int g = 0; g < 4; ++g) s4[t][g] = _mm512_setzero_si512();
          for (int q = 4 * qq; q < 4 * qq + 4; ++q) {
            __m512i cv[4];
            if constexpr (D == DType::kQ3_K) {
              q3k_codes<KLanes512>(join256(ba + 112 + 32 * (8 * h + q), bb + 112 + 32 * (8 * h + q)),
                                   join256(ba + 624 + 32 * q, bb + 624 + 32 * q), h, cv);
            } else {
              q6k_codes<KLanes512>(join256(ba + 144 + 32 * (16 * h + q), bb + 144 + 32 * (16 * h + q)),
                                   join256(ba + 144 + 32 * (16 * h + 8 + q), bb + 144 + 32 * (16 * h + 8 + q)),
                                   join256(ba + 1168 + 32 * (8 * h + q), bb + 1168 + 32 * (8 * h + q)), cv);
            }
            for (int t = 0; t < T; ++t) {
              const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 128 * h + 4 * q;
              for (int g = 0; g < 4; ++g) s4[t][g] = _mm512_dpbusd_epi32(s4[t][g], cv[g], set1_x4(xq + 32 * g));
            }
          }
          for (int g = 0; g < 4; ++g)
            for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s4[t][g], sc[g]));
        }
      }
      // The codes' −32 (Q3_K −4) as in rows8_packed_k: isum −= 32·Σ_s sc_s·bsum_s.
      __m512i off[T];
      for (int t = 0; t < T; ++t) off[t] = _mm512_setzero_si512();
      for (int p = 0; p < 8; ++p) {
        const __m512i pairs =
            _mm512_inserti64x4(_mm512_castsi256_si512(scale_pairs8(spa + 16 * p)), scale_pairs8(spb + 16 * p), 1);
        for (int t = 0; t < T; ++t) {
          int32_t bs2;
          __builtin_memcpy(&bs2, a.kb + (t0 + t) * (cols / 16) + b * 16 + 2 * p, 4);
          off[t] = _mm512_add_epi32(off[t], _mm512_madd_epi16(pairs, _mm512_set1_epi32(bs2)));
        }
      }
      for (int t = 0; t < T; ++t) {
        const __m512 dx = _mm512_set1_ps(a.kd[(t0 + t) * nb + b]);
        const __m512i sum = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off[t], kOffsetShift<D>));
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(sum), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

// Packed Q4_K / Q6_K through rows16_packed_k_zmm, blocked as rows16_q (tiles of 4 tokens).
// Measured on Zen 5, 2 threads, weights from DRAM, against the 8-row kernel and the panels
// (PERFORMANCE.md, sixteenth pass): Q4_K from 4 tokens on 1.2–1.9× at every count up to 512;
// Q6_K 1.07× at 4 tokens, 1.3–1.45× at 16–64, behind the panels from 256 (its 4 sums per token
// and tile spill registers) and behind the 8-row kernel at 1–2 tokens.
template <DType D>
inline bool rows16_k_takes(int64_t n) {
  return n >= 4 && (kquant_has_mins(D) || n < 128);
}

template <DType D>
inline void rows16_k(const KernelArgs& a, int64_t r0, int64_t r1) {
  rows16_blocked<false>(
      a, r0, r1, [&]<int T>(TokTile<T>, int64_t t, int64_t r) { rows16_packed_k_zmm<D, T>(a, t, r); },
      [&]<int T>(TokTile<T>, int64_t t, int64_t r) { rows8_packed_k<D, T>(a, t, r); });
}
#endif

// Sub-block s's scales (ls − 32) of a packed IQ4_XS group's 8 rows, one int32 lane per row (sh:
// the rows' scales_h words widened to dwords, sl: their scales_l dwords).
inline __m256i iq4xs_scales8(__m256i sh, __m256i sl, int s) {
  return _mm256_sub_epi32(
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sl, 4 * s), _mm256_set1_epi32(0xf)),
                      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * s), _mm256_set1_epi32(3)), 4)),
      _mm256_set1_epi32(32));
}

// Packed IQ4_XS (pack_weight's layout: 8 f16 d, the rows' scales_h words and scales_l dwords, 32
// code vectors, vectors 4s..4s+3 sub-block s), 8 rows from r0 and T tokens from t0. Each code
// vector's nibbles are looked up in the level table by one vpshufb, low nibbles against the
// token's codes 32s + 4u.., high ones against 32s + 16 + 4u..; per sub-block one multiply by the 8
// rows' scales (ls − 32, unpacked in int32 lanes). VNNI: vpdpbusd with the levels + 128, the
// sub-block's 128·Σx taken off before its scale; AVX2: maddubs of |level| and x with the level's
// sign (≤ 2·127² per pair), then madd by (scale, scale). Both are rows_k's exact isum, so the same
// bits.
template <int T>
inline void rows8_packed_iq4xs(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kGB = 8 * k_block_bytes(DType::kIQ4_XS);
  const int64_t cols = a.cols, nb = cols / kKBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i lv = V::kVnni ? _mm256_xor_si256(iq4nl_levels(), _mm256_set1_epi8(-128)) : iq4nl_levels();
  __m256 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<kGB>(w, b);
    const uint8_t* blk = w + b * kGB;
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
    const __m256i sl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32));
    __m256i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i sop = kscale_operand(iq4xs_scales8(sh, sl, s));
      __m256i dot[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 + 32 * (4 * s + u)));
        const __m256i cl = _mm256_shuffle_epi8(lv, _mm256_and_si256(raw, m4));
        const __m256i ch = _mm256_shuffle_epi8(lv, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 32 * s + 4 * u;
          if constexpr (V::kVnni) {
            dot[t] = V::dot_acc(V::dot_acc(dot[t], cl, bcast4(xq)), ch, bcast4(xq + 16));
          } else {
            const __m256i pl = _mm256_maddubs_epi16(_mm256_sign_epi8(cl, cl), _mm256_sign_epi8(bcast4(xq), cl));
            const __m256i ph = _mm256_maddubs_epi16(_mm256_sign_epi8(ch, ch), _mm256_sign_epi8(bcast4(xq + 16), ch));
            isum[t] = kscale(kscale(isum[t], pl, sop), ph, sop);
          }
        }
      }
      if constexpr (V::kVnni) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const int32_t xs = a.kb32[(t0 + t) * (cols / 32) + b * 8 + s];
          isum[t] = kscale(isum[t], _mm256_sub_epi32(dot[t], _mm256_set1_epi32(128 * xs)), sop);
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_set1_ps(a.kd[(t0 + t) * nb + b]);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

// AVX2 prefill of packed IQ4_XS: wide panels (wide_panel_block_bytes(256) per super-block of a
// group of 8 rows), each level times its sub-block's scale as int16 (|level·scale| ≤ 127·32), so
// that one vpmaddwd per 16 products against the widened Q8_K codes needs no per-sub-block
// scaling and no vpsignb: Σ_s sc_s·Σ level·x = Σ_i (sc·level)_i·x_i, the same exact int32 (a
// pair ≤ 2·4064·127, a super-block < 2^28), so the same bits as rows8_packed_iq4xs.
inline void pack_panel_iq4xs_wide(const KernelArgs& a, int64_t r0, uint8_t* out) {
  constexpr int64_t kGB = 8 * k_block_bytes(DType::kIQ4_XS), kBytes = wide_panel_block_bytes(kKBlock);
  const int64_t nb = a.cols / kKBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  const __m256i m4 = _mm256_set1_epi8(0x0f), lv = iq4nl_levels();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<kGB>(w, b);
    const uint8_t* blk = w + b * kGB;
    uint8_t* o = out + b * kBytes;
    const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
    const __m256i sl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32));
    for (int s = 0; s < 8; ++s) {
      const __m256i sc = iq4xs_scales8(sh, sl, s);
      const __m256i pairs = _mm256_blend_epi16(sc, _mm256_slli_epi32(sc, 16), 0xaa);  // (sc, sc) per row
      for (int u = 0; u < 4; ++u) {
        // Low nibbles: elements 32s + 4u .. + 3 (pairs 16s + 2u, + 1); high: those + 16 (pairs + 8).
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 + 32 * (4 * s + u)));
        const __m256i codes[2] = {_mm256_shuffle_epi8(lv, _mm256_and_si256(raw, m4)),
                                  _mm256_shuffle_epi8(lv, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4))};
        for (int k = 0; k < 2; ++k) {
          __m256i first, second;
          widen_group(codes[k], &first, &second);
          uint8_t* v = o + 32 * (16 * s + 8 * k + 2 * u);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(v), _mm256_mullo_epi16(first, pairs));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + 32), _mm256_mullo_epi16(second, pairs));
        }
      }
    }
    _mm256_storeu_ps(reinterpret_cast<float*>(o + kBytes - 32),
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))));
  }
}

template <DType D>
inline void rows_k_packed(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
  const int64_t pan_stride = a.cols / kKBlock * KPanel<D>::kBytes;
  auto pack = [&](int64_t r, int64_t m, uint8_t* out) { pack_panel_k<D>(a, r, m, out); };
  auto tile = [&]<int T, int P>(TokTile<T>, TokTile<P>, const uint8_t* pan, int64_t t, int64_t r, int64_t valid) {
    panel_tile_k<D, T, P>(a, pan, pan_stride, t, r, valid);
  };
  rows_packed<kPanelTokens, V::kPanelsK>(a, r0, r1, scratch, pan_stride, pack, tile);
}

// Packed Q2_K (pack_weight's layout: 8 f16 d, 8 f16 dmin, 16 scale planes, 16 code vectors), 8
// rows from r0 and T tokens from t0: bits 2j of code vector 8h + q are the codes of elements
// 128h + 32j + 4q .. + 3 (sub-block 8h + 2j + q / 4), so one vector gives four code vectors
// (a shift and a mask each) against the token's codes 32 apart. Per sub-block the sums times its
// 8 rows' scales (low nibbles); the mins (high nibbles) as int16 pair products with the
// activations' code sums per 16, as Q4_K's. AVX2 adds the maddubs pairs of a sub-block's 4 code
// groups in int16 (≤ 4·2·3·127). rows_k's exact integers and f32 steps, so the same bits.
template <int T>
inline void rows8_packed_q2k(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kGB = 8 * k_block_bytes(DType::kQ2_K);
  const int64_t cols = a.cols, nb = cols / kKBlock;
  const uint8_t* w = a.w + r0 * a.w_stride;
  const NextRowsPrefetch pf(a, r0, 8, nb);
  const __m256i m3 = _mm256_set1_epi8(3), m0f = _mm256_set1_epi8(0x0f);
  __m256 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<kGB>(w, b);
    const uint8_t* blk = w + b * kGB;
    __m256i isum[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
      for (int k = 0; k < 2; ++k) {  // code vectors q = 4k .. 4k + 3: sub-blocks 8h + 2j + k
        __m256i s4[T][4];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          for (int j = 0; j < 4; ++j) s4[t][j] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int q = 4 * k; q < 4 * k + 4; ++q) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 160 + 32 * (8 * h + q)));
          __m256i cv[4];
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) cv[j] = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 128 * h + 4 * q;
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) s4[t][j] = kdot(s4[t][j], cv[j], bcast4(xq + 32 * j));
          }
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const __m256i sc =
              kscale_operand(_mm256_and_si256(scales8_u8(blk + 32 + 8 * (8 * h + 2 * j + k)), _mm256_set1_epi32(0x0f)));
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) isum[t] = kscale(isum[t], s4[t][j], sc);
        }
      }
    }
    // The mins (≤ 15) of sub-blocks 2p, 2p + 1 as int16 pairs against the token's code sums per 16.
    alignas(32) uint8_t mnb[128];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v)
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(mnb + 32 * v),
          _mm256_and_si256(
              _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 32 * v)), 4), m0f));
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) {
        int32_t bs2;
        __builtin_memcpy(&bs2, a.kb + (t0 + t) * (cols / 16) + b * 16 + 2 * p, 4);
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(scale_pairs8(mnb + 16 * p), _mm256_set1_epi32(bs2)));
      }
      const __m256 dx = _mm256_set1_ps(a.kd[(t0 + t) * nb + b]);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(msum), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

#if defined(__AVX512F__)
// Packed Q2_K, two groups at once (rows r0 .. r0 + 15): rows8_packed_q2k with each 512-bit code
// vector joining the same 32-byte vector of both groups and the 16 rows' scales, mins, d and dmin
// in 16 lanes (VNNI: vpdpbusd into int32). The same integers and f32 steps, so the same bits.
template <int T>
inline void rows16_packed_q2k_zmm(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kGB = 8 * k_block_bytes(DType::kQ2_K);
  const int64_t cols = a.cols, nb = cols / kKBlock;
  const uint8_t* wa = a.w + r0 * a.w_stride;
  const uint8_t* wb = wa + 8 * a.w_stride;
  const NextRowsPrefetch pf(a, t0 == 0 ? r0 : a.rows, 16, nb);  // past the last row: none
  const __m512i m3 = _mm512_set1_epi8(3);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<2 * kGB>(wa, b);
    const uint8_t* ba = wa + b * kGB;
    const uint8_t* bb = wb + b * kGB;
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 2; ++k) {
        __m512i s4[T][4];
        for (int t = 0; t < T; ++t)
          for (int j = 0; j < 4; ++j) s4[t][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int q = 4 * k; q < 4 * k + 4; ++q) {
          const __m512i raw = join256(ba + 160 + 32 * (8 * h + q), bb + 160 + 32 * (8 * h + q));
          __m512i cv[4];
          for (int j = 0; j < 4; ++j) cv[j] = _mm512_and_si512(_mm512_srli_epi16(raw, 2 * j), m3);
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 128 * h + 4 * q;
            for (int j = 0; j < 4; ++j) s4[t][j] = _mm512_dpbusd_epi32(s4[t][j], cv[j], set1_x4(xq + 32 * j));
          }
        }
        for (int j = 0; j < 4; ++j) {
          const int64_t o = 32 + 8 * (8 * h + 2 * j + k);
          const __m512i sc = _mm512_and_si512(_mm512_cvtepu8_epi32(join64(ba + o, bb + o)), _mm512_set1_epi32(0x0f));
          for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s4[t][j], sc));
        }
      }
    }
    // The mins as int16 pairs (16 rows: the two groups' planes in the two halves).
    __m512i mpairs[8];
    for (int p = 0; p < 8; ++p) {
      const __m256i lo = scale_pairs8(ba + 32 + 16 * p), hi = scale_pairs8(bb + 32 + 16 * p);
      mpairs[p] = _mm512_srai_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), 4);
      mpairs[p] = _mm512_and_si512(mpairs[p], _mm512_set1_epi16(0x0f));
    }
    const __m512 dw = _mm512_cvtph_ps(join128(ba, bb));
    const __m512 dm = _mm512_cvtph_ps(join128(ba + 16, bb + 16));
    for (int t = 0; t < T; ++t) {
      __m512i msum = _mm512_setzero_si512();
      for (int p = 0; p < 8; ++p) {
        int32_t bs2;
        __builtin_memcpy(&bs2, a.kb + (t0 + t) * (cols / 16) + b * 16 + 2 * p, 4);
        msum = _mm512_add_epi32(msum, _mm512_madd_epi16(mpairs[p], _mm512_set1_epi32(bs2)));
      }
      const __m512 dx = _mm512_set1_ps(a.kd[(t0 + t) * nb + b]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dm, dx), _mm512_cvtepi32_ps(msum), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}

// Packed IQ4_XS, two groups at once (rows r0 .. r0 + 15, T tokens from t0), as
// rows16_packed_k_zmm does for Q4_K: each 512-bit code vector joins the same 32-byte vector of
// both groups, the token's 4 codes are a broadcast operand of vpdpbusd, and the 16 rows' scales
// and d fill 16 lanes. rows8_packed_iq4xs's integers and f32 steps per row, so the same bits.
// Only the first token tile of a group (t0 == 0) prefetches the next rows.
template <int T>
inline void rows16_packed_iq4xs_zmm(const KernelArgs& a, int64_t t0, int64_t r0) {
  constexpr int64_t kGB = 8 * k_block_bytes(DType::kIQ4_XS);
  const int64_t cols = a.cols, nb = cols / kKBlock;
  const uint8_t* wa = a.w + r0 * a.w_stride;
  const uint8_t* wb = wa + 8 * a.w_stride;
  const NextRowsPrefetch pf(a, t0 == 0 ? r0 : a.rows, 16, nb);  // past the last row: none
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i lv = _mm512_broadcast_i64x4(_mm256_xor_si256(iq4nl_levels(), _mm256_set1_epi8(-128)));
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.step<2 * kGB>(wa, b);
    const uint8_t* ba = wa + b * kGB;
    const uint8_t* bb = wb + b * kGB;
    const __m512 dw = _mm512_cvtph_ps(join128(ba, bb));
    const __m512i sh = _mm512_cvtepu16_epi32(join128(ba + 16, bb + 16));
    const __m512i sl = join256(ba + 32, bb + 32);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m512i sc = _mm512_sub_epi32(
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * s), _mm512_set1_epi32(0xf)),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * s), _mm512_set1_epi32(3)), 4)),
          _mm512_set1_epi32(32));
      __m512i dot[T];
      for (int t = 0; t < T; ++t) dot[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m512i raw = join256(ba + 64 + 32 * (4 * s + u), bb + 64 + 32 * (4 * s + u));
        const __m512i cl = _mm512_shuffle_epi8(lv, _mm512_and_si512(raw, m4));
        const __m512i ch = _mm512_shuffle_epi8(lv, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = a.kq + (t0 + t) * cols + b * kKBlock + 32 * s + 4 * u;
          dot[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(dot[t], cl, set1_x4(xq)), ch, set1_x4(xq + 16));
        }
      }
      for (int t = 0; t < T; ++t) {
        const int32_t xs = a.kb32[(t0 + t) * (cols / 32) + b * 8 + s];
        isum[t] =
            _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_sub_epi32(dot[t], _mm512_set1_epi32(128 * xs)), sc));
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(a.kd[(t0 + t) * nb + b]);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(a.y + (t0 + t) * a.y_stride + r0, acc[t]);
}
#endif

// IQ4_XS and Q2_K: their packed groups at every token count (no panels). AVX-512 from 4 tokens:
// 16 rows per vector (rows16_blocked: per 64 rows, the tokens in tiles of 4); else 8 rows,
// several tokens cache-blocked as the float kernels are (a chunk of tokens' codes in L2, swept by
// 16 rows at a time). Rows not in whole groups of 8 (not packed): in place, row by row.
template <DType D>
inline void rows_k_in_groups(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
  if (!a.packed) return rows_k_small<D>(a, r0, r1);
  if constexpr (D == DType::kIQ4_XS) {
    if (a.xw != nullptr && scratch != nullptr) {  // AVX2 from kPanelMinTokens tokens: wide panels
      const int64_t pan_stride = a.cols / kKBlock * wide_panel_block_bytes(kKBlock);
      return rows_packed<kPanelTokens, 2>(
          a, r0, r1, scratch, pan_stride, [&](int64_t r, int64_t, uint8_t* out) { pack_panel_iq4xs_wide(a, r, out); },
          [&]<int T, int P>(TokTile<T>, TokTile<P>, const uint8_t* pan, int64_t t, int64_t r, int64_t valid) {
            panel_tile_wide<kKBlock, T, P>(a, pan, pan_stride, t, r, valid);
          });
    }
  }
  const auto tile8 = [&]<int T>(TokTile<T>, int64_t t, int64_t r) {
    if constexpr (D == DType::kIQ4_XS) rows8_packed_iq4xs<T>(a, t, r);
    else rows8_packed_q2k<T>(a, t, r);
  };
#if defined(__AVX512F__)
  if (!(g_kernel_variant & 32) && a.n >= 4)
    return rows16_blocked<false>(
        a, r0, r1,
        [&]<int T>(TokTile<T>, int64_t t, int64_t r) {
          if constexpr (D == DType::kIQ4_XS) rows16_packed_iq4xs_zmm<T>(a, t, r);
          else rows16_packed_q2k_zmm<T>(a, t, r);
        },
        tile8);
#endif
  cache_blocked(a, r0, r1, a.cols, [&]<int T>(TokTile<T> tt, int64_t t, int64_t rb, int64_t re) {
    for (int64_t g = rb; g < re; g += 8) tile8(tt, t, g);
  });
}

template <DType D>
inline void rows_kquant(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
#if defined(__AVX512F__)
  if (a.packed && !(g_kernel_variant & (16 | 32)) && rows16_k_takes<D>(a.n)) return rows16_k<D>(a, r0, r1);
#endif
  if (scratch != nullptr && a.n >= (a.packed ? kPackedKPanelMinTokens : kPanelMinTokens)) {
    rows_k_packed<D>(a, r0, r1, scratch);
  } else if (a.packed) {  // r0, r1 and the matrix's rows are multiples of 8
    for (int64_t rb = r0; rb < r1; rb += 8)
      token_tiles(0, a.n, [&]<int T>(TokTile<T>, int64_t t) {
#if defined(__AVX512F__)
        // Up to 2 tokens: with 4, the 512-bit tiles' accumulators would not fit the registers.
        if constexpr (T <= 2)
          if (!(g_kernel_variant & 16)) return rows8_packed_k<D, T, true>(a, t, rb);
#endif
        rows8_packed_k<D, T>(a, t, rb);
      });
  } else {
    rows_k_small<D>(a, r0, r1);
  }
}

inline void rows_any(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch) {
  switch (a.dtype) {
    case DType::kF32: rows_dtype<DType::kF32>(a, r0, r1); return;
    case DType::kF16: rows_dtype<DType::kF16>(a, r0, r1); return;
    case DType::kBF16: rows_dtype<DType::kBF16>(a, r0, r1); return;
    case DType::kQ8_0: rows_q<DType::kQ8_0>(a, r0, r1, scratch); return;
    case DType::kQ4_0: rows_q<DType::kQ4_0>(a, r0, r1, scratch); return;
    case DType::kQ5_0: rows_q<DType::kQ5_0>(a, r0, r1, scratch); return;
    case DType::kIQ4_NL: rows_q<DType::kIQ4_NL>(a, r0, r1, scratch); return;
    case DType::kQ4_1: rows_q<DType::kQ4_1>(a, r0, r1, scratch); return;
    case DType::kQ5_1: rows_q<DType::kQ5_1>(a, r0, r1, scratch); return;
    case DType::kQ3_K: rows_kquant<DType::kQ3_K>(a, r0, r1, scratch); return;
    case DType::kQ4_K: rows_kquant<DType::kQ4_K>(a, r0, r1, scratch); return;
    case DType::kQ5_K: rows_kquant<DType::kQ5_K>(a, r0, r1, scratch); return;
    case DType::kQ6_K: rows_kquant<DType::kQ6_K>(a, r0, r1, scratch); return;
    case DType::kIQ4_XS: rows_k_in_groups<DType::kIQ4_XS>(a, r0, r1, scratch); return;
    case DType::kQ2_K: rows_k_in_groups<DType::kQ2_K>(a, r0, r1, scratch); return;
    default: return;  // the dispatcher never passes other dtypes
  }
}

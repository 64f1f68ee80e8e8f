// The SIMD tile kernel of ops::attend_tile, written once against a small vector vocabulary V
// and instantiated per ISA: attention_avx2.cc and attention_avx512.cc include this file inside
// their own namespace after defining V (so no symbol is shared between files compiled with
// different -m flags, and no std template is instantiated here).
//
// Bitwise the same on every V: each score lane is one key's dot product (FMAs over head_dim, even
// and odd elements in two chains, in index order), each output element an FMA chain over the
// block's keys in order, the exponential the same polynomial per lane, and a block's sum of
// weights reduced in 8-lane chunks then hsum8. These files are compiled with -ffp-contract=off:
// every FMA is an explicit one. A row's result depends only on its query, its own keys and
// their block order — never on the other rows of its tile.
// No include guard on purpose.

inline int64_t attn_min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t attn_max(int64_t a, int64_t b) { return a > b ? a : b; }

// PagedKv's block addresses, here again: inline members of a baseline header must not be
// instantiated in a file compiled with wider -m flags (the linker could keep that copy).
inline const uint8_t* attn_kptr(const PagedKv& kv, int64_t b, int64_t h) {
  const int64_t eb = kv.dtype == DType::kF32 ? 4 : 2;
  return static_cast<const uint8_t*>(kv.k) + (b * kv.n_kv_heads + h) * kv.block_size * kv.head_dim * eb;
}
inline const uint8_t* attn_vptr(const PagedKv& kv, int64_t b, int64_t h) {
  const int64_t eb = kv.dtype == DType::kF32 ? 4 : 2;
  return static_cast<const uint8_t*>(kv.v) + (b * kv.n_kv_heads + h) * kv.block_size * kv.head_dim * eb;
}

// Software prefetch of one KV head's keys and values in block b (each `slice` bytes, contiguous).
// A decode row's blocks are separate slices of the cache (KV heads interleaved, blocks wherever
// the allocator put them), so the hardware prefetcher starts over at every block; fetching the
// next blocks' slices while this one is computed keeps the memory system busy.
inline void attn_prefetch_block(const PagedKv& kv, int64_t b, int64_t h, int64_t slice) {
  const char* kp = reinterpret_cast<const char*>(attn_kptr(kv, b, h));
  const char* vp = reinterpret_cast<const char*>(attn_vptr(kv, b, h));
  for (int64_t o = 0; o < slice; o += 64) {
    _mm_prefetch(kp + o, _MM_HINT_T0);
    _mm_prefetch(vp + o, _MM_HINT_T0);
  }
}

inline float attn_hsum8(__m256 x) {
  __m128 r = _mm256_extractf128_ps(x, 1);
  r = _mm_add_ps(r, _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// exp(x) for x <= 0 (Cephes expf: Cody-Waite reduction, degree-6 polynomial, within 2 ulp);
// x < -87 (and -inf) gives exactly 0, NaN stays NaN.
inline V::F attn_exp(V::F x) {
  using F = V::F;
  const F lo = V::set1(-87.0f);
  const F xc = V::max(lo, x);  // NaN x: x (max returns its second operand on NaN)
  const F fx = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  F r = V::fma(fx, V::set1(-0.693359375f), xc);
  r = V::fma(fx, V::set1(2.12194440e-4f), r);
  F y = V::set1(1.9875691500e-4f);
  y = V::fma(y, r, V::set1(1.3981999507e-3f));
  y = V::fma(y, r, V::set1(8.3334519073e-3f));
  y = V::fma(y, r, V::set1(4.1665795894e-2f));
  y = V::fma(y, r, V::set1(1.6666665459e-1f));
  y = V::fma(y, r, V::set1(5.0000001201e-1f));
  y = V::fma(y, V::mul(r, r), r);
  y = V::add(y, V::set1(1.0f));
  return V::zero_below(x, lo, V::ldexp(y, fx));
}

inline float attn_exp_scalar(float x) { return V::first(attn_exp(V::set1(x))); }

inline float attn_widen_bits(uint16_t h, bool f16) {
  if (f16) return _cvtsh_ss(h);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// Row-major views the kernels read from: element (row, col) at p[row · stride + col], widened to
// f32 as it is loaded (exactly: the same bits as widening first). Keys are read as (dim, key),
// values as (key, dim).
struct AttnF32 {
  const float* p;
  int64_t stride;
  V::F load(int64_t row, int64_t col) const { return V::load(p + row * stride + col); }
  float at(int64_t row, int64_t col) const { return p[row * stride + col]; }
};
struct AttnBf16 {
  const uint16_t* p;
  int64_t stride;
  V::F load(int64_t row, int64_t col) const { return V::widen_bf16(p + row * stride + col); }
  float at(int64_t row, int64_t col) const { return attn_widen_bits(p[row * stride + col], false); }
};
struct AttnF16 {
  const uint16_t* p;
  int64_t stride;
  V::F load(int64_t row, int64_t col) const { return V::widen_f16(p + row * stride + col); }
  float at(int64_t row, int64_t col) const { return attn_widen_bits(p[row * stride + col], true); }
};

// n elements of dtype d (BF16 or F16) at s -> f32 dst.
inline void attn_widen_run(const uint16_t* s, DType d, int64_t n, float* dst) {
  int64_t i = 0;
  if (d == DType::kF16) {
    for (; i + V::kLanes <= n; i += V::kLanes) V::store(dst + i, V::widen_f16(s + i));
  } else {
    for (; i + V::kLanes <= n; i += V::kLanes) V::store(dst + i, V::widen_bf16(s + i));
  }
  for (; i < n; ++i) dst[i] = attn_widen_bits(s[i], d == DType::kF16);
}

// Calls fn(keys, values) with views of block b of kv head h: bf16 / f16 read in place (widened
// in registers as they are loaded; exact, so the bits are those of widening first) and f32 in
// place when the block is a whole number of vectors; otherwise its keys (and, with n_vals > 0,
// its first n_vals values) widened / padded into scratch (padding lanes 0).
template <class Fn>
inline void attn_with_block(const PagedKv& kv, int64_t b, int64_t h, int64_t n_vals, float* kscr, float* vscr,
                            Fn&& fn) {
  const int64_t bs = kv.block_size, hd = kv.head_dim, bsp = attn_padded_block(bs);
  const uint8_t* kb = attn_kptr(kv, b, h);
  const uint8_t* vb = attn_vptr(kv, b, h);
  const bool whole = bs % V::kLanes == 0;
  if (kv.dtype == DType::kF32) {
    const float* kf = reinterpret_cast<const float*>(kb);
    const AttnF32 v{reinterpret_cast<const float*>(vb), hd};
    if (whole) return fn(AttnF32{kf, bs}, v);
    for (int64_t i = 0; i < hd; ++i) {
      for (int64_t j = 0; j < bsp; ++j) kscr[i * bsp + j] = j < bs ? kf[i * bs + j] : 0.0f;
    }
    return fn(AttnF32{kscr, bsp}, v);
  }
  const uint16_t* k16 = reinterpret_cast<const uint16_t*>(kb);
  const uint16_t* v16 = reinterpret_cast<const uint16_t*>(vb);
  if (whole) {
    if (kv.dtype == DType::kF16) return fn(AttnF16{k16, bs}, AttnF16{v16, hd});
    return fn(AttnBf16{k16, bs}, AttnBf16{v16, hd});
  }
  for (int64_t i = 0; i < hd; ++i) {
    attn_widen_run(k16 + i * bs, kv.dtype, bs, kscr + i * bsp);
    for (int64_t j = bs; j < bsp; ++j) kscr[i * bsp + j] = 0.0f;
  }
  if (n_vals > 0) attn_widen_run(v16, kv.dtype, n_vals * hd, vscr);
  return fn(AttnF32{kscr, bsp}, AttnF32{vscr, hd});
}

// Scores of NR rows against NC vectors of keys from vector c0: s[r][k] = scale · q[r]·key k, per
// lane the even and odd elements in two FMA chains, in index order.
template <int NR, int NC, class K>
inline void attn_qk(const float* const* q, const K& keys, int64_t hd, int64_t c0, float scale, float* const* s) {
  using F = V::F;
  F a0[NR][NC], a1[NR][NC];
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < NC; ++c) a0[r][c] = a1[r][c] = V::zero();
  int64_t i = 0;
  for (; i + 2 <= hd; i += 2) {
    F k0[NC], k1[NC];
    for (int c = 0; c < NC; ++c) k0[c] = keys.load(i, (c0 + c) * V::kLanes);
    for (int r = 0; r < NR; ++r) {
      const F q0 = V::set1(q[r][i]);
      for (int c = 0; c < NC; ++c) a0[r][c] = V::fma(q0, k0[c], a0[r][c]);
    }
    for (int c = 0; c < NC; ++c) k1[c] = keys.load(i + 1, (c0 + c) * V::kLanes);
    for (int r = 0; r < NR; ++r) {
      const F q1 = V::set1(q[r][i + 1]);
      for (int c = 0; c < NC; ++c) a1[r][c] = V::fma(q1, k1[c], a1[r][c]);
    }
  }
  if (i < hd) {
    F k0[NC];
    for (int c = 0; c < NC; ++c) k0[c] = keys.load(i, (c0 + c) * V::kLanes);
    for (int r = 0; r < NR; ++r) {
      const F q0 = V::set1(q[r][i]);
      for (int c = 0; c < NC; ++c) a0[r][c] = V::fma(q0, k0[c], a0[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int c = 0; c < NC; ++c)
      V::store(s[r] + (c0 + c) * V::kLanes, V::mul(V::add(a0[r][c], a1[r][c]), V::set1(scale)));
}

// NR rows' scores over all nc key vectors: a full group (V::kQkRows) takes V::kQkVecs key vectors
// at a time; a group of 1 or 2 rows (a decode step's) takes two, so that it still has 4 to 8 FMA
// chains in flight.
template <int NR, class K>
inline void attn_qk_vecs(const float* const* q, const K& keys, int64_t hd, int64_t nc, float scale, float* const* s) {
  constexpr int NC = NR == V::kQkRows ? V::kQkVecs : NR <= 2 ? 2 : 1;
  int64_t c = 0;
  for (; c + NC <= nc; c += NC) attn_qk<NR, NC>(q, keys, hd, c, scale, s);
  for (; c < nc; ++c) attn_qk<NR, 1>(q, keys, hd, c, scale, s);
}

// Scores of rows [r0, r1) of the tile (row r: query qr[r], scores at S + r · bsp): V::kQkRows at
// a time, then pairs, then one.
template <class K>
inline void attn_qk_rows(const float* const* qr, int64_t r0, int64_t r1, const K& keys, int64_t hd, int64_t nc,
                         float scale, float* S, int64_t bsp) {
  float* s[V::kQkRows];
  int64_t r = r0;
  for (; r + V::kQkRows <= r1; r += V::kQkRows) {
    for (int k = 0; k < V::kQkRows; ++k) s[k] = S + (r + k) * bsp;
    attn_qk_vecs<V::kQkRows>(qr + r, keys, hd, nc, scale, s);
  }
  for (; r + 2 <= r1; r += 2) {
    s[0] = S + r * bsp;
    s[1] = S + (r + 1) * bsp;
    attn_qk_vecs<2>(qr + r, keys, hd, nc, scale, s);
  }
  if (r < r1) {
    s[0] = S + r * bsp;
    attn_qk_vecs<1>(qr + r, keys, hd, nc, scale, s);
  }
}

// out[r][i] = out[r][i] · corr[r] + Σ_j p[r · bsp + j] · v[j, i] over j < nk[r], for NR rows and
// NV vectors from element i0: each value vector is loaded once for the NR rows over the keys they
// all see, then each row's own tail. Every lane runs the same FMA chain as with NR = 1, so the
// bits do not depend on the grouping.
template <int NR, int NV, class Vals>
inline void attn_pv_rows(float* const* out, int64_t i0, const float* corr, const float* p, int64_t bsp, const Vals& v,
                         const int64_t* nk) {
  using F = V::F;
  F a[NR][NV];
  int64_t n_all = nk[0];
  for (int r = 0; r < NR; ++r) {
    const F c = V::set1(corr[r]);
    for (int k = 0; k < NV; ++k) a[r][k] = V::mul(V::load(out[r] + i0 + k * V::kLanes), c);
    n_all = attn_min(n_all, nk[r]);
  }
  for (int64_t j = 0; j < n_all; ++j) {
    F vv[NV];
    for (int k = 0; k < NV; ++k) vv[k] = v.load(j, i0 + k * V::kLanes);
    for (int r = 0; r < NR; ++r) {
      const F pj = V::set1(p[r * bsp + j]);
      for (int k = 0; k < NV; ++k) a[r][k] = V::fma(pj, vv[k], a[r][k]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int64_t j = n_all; j < nk[r]; ++j) {
      const F pj = V::set1(p[r * bsp + j]);
      for (int k = 0; k < NV; ++k) a[r][k] = V::fma(pj, v.load(j, i0 + k * V::kLanes), a[r][k]);
    }
    for (int k = 0; k < NV; ++k) V::store(out[r] + i0 + k * V::kLanes, a[r][k]);
  }
}

// attn_pv_rows for elements [i0, hd) of one row.
template <class Vals>
inline void attn_pv_row(float* out, int64_t i0, float corr, const float* p, const Vals& v, int64_t hd, int64_t nk) {
  constexpr int64_t W = V::kLanes;
  int64_t i = i0;
  float* const o[1] = {out};
  for (; i + 8 * W <= hd; i += 8 * W) attn_pv_rows<1, 8>(o, i, &corr, p, 0, v, &nk);
  for (; i + 4 * W <= hd; i += 4 * W) attn_pv_rows<1, 4>(o, i, &corr, p, 0, v, &nk);
  for (; i + W <= hd; i += W) attn_pv_rows<1, 1>(o, i, &corr, p, 0, v, &nk);
  for (; i < hd; ++i) {
    float a = out[i] * corr;
    for (int64_t j = 0; j < nk; ++j) a = __builtin_fmaf(p[j], v.at(j, i), a);
    out[i] = a;
  }
}

// NR rows over all of head_dim: NV vectors at a time, the rest row by row.
template <int NR, int NV, class Vals>
inline void attn_pv_group(float* const* orow, const float* corr, const float* S, int64_t bsp, const Vals& v, int64_t hd,
                          const int64_t* nk) {
  constexpr int64_t span = NV * V::kLanes;
  int64_t i = 0;
  for (; i + span <= hd; i += span) attn_pv_rows<NR, NV>(orow, i, corr, S, bsp, v, nk);
  if (i < hd)
    for (int k = 0; k < NR; ++k) attn_pv_row(orow[k], i, corr[k], S + k * bsp, v, hd, nk[k]);
}

// The weighted values of rows [r0, r1) of the tile into their outputs: groups of V::kPvRows rows
// over V::kPvVecs vectors at a time, then pairs over twice as many (a decode step's two query
// heads share each value load), then one row.
template <class Vals>
inline void attn_pv_tile(float* const* orow, int64_t r0, int64_t r1, const float* corr, const float* S, int64_t bsp,
                         const Vals& v, int64_t hd, const int64_t* nk) {
  int64_t r = r0;
  for (; r + V::kPvRows <= r1; r += V::kPvRows)
    attn_pv_group<V::kPvRows, V::kPvVecs>(orow + r, corr + r, S + r * bsp, bsp, v, hd, nk + r);
  for (; r + 2 <= r1; r += 2) attn_pv_group<2, 2 * V::kPvVecs>(orow + r, corr + r, S + r * bsp, bsp, v, hd, nk + r);
  if (r < r1) attn_pv_row(orow[r], 0, corr[r], S + r * bsp, v, hd, nk[r]);
}

// Lanes k >= n of s -> -inf (n may be <= 0 or >= the width). Returns the masked scores' maximum
// with m.
inline float attn_mask_max(float* s, int64_t nc, int64_t n, float m) {
  V::F mx = V::set1(m);
  for (int64_t c = 0; c < nc; ++c) {
    const V::F x = V::mask_tail(V::load(s + c * V::kLanes), n - c * V::kLanes);
    V::store(s + c * V::kLanes, x);
    mx = V::max(mx, x);
  }
  return V::hmax(mx);
}

// s[k] -> exp(s[k] - m); returns their sum (8-lane chunks in order, then hsum8).
inline float attn_exp_sum(float* s, int64_t nc, float m) {
  __m256 acc = _mm256_setzero_ps();
  const V::F mv = V::set1(m);
  for (int64_t c = 0; c < nc; ++c) {
    const V::F p = attn_exp(V::sub(V::load(s + c * V::kLanes), mv));
    V::store(s + c * V::kLanes, p);
    acc = V::sum8(acc, p);
  }
  return attn_hsum8(acc);
}

// out[i] = exp(a[i] - b[i]) for i < n, V::kLanes at a time (each lane the polynomial of
// attn_exp_scalar).
inline void attn_exp_diff(const float* a, const float* b, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(out + i, attn_exp(V::sub(V::load(a + i), V::load(b + i))));
  for (; i < n; ++i) out[i] = attn_exp_scalar(a[i] - b[i]);
}

// 8 f32 -> 8 f16 / bf16 bits, rounded exactly as core/fp16.h's f32_to_f16 / f32_to_bf16: to
// nearest even; NaN -> the sign with 0x7e00 (f16) or the top half with the quiet bit (bf16).
// 256-bit and F16C only, so both ISA files run the same instructions.
inline __m128i attn_narrow8(const float* x, DType d) {
  const __m256 v = _mm256_loadu_ps(x);
  const __m256i u = _mm256_castps_si256(v);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  if (d == DType::kF16) {  // vcvtps2ph rounds to nearest even; a NaN's payload is first made 0x7fc00000's
    const __m256i qnan =
        _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32(INT32_MIN)), _mm256_set1_epi32(0x7fc00000));
    return _mm256_cvtps_ph(_mm256_castsi256_ps(_mm256_blendv_epi8(u, qnan, nan)), _MM_FROUND_TO_NEAREST_INT);
  }
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
  // The 8 results are below 2^16: pack within each 128-bit lane, then gather the two low halves.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(packed);
}

// ops::kv_store for BF16 / F16 caches, heads [h0, h1): each head's rows narrowed 8 at a time; the
// values go in as they are, the keys (transposed: dim i of slot j at i · block_size + j) one
// element at a time.
inline void kv_store_any(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row, int64_t h0,
                         int64_t h1) {
  const int64_t block = slot / kv.block_size, off = slot % kv.block_size, hd = kv.head_dim, bs = kv.block_size;
  for (int64_t h = h0; h < h1; ++h) {
    uint16_t* kb = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(attn_kptr(kv, block, h))) + off;
    uint16_t* vb = reinterpret_cast<uint16_t*>(const_cast<uint8_t*>(attn_vptr(kv, block, h))) + off * hd;
    const float* kr = k_row + h * hd;
    const float* vr = v_row + h * hd;
    int64_t i = 0;
    for (; i + 8 <= hd; i += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(vb + i), attn_narrow8(vr + i, kv.dtype));
      alignas(16) uint16_t kh[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(kh), attn_narrow8(kr + i, kv.dtype));
      for (int j = 0; j < 8; ++j) kb[(i + j) * bs] = kh[j];
    }
    for (; i < hd; ++i) {  // the tail: through a padded vector, one element kept
      alignas(16) float pad[8] = {};
      alignas(16) uint16_t o[8];
      pad[0] = vr[i];
      pad[1] = kr[i];
      _mm_store_si128(reinterpret_cast<__m128i*>(o), attn_narrow8(pad, kv.dtype));
      vb[i] = o[0];
      kb[i * bs] = o[1];
    }
  }
}

inline void attend_tile_any(const AttendTile& t, const PagedKv& kv, float* scratch) {
  const int64_t bs = kv.block_size, hd = kv.head_dim, bsp = attn_padded_block(bs);
  const int64_t nc = (bs + V::kLanes - 1) / V::kLanes;
  const int64_t R = t.n_pos * t.n_q;
  float* m = scratch;
  float* l = m + R;
  float* S = l + R;
  float* kscr = S + R * bsp;
  float* vscr = kscr + hd * bsp;
  // Row pointers on the stack: tiles are small (attend_tile_positions).
  constexpr int64_t kMaxRows = 256;
  const float* qr[kMaxRows];
  float* orow[kMaxRows];
  float bm[kMaxRows], corr[kMaxRows];  // per block: each row's new maximum, rescale and visible keys
  int64_t nk[kMaxRows];
  // A prefill tile's query rows and outputs live in contiguous scratch: activation rows are a
  // position's width apart (8 KiB for 16 heads × 128), so a tile's positions would share L1 sets.
  float* qbuf = vscr + bs * hd;
  float* obuf = qbuf + R * hd;
  const bool packed = t.n_pos > 1;
  for (int64_t i = 0; i < t.n_pos; ++i) {
    for (int64_t j = 0; j < t.n_q; ++j) {
      const int64_t r = i * t.n_q + j;
      qr[r] = t.q + i * t.q_stride + j * hd;
      orow[r] = t.out + i * t.out_stride + j * hd;
      if (packed) {
        for (int64_t e = 0; e < hd; ++e) qbuf[r * hd + e] = qr[r][e];
        qr[r] = qbuf + r * hd;
        orow[r] = obuf + r * hd;
      }
      m[r] = -__builtin_inff();
      l[r] = 0.0f;
      for (int64_t e = 0; e < hd; ++e) orow[r][e] = 0.0f;
    }
  }
  const int64_t max_ctx = t.pos0 + t.n_pos;
  const int64_t n_blocks = (max_ctx + bs - 1) / bs;
  const int64_t slice = bs * hd * (kv.dtype == DType::kF32 ? 4 : 2);
  const int64_t ahead =
      g_attn_prefetch_bytes > 0 ? attn_max(1, (g_attn_prefetch_bytes + 2 * slice - 1) / (2 * slice)) : 0;
  for (int64_t j = 1; j < attn_min(ahead, n_blocks); ++j) attn_prefetch_block(kv, t.block_table[j], t.kv_head, slice);
  for (int64_t start = 0; start < max_ctx; start += bs) {
    const int64_t i_min = attn_max(0, start - t.pos0);  // positions that see this block
    const int64_t r0 = i_min * t.n_q;
    const int64_t b = t.block_table[start / bs];
    if (ahead > 0 && start / bs + ahead < n_blocks)
      attn_prefetch_block(kv, t.block_table[start / bs + ahead], t.kv_head, slice);
    attn_with_block(kv, b, t.kv_head, attn_min(bs, max_ctx - start), kscr, vscr,
                    [&](const auto& keys, const auto& vals) {
                      attn_qk_rows(qr, r0, R, keys, hd, nc, t.scale, S, bsp);
                      for (int64_t r = r0; r < R; ++r) {
                        nk[r] = attn_min(bs, t.pos0 + r / t.n_q + 1 - start);
                        bm[r] = attn_mask_max(S + r * bsp, nc, nk[r], m[r]);
                      }
                      attn_exp_diff(m + r0, bm + r0, R - r0, corr + r0);  // exp(-inf) = 0 on the first block
                      for (int64_t r = r0; r < R; ++r) {
                        l[r] = __builtin_fmaf(l[r], corr[r], attn_exp_sum(S + r * bsp, nc, bm[r]));
                        m[r] = bm[r];
                      }
                      attn_pv_tile(orow, r0, R, corr, S, bsp, vals, hd, nk);
                    });
  }
  for (int64_t r = 0; r < R; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* o = orow[r];
    int64_t e = 0;
    for (; e + V::kLanes <= hd; e += V::kLanes) V::store(o + e, V::mul(V::load(o + e), V::set1(inv)));
    for (; e < hd; ++e) o[e] *= inv;
  }
  if (packed) {
    for (int64_t i = 0; i < t.n_pos; ++i)
      for (int64_t j = 0; j < t.n_q; ++j) {
        const int64_t r = i * t.n_q + j;
        float* dst = t.out + i * t.out_stride + j * hd;
        for (int64_t e = 0; e < hd; ++e) dst[e] = orow[r][e];
      }
  }
  if (t.n_sink == nullptr) return;
  // Attention sinks: the first positions' weights under the final maximum and sum, from the same
  // scores (same kernel, same inputs) the loop normalised.
  for (int64_t i = 0; i < attn_min(t.n_sink_pos, t.n_pos); ++i) {
    if (t.n_sink[i] == 0) continue;
    const int64_t cnt = attn_min(t.n_sink[i], t.pos0 + i + 1);
    for (int64_t j = 0; j < t.n_q; ++j) {
      const int64_t r = i * t.n_q + j;
      float mass = 0.0f;
      for (int64_t start = 0; start < cnt; start += bs) {
        attn_with_block(kv, t.block_table[start / bs], t.kv_head, 0, kscr, vscr, [&](const auto& keys, const auto&) {
          attn_qk_rows(qr, r, r + 1, keys, hd, nc, t.scale, S, bsp);
        });
        float* s = S + r * bsp;
        attn_mask_max(s, nc, attn_min(bs, cnt - start), m[r]);
        mass += attn_exp_sum(s, nc, m[r]);
      }
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      const float share = mass * inv;
      t.sink_mass[i * t.sink_stride + j] = share < 1.0f ? share : 1.0f;  // not above 1 by rounding
    }
  }
}

// The vector loops of ops/activation.h, written once against a GCC/Clang vector type: the
// including file (activation.cc: 4 lanes, the portable fallback; activation_avx2.cc: 8;
// activation_avx512.cc: 16) defines `Vec` and includes vexp_inl.h and this file inside its own
// namespace, so no symbol is shared between files compiled with different -m flags.
//
// Bitwise the same at every width: each lane runs the same IEEE operations in the same order
// (these files are compiled without FMA contraction), and a tail goes through the same lanes
// padded with zeros, so an element's result depends on its inputs alone — not on the ISA, on n or
// on where a caller splits a row. No include guard on purpose.

constexpr int64_t kVec = sizeof(Vec) / sizeof(float);

// Elements [i, i + m) of p as a vector, m <= kVec; missing lanes 0.
inline void load_part(Vec& v, const float* p, int64_t m) {
  if (m == kVec) {
    __builtin_memcpy(&v, p, sizeof v);
    return;
  }
  float lane[kVec] = {};
  for (int64_t j = 0; j < m; ++j) lane[j] = p[j];
  __builtin_memcpy(&v, lane, sizeof v);
}

inline void store_part(float* p, const Vec& v, int64_t m) {
  if (m == kVec) {
    __builtin_memcpy(p, &v, sizeof v);
    return;
  }
  float lane[kVec];
  __builtin_memcpy(lane, &v, sizeof v);
  for (int64_t j = 0; j < m; ++j) p[j] = lane[j];
}

inline void exp_n_any(const float* x, int64_t n, float* out) {
  Vec v, e;
  for (int64_t i = 0; i < n; i += kVec) {
    const int64_t m = n - i < kVec ? n - i : kVec;
    load_part(v, x + i, m);
    vexp(e, v);
    store_part(out + i, e, m);
  }
}

inline void silu_mul_any(const float* gate, const float* up, int64_t n, float* out) {
  Vec g, u, e;
  for (int64_t i = 0; i < n; i += kVec) {
    const int64_t m = n - i < kVec ? n - i : kVec;
    load_part(g, gate + i, m);
    load_part(u, up + i, m);
    vexp(e, -g);
    g = g / (1.0f + e) * u;
    store_part(out + i, g, m);
  }
}

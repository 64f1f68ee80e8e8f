// e^x per lane of a GCC/Clang vector type, written once for every file that needs a vector exp:
// the including file defines `Vec` (a float vector_size type) and includes this inside its own
// namespace (per-ISA copies of the delta rule, the portable elementwise ops, the sampler), so no
// symbol is shared between files compiled with different -m flags. No include guard on purpose.
//
// Cephes expf: x = k·ln 2 + r, |r| <= ln 2 / 2, a degree-7 polynomial for e^r, 2^k from the
// exponent bits; x is clamped to [−87.3, 88.3]. Measured against exp in double over that range
// (3·10⁶ points): at most 1.01 ulp with FMA contraction, 0.97 without. NaN stays NaN.

typedef int32_t IVec __attribute__((vector_size(sizeof(Vec))));

inline void vexp(Vec& y, const Vec& x) {
  // The clamps written so that a NaN lane fails both comparisons and stays NaN.
  Vec v = x > 88.3762626647949f ? Vec{} + 88.3762626647949f : x;
  v = v < -87.3365478515625f ? Vec{} - 87.3365478515625f : v;
  const float magic = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  Vec kf = (v * 1.44269504088896341f + magic) - magic;
  const Vec r = (v - kf * 0.693359375f) - kf * -2.12194440e-4f;
  Vec p = 1.9875691500e-4f + Vec{};
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const IVec bits = (__builtin_convertvector(kf, IVec) + 127) << 23;
  Vec scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  y = p * scale;
}

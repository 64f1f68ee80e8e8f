#include "formats/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace gb {

void quantize_row_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    uint8_t* blk = out + b * 34;
    std::memcpy(blk, &d16, 2);
    for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(xb[i] * id)));
  }
}

namespace {

// ggml's Q4_0 / Q5_0 rounding of a block of 32 with 2·half levels: d = max/-half (max = the value
// of largest magnitude, so it is code 0), code = min(2·half - 1, int8(x/d + half + 0.5)). Returns
// the f16 bits of d.
uint16_t offset_codes(const float* xb, int half, int* q) {
  float amax = 0.0f, max = 0.0f;  // max keeps the sign of the largest-magnitude value
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(xb[i]) > amax) {
      amax = std::fabs(xb[i]);
      max = xb[i];
    }
  }
  const float d = max / static_cast<float>(-half);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float bias = static_cast<float>(half) + 0.5f;
  for (int i = 0; i < 32; ++i) q[i] = std::min(2 * half - 1, static_cast<int>(static_cast<int8_t>(xb[i] * id + bias)));
  return f32_to_f16(d);
}

}  // namespace

void quantize_row_q4_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    int q[32];
    const uint16_t d16 = offset_codes(x + b * 32, 8, q);
    uint8_t* blk = out + b * 18;
    std::memcpy(blk, &d16, 2);
    for (int i = 0; i < 16; ++i) blk[2 + i] = static_cast<uint8_t>(q[i] | (q[i + 16] << 4));
  }
}

void quantize_row_q5_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    int q[32];
    const uint16_t d16 = offset_codes(x + b * 32, 16, q);
    uint8_t* blk = out + b * 22;
    std::memcpy(blk, &d16, 2);
    uint32_t qh = 0;
    for (int i = 0; i < 16; ++i) blk[6 + i] = static_cast<uint8_t>((q[i] & 0xf) | (q[i + 16] & 0xf) << 4);
    for (int i = 0; i < 32; ++i) qh |= static_cast<uint32_t>(q[i] >> 4) << i;
    std::memcpy(blk + 2, &qh, 4);
  }
}

// Q4_1 / Q5_1 (ggml's quantize_row_q4_1_ref / q5_1_ref): per block of 32, d = (max − min)/(2^bits
// − 1), m = min, code = min(2^bits − 1, int8((x − min)/d + 0.5)); Q5_1's fifth bits as Q5_0's.
void quantize_row_q_1(const float* x, int64_t n, int bits, uint8_t* out) {
  const int top = (1 << bits) - 1, bb = bits == 4 ? 20 : 24, qs = bits == 4 ? 4 : 8;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float lo = xb[0], hi = xb[0];
    for (int i = 1; i < 32; ++i) lo = std::min(lo, xb[i]), hi = std::max(hi, xb[i]);
    const float d = (hi - lo) / static_cast<float>(top);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t* blk = out + b * bb;
    const uint16_t d16 = f32_to_f16(d), m16 = f32_to_f16(lo);
    std::memcpy(blk, &d16, 2);
    std::memcpy(blk + 2, &m16, 2);
    uint32_t qh = 0;
    for (int i = 0; i < 16; ++i) {
      const int q0 = std::min(top, static_cast<int>(static_cast<int8_t>((xb[i] - lo) * id + 0.5f)));
      const int q1 = std::min(top, static_cast<int>(static_cast<int8_t>((xb[i + 16] - lo) * id + 0.5f)));
      blk[qs + i] = static_cast<uint8_t>((q0 & 0xf) | (q1 & 0xf) << 4);
      qh |= static_cast<uint32_t>(q0 >> 4) << i | static_cast<uint32_t>(q1 >> 4) << (i + 16);
    }
    if (bits == 5) std::memcpy(blk + 4, &qh, 4);
  }
}

void quantize_row_q4_1(const float* x, int64_t n, uint8_t* out) { quantize_row_q_1(x, n, 4, out); }
void quantize_row_q5_1(const float* x, int64_t n, uint8_t* out) { quantize_row_q_1(x, n, 5, out); }

namespace {

constexpr int kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The index of the level nearest v (a tie goes to the upper level, as ggml's best_index_int8).
int nearest_iq4_level(float v) {
  int l = 0;
  while (l < 15 && v - static_cast<float>(kIq4Levels[l]) >= static_cast<float>(kIq4Levels[l + 1]) - v) ++l;
  return l;
}

// The weighted least-squares scale of 32 values on IQ4_NL's levels (ggml's search in
// quantize_row_iq4_nl_impl without an importance matrix: weights x², the levels chosen for 15
// trial inverse scales around 127/max, the best Σwqx²/Σwq² kept); 0 for an all-(near-)zero block.
float iq4_block_scale(const float* xb) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(xb[i]) > amax) {
      amax = std::fabs(xb[i]);
      max = xb[i];
    }
  }
  if (amax < 1e-15f) return 0.0f;
  auto fit = [&](float id, float* sumqx, float* sumq2) {
    *sumqx = *sumq2 = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float q = static_cast<float>(kIq4Levels[nearest_iq4_level(id * xb[i])]);
      const float w = xb[i] * xb[i];
      *sumqx += w * q * xb[i];
      *sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  fit(-static_cast<float>(kIq4Levels[0]) / max, &sumqx, &sumq2);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f, best = d * sumqx;
  for (int itry = -7; itry <= 7; ++itry) {
    fit(static_cast<float>(itry + kIq4Levels[0]) / max, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

}  // namespace

void quantize_row_iq4_xs(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + b * 256;
    uint8_t* blk = out + b * 136;
    float scale[8], max_scale = 0.0f, amax_scale = 0.0f;
    for (int s = 0; s < 8; ++s) {
      scale[s] = iq4_block_scale(xb + 32 * s);
      if (std::fabs(scale[s]) > amax_scale) {
        amax_scale = std::fabs(scale[s]);
        max_scale = scale[s];
      }
    }
    const float d = -max_scale / 32.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    std::memcpy(blk, &d16, 2);
    const float d_stored = f16_to_f32(d16);  // codes for the scale matmul reads (ggml uses d before rounding)
    uint16_t scales_h = 0;
    std::memset(blk + 4, 0, 132);
    for (int s = 0; s < 8; ++s) {
      const int l = std::clamp(static_cast<int>(std::nearbyint(id * scale[s])), -32, 31);
      const float dl = d_stored * static_cast<float>(l), idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      uint8_t* qs = blk + 8 + 16 * s;
      for (int i = 0; i < 16; ++i) {
        qs[i] = static_cast<uint8_t>(nearest_iq4_level(idl * xb[32 * s + i]) |
                                     nearest_iq4_level(idl * xb[32 * s + 16 + i]) << 4);
      }
      blk[4 + s / 2] |= static_cast<uint8_t>(((l + 32) & 0xf) << (4 * (s % 2)));
      scales_h |= static_cast<uint16_t>(((l + 32) >> 4) << (2 * s));
    }
    std::memcpy(blk + 2, &scales_h, 2);
  }
}

void quantize_row_iq4_nl(const float* x, int64_t n, uint8_t* out) {
  const int* kLevels = kIq4Levels;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f, max = 0.0f;  // max keeps the sign of the largest-magnitude value
    for (int i = 0; i < 32; ++i) {
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    }
    const uint16_t d16 = f32_to_f16(max / -127.0f);
    const float d = f16_to_f32(d16);
    uint8_t* blk = out + b * 18;
    std::memcpy(blk, &d16, 2);
    uint8_t q[32];
    for (int i = 0; i < 32; ++i) {  // the nearest level (levels ascend)
      int best = 0;
      for (int l = 1; l < 16; ++l)
        if (std::fabs(xb[i] - d * static_cast<float>(kLevels[l])) <
            std::fabs(xb[i] - d * static_cast<float>(kLevels[best])))
          best = l;
      q[i] = static_cast<uint8_t>(best);
    }
    for (int i = 0; i < 16; ++i) blk[2 + i] = static_cast<uint8_t>(q[i] | q[i + 16] << 4);
  }
}

namespace {

int nearest(float v) { return static_cast<int>(std::nearbyint(v)); }

float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

}  // namespace

namespace {

// Q4_K and Q5_K (ggml's block_q4_K / block_q5_K): per sub-block of 32 a 6-bit scale and min,
// codes 0..max_code with x ≈ d·sc·code − dmin·mn. Writes d, dmin and the packed scales at blk and
// the codes to q[256].
void quantize_superblock_min_k(const float* xb, int max_code, uint8_t* blk, uint8_t* q) {
  float scale[8], minv[8], max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 8; ++s) {
    float lo = 0.0f, hi = xb[32 * s];
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, xb[32 * s + i]);
      hi = std::max(hi, xb[32 * s + i]);
    }
    scale[s] = (hi - lo) / static_cast<float>(max_code);
    minv[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, minv[s]);
  }
  const float d = f16_round(max_scale / 63.0f), dmin = f16_round(max_min / 63.0f);
  put_f16(blk, d);
  put_f16(blk + 2, dmin);
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0.0f ? static_cast<uint8_t>(std::clamp(nearest(scale[s] / d), 0, 63)) : 0;
    mn[s] = dmin > 0.0f ? static_cast<uint8_t>(std::clamp(nearest(minv[s] / dmin), 0, 63)) : 0;
  }
  uint8_t* packed = blk + 4;  // ggml's get_scale_min_k4 layout
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    packed[j + 4] = static_cast<uint8_t>(mn[j] | (mn[j + 4] >> 4) << 6);
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xf) | (mn[j + 4] & 0xf) << 4);
  }
  for (int s = 0; s < 8; ++s) {
    const float ds = d * sc[s], dm = dmin * mn[s];
    for (int i = 0; i < 32; ++i)
      q[32 * s + i] =
          ds > 0.0f ? static_cast<uint8_t>(std::clamp(nearest((xb[32 * s + i] + dm) / ds), 0, max_code)) : 0;
  }
}

}  // namespace

void quantize_row_q2_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + b * 256;
    uint8_t* blk = out + b * 84;
    float scale[16], minv[16], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < 16; ++s) {
      float lo = 0.0f, hi = xb[16 * s];
      for (int i = 0; i < 16; ++i) {
        lo = std::min(lo, xb[16 * s + i]);
        hi = std::max(hi, xb[16 * s + i]);
      }
      scale[s] = (hi - lo) / 3.0f;
      minv[s] = -lo;
      max_scale = std::max(max_scale, scale[s]);
      max_min = std::max(max_min, minv[s]);
    }
    const float d = f16_round(max_scale / 15.0f), dmin = f16_round(max_min / 15.0f);
    put_f16(blk + 80, d);
    put_f16(blk + 82, dmin);
    uint8_t q[256];
    for (int s = 0; s < 16; ++s) {
      const int sc = d > 0.0f ? std::clamp(nearest(scale[s] / d), 0, 15) : 0;
      const int mn = dmin > 0.0f ? std::clamp(nearest(minv[s] / dmin), 0, 15) : 0;
      blk[s] = static_cast<uint8_t>(sc | mn << 4);
      const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(mn);
      for (int i = 0; i < 16; ++i)
        q[16 * s + i] = ds > 0.0f ? static_cast<uint8_t>(std::clamp(nearest((xb[16 * s + i] + dm) / ds), 0, 3)) : 0;
    }
    for (int h = 0; h < 2; ++h)  // element 128h + 32j + l at bits 2j of qs[32h + l]
      for (int l = 0; l < 32; ++l)
        blk[16 + 32 * h + l] = static_cast<uint8_t>(q[128 * h + l] | q[128 * h + 32 + l] << 2 |
                                                    q[128 * h + 64 + l] << 4 | q[128 * h + 96 + l] << 6);
  }
}

void quantize_row_q4_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    uint8_t* blk = out + b * 144;
    uint8_t q[256];
    quantize_superblock_min_k(x + b * 256, 15, blk, q);
    uint8_t* qs = blk + 16;  // group g: sub-block 2g in the low nibbles, 2g + 1 in the high ones
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | q[64 * g + 32 + l] << 4);
  }
}

void quantize_row_q5_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    uint8_t* blk = out + b * 176;
    uint8_t q[256];
    quantize_superblock_min_k(x + b * 256, 31, blk, q);
    // Low 4 bits as Q4_K's nibbles (at 48); bit 4 of element 32s + l is bit s of qh[l] (at 16).
    uint8_t* qh = blk + 16;
    uint8_t* qs = blk + 48;
    std::memset(qh, 0, 32);
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l)
        qs[32 * g + l] = static_cast<uint8_t>((q[64 * g + l] & 0xf) | (q[64 * g + 32 + l] & 0xf) << 4);
    for (int i = 0; i < 256; ++i) qh[i % 32] |= static_cast<uint8_t>((q[i] >> 4) << (i / 32));
  }
}

void pack_q6_K(const uint8_t* codes, const int8_t* scales, uint16_t d, uint8_t* blk) {
  std::memset(blk, 0, 192);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, g = (i % 128) / 32, l = i % 32;
    blk[64 * h + 32 * (g & 1) + l] |= static_cast<uint8_t>((codes[i] & 0xf) << (g >= 2 ? 4 : 0));
    blk[128 + 32 * h + l] |= static_cast<uint8_t>((codes[i] >> 4) << (2 * g));
  }
  std::memcpy(blk + 192, scales, 16);
  std::memcpy(blk + 208, &d, 2);
}

namespace {

// Q3_K and Q6_K: per sub-block of 16 a signed scale, codes in [-half, half − 1] with x ≈
// d·sc·code. Each sub-block's scale puts its largest-magnitude value on code −half; the scales
// are rounded to integers in [-max_sc − 1, max_sc] over the largest one's, d = fp16 of the step.
// Writes the scales, returns d and writes the codes + half to q[256].
float quantize_superblock_signed(const float* xb, int half, int max_sc, int8_t* sc, uint8_t* q) {
  float scale[16], max_scale = 0.0f, max_abs = 0.0f;
  for (int j = 0; j < 16; ++j) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const float v = xb[16 * j + i];
      if (std::fabs(v) > amax) {
        amax = std::fabs(v);
        max = v;
      }
    }
    scale[j] = max / static_cast<float>(-half);
    if (std::fabs(scale[j]) > max_abs) {
      max_abs = std::fabs(scale[j]);
      max_scale = scale[j];
    }
  }
  float d = 0.0f;
  if (max_abs > 0.0f) {
    const float iscale = static_cast<float>(-(max_sc + 1)) / max_scale;
    for (int j = 0; j < 16; ++j)
      sc[j] = static_cast<int8_t>(std::clamp(nearest(iscale * scale[j]), -max_sc - 1, max_sc));
    d = f16_round(1.0f / iscale);
  } else {
    for (int j = 0; j < 16; ++j) sc[j] = 0;
  }
  for (int i = 0; i < 256; ++i) {
    const float ds = d * sc[i / 16];
    q[i] = static_cast<uint8_t>((ds != 0.0f ? std::clamp(nearest(xb[i] / ds), -half, half - 1) : 0) + half);
  }
  return d;
}

}  // namespace

void quantize_row_q3_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    uint8_t* blk = out + b * 110;
    uint8_t q[256];
    int8_t sc[16];
    const float d = quantize_superblock_signed(x + b * 256, 4, 31, sc, q);
    // Element i = 128h + 32g + l: its low 2 bits at qs[32h + l] << 2g, its third bit (code ≥ 0)
    // in hmask[l] at bit 4h + g; scale k's low nibble in byte k % 8 (k ≥ 8: high nibble), its
    // top 2 bits in byte 8 + k % 4 at bit 2·(k / 4).
    std::memset(blk, 0, 108);
    for (int i = 0; i < 256; ++i) {
      const int h = i / 128, g = i % 128 / 32, l = i % 32;
      blk[32 + 32 * h + l] |= static_cast<uint8_t>((q[i] & 3) << (2 * g));
      blk[l] |= static_cast<uint8_t>((q[i] >> 2) << (4 * h + g));
    }
    uint8_t* s = blk + 96;
    for (int k = 0; k < 16; ++k) {
      const int v = sc[k] + 32;
      s[k % 8] |= static_cast<uint8_t>((v & 0xf) << (k < 8 ? 0 : 4));
      s[8 + k % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (k / 4)));
    }
    put_f16(blk + 108, d);
  }
}

void quantize_row_q6_K(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    uint8_t q[256];
    int8_t sc[16];
    const float d = quantize_superblock_signed(x + b * 256, 32, 127, sc, q);
    pack_q6_K(q, sc, f32_to_f16(d), out + b * 210);
  }
}

Status convert_row(const float* x, int64_t n, DType dtype, uint8_t* out) {
  switch (dtype) {
    case DType::kF32: std::memcpy(out, x, n * sizeof(float)); return Status::ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return Status::ok();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return Status::ok();
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kIQ4_NL:
      if (n % 32 != 0) return Status::error("row length " + std::to_string(n) + " is not a multiple of 32");
      (dtype == DType::kQ8_0   ? quantize_row_q8_0
       : dtype == DType::kQ4_0 ? quantize_row_q4_0
       : dtype == DType::kQ5_0 ? quantize_row_q5_0
       : dtype == DType::kQ4_1 ? quantize_row_q4_1
       : dtype == DType::kQ5_1 ? quantize_row_q5_1
                               : quantize_row_iq4_nl)(x, n, out);
      return Status::ok();
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
      if (n % 256 != 0) return Status::error("row length " + std::to_string(n) + " is not a multiple of 256");
      (dtype == DType::kQ2_K   ? quantize_row_q2_K
       : dtype == DType::kQ3_K ? quantize_row_q3_K
       : dtype == DType::kQ4_K ? quantize_row_q4_K
       : dtype == DType::kQ5_K ? quantize_row_q5_K
       : dtype == DType::kQ6_K ? quantize_row_q6_K
                               : quantize_row_iq4_xs)(x, n, out);
      return Status::ok();
    default: return Status::error("cannot convert to " + std::string(dtype_name(dtype)));
  }
}

}  // namespace gb

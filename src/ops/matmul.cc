// Matmul dispatch (ISA choice, threads, activation quantization scratch), the portable scalar
// kernels, the references, dequantization of every block format, and Q8_0 weight conversion.
#include "ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "formats/quantize.h"
#include "ops/cpu_features.h"
#include "ops/matmul_kernels.h"

namespace gb::ops {
namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

float load_bf16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_f32(h);
}

// GGML's 6-bit scale/min packing of Q4_K (get_scale_min_k4).
void q4k_scale_min(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// block_q4_K: f16 d, f16 dmin, 12 bytes of packed 6-bit scales/mins, 128 bytes of nibbles.
// Each 64-element group j uses sub-block scales 2j (low nibbles) and 2j+1 (high nibbles).
void dequantize_q4_k(const uint8_t* blk, float* out) {
  const float d = load_f16(blk);
  const float dmin = load_f16(blk + 2);
  const uint8_t* scales = blk + 4;
  const uint8_t* q = blk + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    q4k_scale_min(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    q4k_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *out++ = d1 * (q[l] & 0xf) - m1;
    for (int l = 0; l < 32; ++l) *out++ = d2 * (q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// block_q5_K: f16 d, f16 dmin, Q4_K's 12 scale/min bytes, 32 bytes of high bits (qh), 128 bytes of
// nibbles laid out as Q4_K's; element 32s + l adds 16 when bit s of qh[l] is set.
void dequantize_q5_k(const uint8_t* blk, float* out) {
  const float d = load_f16(blk);
  const float dmin = load_f16(blk + 2);
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;
  const uint8_t* q = blk + 48;
  for (int j = 0; j < 4; ++j) {
    uint8_t sc, m;
    q4k_scale_min(2 * j, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    q4k_scale_min(2 * j + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *out++ = d1 * ((q[l] & 0xf) | ((qh[l] >> (2 * j)) & 1) << 4) - m1;
    for (int l = 0; l < 32; ++l) *out++ = d2 * ((q[l] >> 4) | ((qh[l] >> (2 * j + 1)) & 1) << 4) - m2;
    q += 32;
  }
}

// block_q6_K: 128 bytes low nibbles (ql), 64 bytes high 2-bit pairs (qh), 16 int8 scales,
// f16 d. Value = d · scale[sub-block of 16] · (q6 - 32).
void dequantize_q6_k(const uint8_t* blk, float* out) {
  const uint8_t* ql = blk;
  const uint8_t* qh = blk + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
  const float d = load_f16(blk + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * sc[is + 0] * q1;
      out[l + 32] = d * sc[is + 2] * q2;
      out[l + 64] = d * sc[is + 4] * q3;
      out[l + 96] = d * sc[is + 6] * q4;
    }
    out += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// Element i (0..31) of a Q5_0 block as its unsigned 5-bit code: Q4_0's nibble (at byte 6) and bit
// i of the little-endian qh at byte 2.
int q5_0_code(const uint8_t* blk, uint32_t qh, int i) {
  const uint8_t byte = blk[6 + i % 16];
  return (i < 16 ? byte & 0x0f : byte >> 4) | static_cast<int>((qh >> i) & 1) << 4;
}

// Element i (0..31) of a Q4_1 / Q5_1 block as its unsigned code: nibbles at byte 4 (Q4_1) or 8
// (Q5_1: plus bit i of the little-endian qh at byte 4 as the fifth bit).
int q_1_code(DType t, const uint8_t* blk, int i) {
  if (t == DType::kQ4_1) return i < 16 ? blk[4 + i] & 0x0f : blk[4 + i - 16] >> 4;
  uint32_t qh;
  std::memcpy(&qh, blk + 4, 4);
  const uint8_t byte = blk[8 + i % 16];
  return (i < 16 ? byte & 0x0f : byte >> 4) | static_cast<int>((qh >> i) & 1) << 4;
}

// IQ4_NL's non-linear levels (ggml's kvalues_iq4nl): element value = d · kIq4nlLevels[nibble].
constexpr int8_t kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// block_iq4_xs: f16 d, scales_h (u16: 2 high bits per sub-block), scales_l[4] (4 low bits per
// sub-block), qs[128] (sub-block s at 16s: low nibbles its elements 0..15, high ones 16..31).
// Scale of sub-block s (0..7) in [-32, 31]; code of element i as its level.
int iq4xs_scale(const uint8_t* blk, int s) {
  uint16_t h;
  std::memcpy(&h, blk + 2, 2);
  return (((blk[4 + s / 2] >> (4 * (s % 2))) & 0xf) | ((h >> (2 * s)) & 3) << 4) - 32;
}
int iq4xs_level(const uint8_t* blk, int i) {
  const uint8_t byte = blk[8 + 16 * (i / 32) + i % 16];
  return kIq4nlLevels[(i % 32) < 16 ? byte & 0xf : byte >> 4];
}

// block_q2_K: 16 scale bytes (sub-block s of 16: scale = low nibble, min = high nibble), 64 bytes
// of 2-bit codes (element i at bits 2·(i % 128 / 32) of byte 32·(i / 128) + i % 32, Q3_K's low
// bits), f16 d, f16 dmin.
int q2_k_code(const uint8_t* blk, int i) { return (blk[16 + 32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32))) & 3; }

// block_q3_K: 32 bytes hmask, 64 bytes of 2-bit pairs (qs), 12 bytes of packed 6-bit scales, f16 d.
// Element i: 2 bits at qs[32h + l] >> 2g and the high bit hmask[l] >> (4h + g) (h = i / 128,
// g = i % 128 / 32, l = i % 32); code = bits − 4 when the high bit is clear, in [-4, 3].
int q3_k_code(const uint8_t* blk, int i) {
  const int h = i / 128, g = i % 128 / 32, l = i % 32;
  const int low = (blk[32 + 32 * h + l] >> (2 * g)) & 3;
  return low - (((blk[l] >> (4 * h + g)) & 1) ? 0 : 4);
}

// Scale k (0..15, one per 16 elements) of a Q3_K block, in [-32, 31]: low 4 bits in byte k % 8
// (k < 8: low nibble, else high), high 2 bits in byte 8 + k % 4 at bit 2·(k / 4).
int q3_k_scale(const uint8_t* blk, int k) {
  const uint8_t* s = blk + 96;
  const int low = k < 8 ? s[k] & 0xf : s[k - 8] >> 4;
  return (low | ((s[8 + k % 4] >> (2 * (k / 4))) & 3) << 4) - 32;
}

bool is_quantized_q8_path(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ5_0 || t == DType::kIQ4_NL || t == DType::kQ4_1 ||
         t == DType::kQ5_1;
}
bool is_kernel_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || is_quantized_q8_path(t);
}

// Integer dot product of one 32-element weight block (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_1, Q5_1) with
// one block of activation codes; Q4_1 / Q5_1 give their unsigned codes' sum (m is added apart).
int32_t block_isum(DType t, const uint8_t* blk, const int8_t* xq) {
  int32_t s = 0;
  if (t == DType::kQ8_0) {
    const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
    for (int i = 0; i < 32; ++i) s += static_cast<int32_t>(q[i]) * xq[i];
  } else if (t == DType::kQ4_1 || t == DType::kQ5_1) {  // the codes unsigned: the offsets are Weight::mins
    for (int i = 0; i < 32; ++i) s += q_1_code(t, blk, i) * static_cast<int32_t>(xq[i]);
  } else if (t == DType::kIQ4_NL) {
    for (int i = 0; i < 16; ++i) {
      s += kIq4nlLevels[blk[2 + i] & 0x0f] * static_cast<int32_t>(xq[i]);
      s += kIq4nlLevels[blk[2 + i] >> 4] * static_cast<int32_t>(xq[i + 16]);
    }
  } else if (t == DType::kQ5_0) {
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    for (int i = 0; i < 32; ++i) s += (q5_0_code(blk, qh, i) - 16) * static_cast<int32_t>(xq[i]);
  } else {
    for (int i = 0; i < 16; ++i) {
      s += ((blk[2 + i] & 0xf) - 8) * static_cast<int32_t>(xq[i]);
      s += ((blk[2 + i] >> 4) - 8) * static_cast<int32_t>(xq[i + 16]);
    }
  }
  return s;
}

// Element i (0..255) of a Q4_K super-block as its unsigned 4-bit code: 64-element group i/64
// holds sub-block 2j in the low nibbles of its 32 bytes and sub-block 2j+1 in the high ones.
int q4k_code(const uint8_t* blk, int i) {
  const uint8_t byte = blk[16 + 32 * (i / 64) + i % 32];
  return (i / 32) % 2 ? byte >> 4 : byte & 0xf;
}

// Element i of a Q5_K super-block as its unsigned 5-bit code: Q4_K's nibble (at byte 48) and bit
// i/32 of qh[i % 32].
int q5k_code(const uint8_t* blk, int i) {
  const uint8_t byte = blk[48 + 32 * (i / 64) + i % 32];
  const int lo = (i / 32) % 2 ? byte >> 4 : byte & 0xf;
  return lo | ((blk[16 + i % 32] >> (i / 32)) & 1) << 4;
}

// The unsigned code of element i of a Q4_K or Q5_K super-block.
int min_k_code(DType t, const uint8_t* blk, int i) { return t == DType::kQ4_K ? q4k_code(blk, i) : q5k_code(blk, i); }

// Element i of a Q6_K super-block as its unsigned 6-bit code (value = d·sc[i/16]·(code - 32)).
int q6k_code(const uint8_t* blk, int i) {
  const int h = i / 128, g = (i % 128) / 32, l = i % 32;
  const uint8_t lo = blk[64 * h + 32 * (g & 1) + l];
  const uint8_t hb = blk[128 + 32 * h + l];
  return ((g >= 2 ? lo >> 4 : lo & 0xf) | (((hb >> (2 * g)) & 3) << 4));
}

// One super-block's exact integer sums against Q8_K codes xq[256]: isum = Σ_sub-block scale ·
// Σ code·x (Q6_K: code - 32; Q3_K: its signed code, scale - 32); msum (Q4_K, Q5_K) = Σ_sub-block
// min · (sum of its 32 activation codes; Q2_K: per sub-block of 16), 0 for Q6_K, Q3_K and IQ4_XS. |isum| < 2^31: Q4_K ≤
// 8·63·32·15·127, Q5_K ≤ 8·63·32·31·127, Q6_K ≤ 16·128·16·32·127, Q3_K ≤ 16·32·16·4·127, IQ4_XS ≤
// 8·32·32·127·127, Q2_K ≤ 16·15·16·3·127.
void kquant_sums(DType t, const uint8_t* blk, const int8_t* xq, const int32_t* b32, int32_t* isum, int32_t* msum) {
  int32_t is = 0, ms = 0;
  if (kquant_has_mins(t)) {
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      q4k_scale_min(j, blk + 4, &sc, &mn);
      int32_t dot = 0;
      for (int i = 32 * j; i < 32 * j + 32; ++i) dot += min_k_code(t, blk, i) * static_cast<int32_t>(xq[i]);
      is += sc * dot;
      ms += mn * b32[j];
    }
  } else if (t == DType::kQ6_K) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) dot += (q6k_code(blk, i) - 32) * static_cast<int32_t>(xq[i]);
      is += sc[j] * dot;
    }
  } else if (t == DType::kIQ4_XS) {
    for (int j = 0; j < 8; ++j) {
      int32_t dot = 0;
      for (int i = 32 * j; i < 32 * j + 32; ++i) dot += iq4xs_level(blk, i) * static_cast<int32_t>(xq[i]);
      is += iq4xs_scale(blk, j) * dot;
    }
  } else if (t == DType::kQ2_K) {
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0, xs = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) {
        dot += q2_k_code(blk, i) * static_cast<int32_t>(xq[i]);
        xs += xq[i];
      }
      is += (blk[j] & 0xf) * dot;
      ms += (blk[j] >> 4) * xs;
    }
  } else {  // Q3_K
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) dot += q3_k_code(blk, i) * static_cast<int32_t>(xq[i]);
      is += q3_k_scale(blk, j) * dot;
    }
  }
  *isum = is;
  *msum = ms;
}

// Grow-only aligned scratch owned by one thread.
struct Scratch {
  std::unique_ptr<uint8_t[]> bytes;
  size_t capacity = 0;

  uint8_t* get(size_t n) {
    if (n > capacity) {
      capacity = std::max(n, capacity * 2);
      bytes.reset(new uint8_t[capacity + 64]);
    }
    const uintptr_t p = reinterpret_cast<uintptr_t>(bytes.get());
    return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
  }
};

KernelSet kernel_set(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kAvx512Bf16:
      return {avx512::rows_bf16dot, true,           avx2::quantize, 0, avx512::round_bf16, avx2::dequant_k,
              avx2::quantize_k,     avx2::add_mins, false};
    case Isa::kAvx512:
      return {avx512::rows,     true,           avx2::quantize, 32, nullptr, avx2::dequant_k,
              avx2::quantize_k, avx2::add_mins, false};
    case Isa::kAvx2:
      return {avx2::rows, true, avx2::quantize, 16, nullptr, avx2::dequant_k, avx2::quantize_k, avx2::add_mins, true};
    case Isa::kScalar: break;
  }
#else
  (void)isa;
#endif
  return {scalar::rows,     false, scalar::quantize, 0, nullptr, scalar::dequant_k, scalar::quantize_k,
          scalar::add_mins, false};
}

// Activation rounding of n tokens: on the calling thread when small, else split over the pool.
template <typename F>
void for_token_ranges(ThreadPool& pool, int64_t n, int64_t cols, const F& f) {
  const int n_threads = pool.size();
  if (n * cols < (int64_t{1} << 16) || n_threads == 1) {
    f(0, n);
    return;
  }
  pool.run([&](int ti) {
    const Range tr = split_range(n, ti, n_threads);
    f(tr.begin, tr.end);
  });
}

// Rows per chunk when K-quant rows are dequantized to f32 before the F32 kernel.
constexpr int64_t kDequantRows = 16;

// Rows per unit of work handed to a thread, at least 16 (a register tile, a cache line of y).
// Several tokens: about 8 units per thread so that a late thread costs little, at most 256 rows
// so that a chunk's weights stay in L2 while all tokens pass over them. Decode-shaped calls (at
// most 4 tokens: each weight byte streamed from memory once): 2 units per thread, long runs of
// contiguous rows per thread (a late thread then costs up to a quarter of the matrix). Measured
// on Zen 5 (n = 1, 2 threads, `bench_ops_matmul --variant 8 --read`), 2 against 8 units per
// thread: Q4_K / Q6_K down (1024 × 3072) 78–91% → 89–100% of the read bandwidth, qkv (1024 ×
// 1024) 50–92% → 94–113%; Qwen3-0.6B decode +4–8% (median per pair, q4_0, q4_k_m, q8_0, bf16)
// on a loaded host (PERFORMANCE.md, fifth pass). Prefetching the next chunk's first rows instead
// did not help; at n = 16 the unit count made no difference.
int64_t row_chunk(int64_t rows, int64_t n, int n_threads) {
  const bool decode = n <= kDecodeShapedTokens;
  const int64_t units = decode ? 2 : 8;
  int64_t c = rows / (static_cast<int64_t>(n_threads) * units);
  c = std::max<int64_t>(16, c / 16 * 16);
  if (!decode) c = std::min<int64_t>(c, 256);
  return c;
}

// A parallel region's rows as pieces (rows [r0, r1) of the region's matrix `job`), claimed one
// after another by whichever thread is free: on a shared host a descheduled thread then delays
// the step by one piece, not by its whole share. Where a piece ends depends only on where it
// starts, so the pieces are the same whichever threads claim them; they are whole register tiles
// (multiples of 16 rows from their matrix's first row; a matrix's last may be shorter), and a
// token's results do not depend on which thread computes which piece.
//  - Several tokens: each matrix in row_chunk's chunks.
//  - Decode-shaped calls (kDecodeShapedTokens): guided, each piece a 1 / (2 · threads) share of the
//    rows left in the whole region, at least kMinDecodePieceBytes of weights: the first pieces are
//    row_chunk's long contiguous runs, the last ones short, so the threads end together instead of
//    one of them streaming the region's last quarter-matrix alone. Measured on Zen 5, 2 threads,
//    Qwen3-0.6B tg64 (per-region timestamps, two runs each): the caller's wait for the other
//    thread 4–12 → 0.7–1.5 µs per region, the regions' time −4…−5%; t/s beside row_chunk's pieces,
//    medians of 5 interleaved pairs: q4_0 +3.1%, q8_0 +2.0%, q4_k_m +1.5% (each pair −7…+7%: a
//    noisy host). 32 KiB pieces instead of 128 KiB measured no better; pieces of 64 KiB claimed
//    from both ends of the region (one thread forward, one backward) −8…−11%.
struct RowPiece {
  size_t job;
  int64_t r0, r1;
};

class RowPieces {
 public:
  static constexpr size_t kMaxJobs = 4;

  RowPieces(const KernelArgs* args, size_t jobs, int64_t n, int n_threads)
      : jobs_(jobs), shares_(2 * int64_t{n_threads}) {
    guided_ = n <= kDecodeShapedTokens && n_threads > 1;
    start_[0] = 0;
    for (size_t j = 0; j < jobs; ++j) {
      start_[j + 1] = start_[j] + args[j].rows;
      step_[j] = guided_ ? std::max<int64_t>(16, kMinDecodePieceBytes / args[j].w_stride / 16 * 16)
                         : row_chunk(args[j].rows, n, n_threads);
    }
  }

  // The next piece into *p; false when every row is taken. Any thread.
  bool claim(RowPiece* p) {
    const int64_t total = start_[jobs_];
    int64_t g = next_.load(std::memory_order_relaxed);  // a row index over the region's matrices
    for (;;) {
      if (g >= total) return false;
      size_t j = 0;
      while (g >= start_[j + 1]) ++j;
      const int64_t rows = guided_ ? std::max(step_[j], (total - g) / shares_ / 16 * 16) : step_[j];
      const int64_t end = std::min(start_[j + 1], g + rows);
      if (next_.compare_exchange_weak(g, end, std::memory_order_relaxed)) {
        *p = {j, g - start_[j], end - start_[j]};
        return true;
      }
    }
  }

 private:
  static constexpr int64_t kMinDecodePieceBytes = 128 << 10;
  size_t jobs_;
  int64_t shares_;
  bool guided_;
  int64_t start_[kMaxJobs + 1];  // each matrix's first row in the region's row index
  int64_t step_[kMaxJobs];       // rows per chunk; guided: per piece at least
  std::atomic<int64_t> next_{0};
};
}  // namespace

int g_kernel_variant = 0;

// ---------------------------------------------------------------------------------------------
// Scalar kernels: the portable fallback (and the ISA-independent definition of the numerics).

namespace scalar {

void quantize(const float* x, int64_t cols, float* d, int8_t* q, int32_t* s) {
  for (int64_t b = 0; b < cols / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    float amax = 0.0f;
    for (int i = 0; i < kQBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    d[b] = f16_to_f32(f32_to_f16(amax / 127.f));
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    // nearbyint rounds half to even in the default rounding mode, like _mm256_round_ps.
    int32_t sum = 0;
    for (int i = 0; i < kQBlock; ++i) {
      q[b * kQBlock + i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
      sum += q[b * kQBlock + i];
    }
    if (s != nullptr) s[b] = sum;
  }
}

// As ggml's dequantize_row_q3_K: (d · scale) · code, in f32.
void dequantize_q3_k(const uint8_t* blk, float* out) {
  const float d = load_f16(blk + 108);
  for (int k = 0; k < 16; ++k) {
    const float dl = d * static_cast<float>(q3_k_scale(blk, k));
    for (int i = 16 * k; i < 16 * k + 16; ++i) out[i] = dl * static_cast<float>(q3_k_code(blk, i));
  }
}

// As ggml's dequantize_row_q2_K: (d · scale) · code − dmin · min, in f32.
void dequantize_q2_k(const uint8_t* blk, float* out) {
  const float d = load_f16(blk + 80), dmin = load_f16(blk + 82);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(blk[s] & 0xf), ml = dmin * static_cast<float>(blk[s] >> 4);
    for (int i = 16 * s; i < 16 * s + 16; ++i) out[i] = dl * static_cast<float>(q2_k_code(blk, i)) - ml;
  }
}

// As ggml's dequantize_row_iq4_xs: (d · (ls − 32)) · level, in f32.
void dequantize_iq4_xs(const uint8_t* blk, float* out) {
  const float d = load_f16(blk);
  for (int s = 0; s < 8; ++s) {
    const float dl = d * static_cast<float>(iq4xs_scale(blk, s));
    for (int i = 32 * s; i < 32 * s + 32; ++i) out[i] = dl * static_cast<float>(iq4xs_level(blk, i));
  }
}

void dequant_k(DType dtype, const uint8_t* row, int64_t cols, float* out) {
  dequant_k_row<dequantize_q4_k, dequantize_q5_k, dequantize_q6_k>(dtype, row, cols, out);
}

// The definition avx2::add_mins reproduces bitwise (8 rows in the lanes of one vector).
void add_mins(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.cols / kQBlock;
  for (int64_t t = 0; t < a.n; ++t) {
    const float* xsd = a.xsd + t * nb;
    for (int64_t r = r0; r < r1; ++r) {
      float macc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) macc = std::fma(f16_to_f32(a.mins[mins_index(a.rows, nb, r, b)]), xsd[b], macc);
      a.y[t * a.y_stride + r] += macc;
    }
  }
}

// ggml's quantize_row_q8_K_ref: per block of 256, max = the first value of largest magnitude,
// iscale = -127/max, q = round-half-even(x·iscale) (in [-127, 127]), d = 1/iscale, and the code
// sums per 16 and per 32. Beyond ggml: a block holding a NaN or ±inf, or whose iscale overflows
// (amax < ~3.7e-37), becomes all zeros (d = 0), where ggml would produce undefined codes.
void quantize_k(const float* x, int64_t cols, float* d, int8_t* q, int16_t* b16, int32_t* b32) {
  for (int64_t b = 0; b < cols / kKBlock; ++b) {
    const float* xb = x + b * kKBlock;
    int8_t* qb = q + b * kKBlock;
    float amax = 0.0f, max = 0.0f;
    bool bad = false;
    for (int i = 0; i < kKBlock; ++i) {
      const float ax = std::fabs(xb[i]);
      if (!(ax <= FLT_MAX)) bad = true;
      if (ax > amax) {
        amax = ax;
        max = xb[i];
      }
    }
    float iscale = 0.0f;
    if (!bad && amax != 0.0f) {
      iscale = -127.f / max;
      if (!(iscale - iscale == 0.0f)) iscale = 0.0f;  // overflowed to ±inf
    }
    if (iscale == 0.0f) {
      d[b] = 0.0f;
      std::memset(qb, 0, kKBlock);
    } else {
      d[b] = 1.0f / iscale;
      for (int i = 0; i < kKBlock; ++i) qb[i] = static_cast<int8_t>(std::nearbyint(xb[i] * iscale));
    }
    for (int j = 0; j < kKBlock / 16; ++j) {
      int32_t sum = 0;
      for (int i = 0; i < 16; ++i) sum += qb[16 * j + i];
      b16[b * 16 + j] = static_cast<int16_t>(sum);
    }
    for (int j = 0; j < kKBlock / 32; ++j) b32[b * 8 + j] = b16[b * 16 + 2 * j] + b16[b * 16 + 2 * j + 1];
  }
}

// The definition of the K-quant numerics (matmul_simd_inl.h computes the same bits): per
// (token, row) one f32 accumulator over the super-blocks in order, acc = fma(d_w·d_x, f32(isum),
// acc) and, for Q4_K / Q5_K, acc = fma(-(dmin_w·d_x), f32(msum), acc).
static void rows_k(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t cols = a.cols, nb = cols / kKBlock;
  const int64_t bb = dtype_info(a.dtype).block_bytes;
  const bool q4 = kquant_min_term(a.dtype);
  const int64_t d_offset = kquant_d_offset(a.dtype);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = a.w + r * a.w_stride;
    for (int64_t t = 0; t < a.n; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * bb;
        int32_t isum, msum;
        kquant_sums(a.dtype, blk, a.kq + t * cols + b * kKBlock, a.kb32 + t * (cols / 32) + b * 8, &isum, &msum);
        const float dx = a.kd[t * nb + b];
        acc = std::fma(load_f16(blk + d_offset) * dx, static_cast<float>(isum), acc);
        if (q4) acc = std::fma(-(load_f16(blk + kquant_dmin_offset(a.dtype)) * dx), static_cast<float>(msum), acc);
      }
      a.y[t * a.y_stride + r] = acc;
    }
  }
}

void rows(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* /*scratch*/) {
  const int64_t cols = a.cols;
  if (is_kquant(a.dtype)) {
    rows_k(a, r0, r1);
    return;
  }
  if (is_quantized_q8_path(a.dtype)) {
    const int64_t nb = cols / kQBlock;
    const int64_t bb = dtype_info(a.dtype).block_bytes;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = a.w + r * a.w_stride;
      for (int64_t t = 0; t < a.n; ++t) {
        const int8_t* xq = a.xq + t * cols;
        const float* xd = a.xd + t * nb;
        // The definition every SIMD kernel reproduces bitwise (matmul_simd_inl.h): exact block
        // integer sums, one fused multiply-add per block, in block order.
        float sum = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = row + b * bb;
          sum = std::fma(load_f16(blk) * xd[b], static_cast<float>(block_isum(a.dtype, blk, xq + b * kQBlock)), sum);
        }
        a.y[t * a.y_stride + r] = sum;
      }
    }
    return;
  }
  const int64_t esize = dtype_info(a.dtype).block_bytes;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = a.w + r * a.w_stride;
    for (int64_t t = 0; t < a.n; ++t) {
      const float* x = a.x + t * cols;
      float sum = 0.0f;
      for (int64_t i = 0; i < cols; ++i) {
        const uint8_t* p = row + i * esize;
        float wv;
        if (a.dtype == DType::kF32) {
          std::memcpy(&wv, p, 4);
        } else if (a.dtype == DType::kF16) {
          wv = load_f16(p);
        } else {
          wv = load_bf16(p);
        }
        sum += x[i] * wv;
      }
      a.y[t * a.y_stride + r] = sum;
    }
  }
}

}  // namespace scalar

// ---------------------------------------------------------------------------------------------

void dequantize_row(const Weight& w, int64_t r, float* out) {
  const uint8_t* row = w.data + r * row_bytes(w.dtype, w.cols);
  switch (w.dtype) {
    case DType::kF32: std::memcpy(out, row, w.cols * sizeof(float)); return;
    case DType::kF16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = load_f16(row + 2 * i);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = load_bf16(row + 2 * i);
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * 34;
        const float d = load_f16(blk);
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int i = 0; i < 32; ++i) out[b * 32 + i] = d * static_cast<float>(q[i]);
        if (w.mins != nullptr) {
          const float m = f16_to_f32(w.mins[mins_index(w.rows, w.cols / 32, r, b)]);
          for (int i = 0; i < 32; ++i) out[b * 32 + i] += m;  // ggml's q·d + m, unfused
        }
      }
      return;
    case DType::kIQ4_NL:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * 18;
        const float d = load_f16(blk);
        for (int i = 0; i < 16; ++i) {
          out[b * 32 + i] = d * static_cast<float>(kIq4nlLevels[blk[2 + i] & 0x0f]);
          out[b * 32 + i + 16] = d * static_cast<float>(kIq4nlLevels[blk[2 + i] >> 4]);
        }
      }
      return;
    case DType::kQ4_1:
    case DType::kQ5_1:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * dtype_info(w.dtype).block_bytes;
        const float d = load_f16(blk), m = load_f16(blk + 2);
        for (int i = 0; i < 32; ++i) out[b * 32 + i] = static_cast<float>(q_1_code(w.dtype, blk, i)) * d + m;
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * 18;
        const float d = load_f16(blk);
        for (int i = 0; i < 16; ++i) {
          out[b * 32 + i] = d * static_cast<float>((blk[2 + i] & 0x0f) - 8);
          out[b * 32 + i + 16] = d * static_cast<float>((blk[2 + i] >> 4) - 8);
        }
      }
      return;
    case DType::kQ5_0:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = row + b * 22;
        const float d = load_f16(blk);
        uint32_t qh;
        std::memcpy(&qh, blk + 2, 4);
        for (int i = 0; i < 16; ++i) {
          out[b * 32 + i] = d * static_cast<float>(q5_0_code(blk, qh, i) - 16);
          out[b * 32 + i + 16] = d * static_cast<float>(q5_0_code(blk, qh, i + 16) - 16);
        }
      }
      return;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
      dequant_k_row<dequantize_q4_k, dequantize_q5_k, dequantize_q6_k>(w.dtype, row, w.cols, out);
      return;
    default:
      std::memset(out, 0, w.cols * sizeof(float));  // unsupported types are rejected at load time
      return;
  }
}

void matmul_ref(const float* x, int64_t n, const Weight& w, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0;
      for (int64_t i = 0; i < w.cols; ++i) acc += static_cast<double>(x[t * w.cols + i]) * row[i];
      y[t * w.rows + r] = static_cast<float>(acc);
    }
  }
}

void matmul_ref_quantized_acts(const float* x, int64_t n, const Weight& w, float* y) {
  if (is_kquant(w.dtype)) {
    // Q8_K activations; per super-block the exact integers Σ_sub-block scale·Σ code·x (Q6_K: code - 32;
    // Q3_K: its signed code) and Σ min·Σ x, each times its f32 scale product, summed in double.
    const int64_t cols = w.cols, nb = cols / kKBlock;
    const int64_t bb = dtype_info(w.dtype).block_bytes, stride = row_bytes(w.dtype, cols);
    std::vector<float> kd(n * nb);
    std::vector<int8_t> kq(n * cols);
    std::vector<int16_t> kb(n * cols / 16);
    std::vector<int32_t> kb32(n * cols / 32);
    for (int64_t t = 0; t < n; ++t)
      quantize_activations_q8k(x + t * cols, cols, &kd[t * nb], &kq[t * cols], &kb[t * cols / 16],
                               &kb32[t * cols / 32]);
    for (int64_t r = 0; r < w.rows; ++r) {
      const uint8_t* row = w.data + r * stride;
      for (int64_t t = 0; t < n; ++t) {
        double acc = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = row + b * bb;
          const int8_t* xq = &kq[t * cols + b * kKBlock];
          const float dx = kd[t * nb + b];
          int64_t isum = 0, msum = 0;
          if (kquant_has_mins(w.dtype)) {
            for (int j = 0; j < 8; ++j) {
              uint8_t sc, mn;
              q4k_scale_min(j, blk + 4, &sc, &mn);
              int64_t dot = 0, xs = 0;
              for (int i = 32 * j; i < 32 * j + 32; ++i) {
                dot += min_k_code(w.dtype, blk, i) * xq[i];
                xs += xq[i];
              }
              isum += sc * dot;
              msum += mn * xs;
            }
            acc += static_cast<double>(load_f16(blk) * dx) * static_cast<double>(isum) -
                   static_cast<double>(load_f16(blk + 2) * dx) * static_cast<double>(msum);
          } else if (w.dtype == DType::kQ6_K) {
            const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
            for (int j = 0; j < 16; ++j) {
              int64_t dot = 0;
              for (int i = 16 * j; i < 16 * j + 16; ++i) dot += (q6k_code(blk, i) - 32) * xq[i];
              isum += sc[j] * dot;
            }
            acc += static_cast<double>(load_f16(blk + 208) * dx) * static_cast<double>(isum);
          } else if (w.dtype == DType::kQ2_K) {
            for (int j = 0; j < 16; ++j) {
              int64_t dot = 0, xs = 0;
              for (int i = 16 * j; i < 16 * j + 16; ++i) {
                dot += q2_k_code(blk, i) * xq[i];
                xs += xq[i];
              }
              isum += (blk[j] & 0xf) * dot;
              msum += (blk[j] >> 4) * xs;
            }
            acc += static_cast<double>(load_f16(blk + 80) * dx) * static_cast<double>(isum) -
                   static_cast<double>(load_f16(blk + 82) * dx) * static_cast<double>(msum);
          } else if (w.dtype == DType::kIQ4_XS) {
            for (int j = 0; j < 8; ++j) {
              int64_t dot = 0;
              for (int i = 32 * j; i < 32 * j + 32; ++i) dot += iq4xs_level(blk, i) * xq[i];
              isum += iq4xs_scale(blk, j) * dot;
            }
            acc += static_cast<double>(load_f16(blk) * dx) * static_cast<double>(isum);
          } else {  // Q3_K
            for (int j = 0; j < 16; ++j) {
              int64_t dot = 0;
              for (int i = 16 * j; i < 16 * j + 16; ++i) dot += q3_k_code(blk, i) * xq[i];
              isum += q3_k_scale(blk, j) * dot;
            }
            acc += static_cast<double>(load_f16(blk + 108) * dx) * static_cast<double>(isum);
          }
        }
        y[t * w.rows + r] = static_cast<float>(acc);
      }
    }
    return;
  }
  if (w.dtype == DType::kBF16 && kernel_set(active_isa()).round_bf16 != nullptr) {
    std::vector<float> xr(static_cast<size_t>(n * w.cols));
    for (size_t i = 0; i < xr.size(); ++i) xr[i] = bf16_to_f32(f32_to_bf16(x[i]));
    matmul_ref(xr.data(), n, w, y);
    return;
  }
  if (!is_quantized_q8_path(w.dtype)) {
    matmul_ref(x, n, w, y);
    return;
  }
  const int64_t nb = w.cols / kQBlock;
  const int64_t bb = dtype_info(w.dtype).block_bytes;
  const int64_t stride = row_bytes(w.dtype, w.cols);
  std::vector<float> xd(n * nb);
  std::vector<int8_t> xq(n * w.cols);
  for (int64_t t = 0; t < n; ++t) quantize_activations_q8(x + t * w.cols, w.cols, &xd[t * nb], &xq[t * w.cols]);
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = w.data + r * stride;
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * bb;
        const int8_t* q = &xq[t * w.cols + b * kQBlock];
        const float scale = load_f16(blk) * xd[t * nb + b];
        acc += static_cast<double>(scale) * block_isum(w.dtype, blk, q);
        if (w.mins != nullptr) {  // the offsets' term: m · d_x · Σ codes
          int64_t xsum = 0;
          for (int i = 0; i < kQBlock; ++i) xsum += q[i];
          acc += static_cast<double>(f16_to_f32(w.mins[mins_index(w.rows, nb, r, b)])) *
                 static_cast<double>(xd[t * nb + b] * static_cast<float>(xsum));
        }
      }
      y[t * w.rows + r] = static_cast<float>(acc);
    }
  }
}

void quantize_activations_q8(const float* x, int64_t cols, float* d, int8_t* q) {
  scalar::quantize(x, cols, d, q, nullptr);
}

void quantize_activations_q8k(const float* x, int64_t cols, float* d, int8_t* q, int16_t* bsums16, int32_t* bsums32) {
  scalar::quantize_k(x, cols, d, q, bsums16, bsums32);
}

Result<OwnedWeight> with_block_offsets(const Weight& w) {
  if (w.dtype != DType::kQ4_1 && w.dtype != DType::kQ5_1) {
    return Status::error("with_block_offsets: weight dtype " + std::string(dtype_name(w.dtype)) +
                         " has no block offsets (only q4_1, q5_1)");
  }
  if (w.cols % kQBlock != 0) {
    return Status::error("with_block_offsets: row length " + std::to_string(w.cols) + " is not a multiple of 32");
  }
  const int64_t nb = w.cols / kQBlock, bb = dtype_info(w.dtype).block_bytes;
  OwnedWeight o;
  o.bytes.resize(static_cast<size_t>(w.rows * nb * 2));
  uint16_t* mins = reinterpret_cast<uint16_t*>(o.bytes.data());
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      std::memcpy(&mins[mins_index(w.rows, nb, r, b)], w.data + (r * nb + b) * bb + 2, 2);
  o.weight = w;
  o.weight.mins = mins;
  return o;
}

Result<OwnedWeight> convert_to_q8(const Weight& w) {
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16) {
    return Status::error("convert_to_q8: weight dtype " + std::string(dtype_name(w.dtype)) +
                         " cannot be converted (only f32, f16, bf16)");
  }
  if (w.cols % 32 != 0) {
    return Status::error("convert_to_q8: row length " + std::to_string(w.cols) + " is not a multiple of 32");
  }
  OwnedWeight o;
  const int64_t stride = row_bytes(DType::kQ8_0, w.cols);
  o.bytes.resize(static_cast<size_t>(stride * w.rows));
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    gb::quantize_row_q8_0(row.data(), w.cols, o.bytes.data() + r * stride);
  }
  o.weight = Weight{o.bytes.data(), DType::kQ8_0, w.rows, w.cols};
  return o;
}

bool packable(const Weight& w) {
  if (w.rows <= 0 || w.rows % 8 != 0) return false;
  if (is_quantized_q8_path(w.dtype)) return w.cols % kQBlock == 0;
  if (w.dtype == DType::kBF16)
    return w.rows % 16 == 0 && w.cols % 2 == 0 && kernel_set(active_isa()).round_bf16 != nullptr;
  return is_kquant(w.dtype) && w.cols % kKBlock == 0;
}

void pack_weight(const Weight& w, uint8_t* out) {
  if (!packable(w)) return;
  if (w.dtype == DType::kBF16) {
    const int64_t stride = w.cols * 2, pairs = w.cols / 2;
    for (int64_t p = 0; p < w.rows / 16; ++p)
      for (int64_t j = 0; j < 16; ++j)
        for (int64_t i = 0; i < pairs; ++i)
          std::memcpy(out + p * 16 * stride + 64 * i + 4 * j, w.data + (16 * p + j) * stride + 4 * i, 4);
    return;
  }
  const int64_t bb = dtype_info(w.dtype).block_bytes, stride = row_bytes(w.dtype, w.cols), nb = stride / bb;
  for (int64_t g = 0; g < w.rows / 8; ++g) {
    const uint8_t* rows = w.data + g * 8 * stride;
    uint8_t* group = out + g * 8 * stride;
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t j = 0; j < 8; ++j) {
        const uint8_t* blk = rows + j * stride + b * bb;
        for (int64_t i = 0; i < bb; i += packed_run(w.dtype, i))
          std::memcpy(group + b * 8 * bb + packed_offset(w.dtype, j, i), blk + i, packed_run(w.dtype, i));
      }
    }
  }
}

bool matmul_supported(DType dtype) { return is_kernel_dtype(dtype) || is_kquant(dtype); }

namespace {

// The call's arguments for weight w, activations not yet rounded.
KernelArgs weight_args(const KernelSet& k, const float* x, int64_t n, const Weight& w, float* y) {
  KernelArgs a;
  a.x = x;
  a.n = n;
  a.packed = w.packed != nullptr && (g_kernel_variant & 4) == 0 &&
             (w.dtype == DType::kBF16 ? k.round_bf16 != nullptr : k.reads_packed);
  a.w = a.packed ? w.packed : w.data;
  a.dtype = w.dtype;
  a.rows = w.rows;
  a.cols = w.cols;
  a.w_stride = row_bytes(w.dtype, w.cols);
  a.y = y;
  a.y_stride = w.rows;
  a.mins = w.mins;
  return a;
}

// Which rounding of the activations a dtype's kernels read (one scratch buffer each).
// kQ8_0Wide / kQ8_KWide: kQ8_0 / kQ8_K plus the codes widened to int16 (KernelSet::wide_signed_panels).
enum class ActForm { kF32, kBf16, kBf16Pairs, kQ8_0, kQ8_0Wide, kQ8_K, kQ8_KWide, kCount };

ActForm act_form(const KernelSet& k, DType d, int64_t n) {
  if (d == DType::kBF16)
    return k.round_bf16 != nullptr ? ActForm::kBf16 : k.bf16_group > 0 ? ActForm::kBf16Pairs : ActForm::kF32;
  if (is_quantized_q8_path(d))
    return k.wide_signed_panels && has_signed_codes(d) && n >= kPanelMinTokens ? ActForm::kQ8_0Wide : ActForm::kQ8_0;
  if (is_kquant(d) && (g_kernel_variant & 4) == 0)
    return k.wide_signed_panels && d == DType::kIQ4_XS && n >= kPanelMinTokens ? ActForm::kQ8_KWide : ActForm::kQ8_K;
  return ActForm::kF32;
}

// One token's int8 codes [cols] -> KernelArgs::xw's pairs of that token (wide_x_offset).
void widen_codes(const int8_t* q, int64_t cols, int16_t* dst) {
  for (int64_t i = 0; i < cols / 2; ++i) dst[8 * i] = q[2 * i], dst[8 * i + 1] = q[2 * i + 1];
}

// Rounds a->x as a's dtype needs into the calling thread's scratch for that form (workers only
// read it) and points a's activation fields at it.
void round_activations(ThreadPool& pool, const KernelSet& k, KernelArgs* a) {
  const float* x = a->x;
  const int64_t n = a->n, cols = a->cols;
  const ActForm form = act_form(k, a->dtype, n);
  // A buffer per form: one call may round x in two forms (a q/k/v of IQ4_XS and Q5_K on AVX2),
  // and the second must neither overwrite nor reallocate what the first's kernels will read.
  thread_local Scratch by_form[static_cast<int>(ActForm::kCount)];
  Scratch& scratch = by_form[static_cast<int>(form)];
  switch (form) {
    case ActForm::kF32:
    case ActForm::kCount: return;
    case ActForm::kBf16: {
      const int64_t xs = bf16_x_stride(cols);
      uint16_t* xb = reinterpret_cast<uint16_t*>(scratch.get(static_cast<size_t>(n * xs * 2)));
      for_token_ranges(pool, n, cols, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          k.round_bf16(x + t * cols, cols, xb + t * xs);
          if (xs != cols) xb[t * xs + cols] = 0;
        }
      });
      a->xb = xb;
      return;
    }
    case ActForm::kBf16Pairs: {
      float* xp = reinterpret_cast<float*>(scratch.get(static_cast<size_t>(n * cols * 4)));
      const int64_t g = k.bf16_group, full = cols / g * g;
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * cols;
        float* pt = xp + t * cols;
        for (int64_t i = 0; i < full; i += g) {
          for (int64_t j = 0; j < g / 2; ++j) {
            pt[i + j] = xt[i + 2 * j];
            pt[i + g / 2 + j] = xt[i + 2 * j + 1];
          }
        }
        for (int64_t i = full; i < cols; ++i) pt[i] = xt[i];
      }
      a->xp = xp;
      return;
    }
    case ActForm::kQ8_0:
    case ActForm::kQ8_0Wide: {
      const int64_t nb = cols / kQBlock;
      const bool wide = form == ActForm::kQ8_0Wide;
      // [n·nb] f32 d | [n·nb] i32 block sums | [n·nb] f32 d · sum | [n·cols] i8 q | wide: i16 q.
      const int64_t wide_bytes = wide ? (n + 3) / 4 * 4 * cols * 2 : 0;
      uint8_t* buf = scratch.get(static_cast<size_t>(n * nb * 12 + n * cols + wide_bytes));
      float* xd = reinterpret_cast<float*>(buf);
      int32_t* xs = reinterpret_cast<int32_t*>(buf + n * nb * 4);
      float* xsd = reinterpret_cast<float*>(buf + n * nb * 8);
      int8_t* xq = reinterpret_cast<int8_t*>(buf + n * nb * 12);
      int16_t* xw = wide ? reinterpret_cast<int16_t*>(buf + n * nb * 12 + n * cols) : nullptr;
      for_token_ranges(pool, n, cols, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          k.quantize(x + t * cols, cols, xd + t * nb, xq + t * cols, xs + t * nb);
          for (int64_t b = t * nb; b < (t + 1) * nb; ++b) xsd[b] = xd[b] * static_cast<float>(xs[b]);
          if (wide) widen_codes(xq + t * cols, cols, xw + wide_x_offset(t, 0, cols));
        }
      });
      a->xd = xd;
      a->xs = xs;
      a->xsd = xsd;
      a->xq = xq;
      a->xw = xw;
      return;
    }
    case ActForm::kQ8_K:
    case ActForm::kQ8_KWide: {
      const int64_t nb = cols / kKBlock;
      const bool wide = form == ActForm::kQ8_KWide;
      // [n·nb] f32 d | [n·cols/32] i32 | [n·cols/16] i16 | [n·cols] i8 | wide: i16 q.
      const int64_t wide_bytes = wide ? (n + 3) / 4 * 4 * cols * 2 : 0;
      uint8_t* buf = scratch.get(static_cast<size_t>(n * nb * 4 + n * cols / 8 + n * cols / 8 + n * cols + wide_bytes));
      float* kd = reinterpret_cast<float*>(buf);
      int32_t* kb32 = reinterpret_cast<int32_t*>(buf + n * nb * 4);
      int16_t* kb = reinterpret_cast<int16_t*>(buf + n * nb * 4 + n * cols / 8);
      int8_t* kq = reinterpret_cast<int8_t*>(buf + n * nb * 4 + n * cols / 4);
      int16_t* xw = wide ? reinterpret_cast<int16_t*>(buf + n * nb * 4 + n * cols / 4 + n * cols) : nullptr;
      for_token_ranges(pool, n, cols, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          k.quantize_k(x + t * cols, cols, kd + t * nb, kq + t * cols, kb + t * cols / 16, kb32 + t * cols / 32);
          if (wide) widen_codes(kq + t * cols, cols, xw + wide_x_offset(t, 0, cols));
        }
      });
      a->kd = kd;
      a->kq = kq;
      a->kb = kb;
      a->kb32 = kb32;
      a->xw = xw;
      return;
    }
  }
}

// Variant bit 2 (benchmarks and one test): K-quant rows dequantized to f32 for the F32 kernel.
void matmul_kquant_via_f32(ThreadPool& pool, const KernelSet& k, const KernelArgs& a, const Weight& w) {
  const int64_t chunk = row_chunk(w.rows, a.n, pool.size());
  const int64_t n_chunks = (w.rows + chunk - 1) / chunk;
  std::atomic<int64_t> next_chunk{0};
  pool.run([&](int) {
    thread_local Scratch scratch;
    float* buf = reinterpret_cast<float*>(scratch.get(static_cast<size_t>(kDequantRows * w.cols * 4)));
    for (int64_t c; (c = next_chunk.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
      const int64_t end = std::min(w.rows, (c + 1) * chunk);
      for (int64_t r = c * chunk; r < end; r += kDequantRows) {
        const int64_t m = std::min(kDequantRows, end - r);
        for (int64_t i = 0; i < m; ++i) k.dequant_k(w.dtype, w.data + (r + i) * a.w_stride, w.cols, buf + i * w.cols);
        KernelArgs f = a;
        f.dtype = DType::kF32;
        f.w = reinterpret_cast<const uint8_t*>(buf);
        f.w_stride = w.cols * 4;
        f.rows = m;
        f.y = a.y + r;
        k.rows(f, 0, m, nullptr);
      }
    }
  });
}

// The offsets of rows [r0, r1) (one contiguous run: whole groups, then the tail rows) requested
// before the chunk's codes stream in, so that add_mins finds them in cache rather than waiting on
// each line (the run is ~6% of the codes' bytes).
void prefetch_mins(const KernelArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.cols / kQBlock;
  const char* p = reinterpret_cast<const char*>(a.mins + mins_index(a.rows, nb, r0, 0));
  const char* end = reinterpret_cast<const char*>(a.mins + mins_index(a.rows, nb, r1 - 1, nb - 1) + 1);
  for (; p < end; p += 64) __builtin_prefetch(p);
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int64_t n, const Weight& w, float* y) {
  matmul_multi(pool, x, n, {{&w, y}});
}

void matmul_multi(ThreadPool& pool, const float* x, int64_t n, std::initializer_list<MatmulOut> outs) {
  constexpr size_t kMax = RowPieces::kMaxJobs;
  if (n <= 0 || outs.size() == 0 || outs.size() > kMax) return;
  const KernelSet k = kernel_set(active_isa());
  const int n_threads = pool.size();
  KernelArgs args[kMax];
  size_t jobs = 0, pan_bytes = 0;
  bool panels = false;
  for (const MatmulOut& o : outs) {
    const Weight& w = *o.w;
    if (w.rows <= 0 || !matmul_supported(w.dtype)) continue;  // unsupported dtypes are rejected at load time
    KernelArgs& a = args[jobs];
    a = weight_args(k, x, n, w, o.y);
    // Weights whose kernels read the same rounding share it (q/k/v, gate/up: one rounding).
    size_t same = 0;
    while (same < jobs && act_form(k, args[same].dtype, n) != act_form(k, w.dtype, n)) ++same;
    if (same < jobs) {
      const KernelArgs& s = args[same];
      a.xb = s.xb, a.xp = s.xp, a.xd = s.xd, a.xq = s.xq, a.xs = s.xs, a.xsd = s.xsd, a.xw = s.xw, a.kd = s.kd,
      a.kq = s.kq, a.kb = s.kb, a.kb32 = s.kb32;
    } else {
      round_activations(pool, k, &a);
    }
    if (is_kquant(w.dtype) && (g_kernel_variant & 4) != 0) {
      matmul_kquant_via_f32(pool, k, a, w);
      continue;
    }
    // Quantized weights (and BF16 with bf16 activations) repack into panels from kPanelMinTokens on.
    if (n >= kPanelMinTokens &&
        (is_quantized_q8_path(w.dtype) || has_k_panels(w.dtype) || a.xb != nullptr || a.xw != nullptr)) {
      panels = true;
      pan_bytes = std::max(pan_bytes, static_cast<size_t>(panel_scratch_bytes(w.dtype, w.cols)));
    }
    ++jobs;
  }
  if (jobs == 0) return;
  // Rows are handed out in RowPieces; each thread sweeps all tokens over its piece. Several
  // matrices of one input share one parallel region (one wait instead of one per matrix).
  //
  // Panel scratch per job index, owned by the calling thread: the pool hands job indices to
  // whichever thread comes first, so a per-OS-thread buffer could first grow in a late step;
  // every index runs in every call, so these grow in the first call and never after.
  // (A thread_local named inside the job would be each worker's own: take the caller's here.)
  thread_local std::vector<Scratch> caller_panels;
  std::vector<Scratch>& panel_scratch = caller_panels;
  if (panels && panel_scratch.size() < static_cast<size_t>(n_threads)) panel_scratch.resize(n_threads);
  RowPieces pieces(args, jobs, n, n_threads);
  pool.run([&](int ti) {
    uint8_t* pan = panels ? panel_scratch[ti].get(pan_bytes) : nullptr;
    for (RowPiece p; pieces.claim(&p);) {
      const KernelArgs& a = args[p.job];
      if (a.mins != nullptr) prefetch_mins(a, p.r0, p.r1);
      k.rows(a, p.r0, p.r1, pan);
      if (a.mins != nullptr) k.add_mins(a, p.r0, p.r1);
    }
  });
}

}  // namespace gb::ops

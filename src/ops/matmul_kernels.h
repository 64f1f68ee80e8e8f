// Internal interface between the matmul dispatcher (matmul.cc) and the per-ISA kernel files
// (matmul_avx2.cc, matmul_avx512.cc). Plain functions over plain data only: the ISA files are
// compiled with wider -m flags, so they must not instantiate std templates that the linker
// could merge with baseline copies.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace gb::ops {

inline constexpr int64_t kQBlock = 32;   // elements per Q8_0 / Q4_0 block
inline constexpr int64_t kKBlock = 256;  // elements per Q4_K / Q5_K / Q6_K / Q8_K super-block

// Where block b of row r of a weight with `rows` rows and nb blocks per row keeps its offset in
// Weight::mins: rows in groups of 8, per group and block the 8 rows' offsets side by side (one
// vector of 8 lanes), then the rows past the last whole group, row-major.
inline constexpr int64_t mins_index(int64_t rows, int64_t nb, int64_t r, int64_t b) {
  return r < rows / 8 * 8 ? ((r / 8) * nb + b) * 8 + r % 8 : rows / 8 * 8 * nb + (r - rows / 8 * 8) * nb + b;
}

// The K-quants (and IQ4_XS, their super-block layout) with integer kernels against Q8_K activations.
inline constexpr bool is_kquant(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K ||
         t == DType::kIQ4_XS;
}
// Q4_K and Q5_K: ggml's 6-bit scales and mins per sub-block of 32 (value = d·sc·code − dmin·mn,
// codes unsigned: Q4_K 0..15, Q5_K 0..31); Q6_K: int8 scales per 16, value = d·sc·(code − 32);
// Q3_K: 6-bit scales − 32 per 16, value = d·sc·(code − 4), codes 0..7 (two low bits, the hmask
// bit as bit 2). Kernels that hold Q3_K codes as bytes may add 28 and use Q6_K's − 32. IQ4_XS:
// 6-bit scales − 32 per 32, value = d·sc·level(code), the signed levels of IQ4_NL's table. Q2_K:
// 4-bit scales and mins per 16 (low and high nibble of one byte), value = d·sc·code − dmin·mn,
// codes 0..3 (Q3_K's two low bits).
inline constexpr bool kquant_has_mins(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K; }
// The K-quants whose value subtracts dmin·mn (a second f32 term per super-block): Q4_K, Q5_K, Q2_K.
inline constexpr bool kquant_min_term(DType t) { return kquant_has_mins(t) || t == DType::kQ2_K; }
inline constexpr int64_t kquant_dmin_offset(DType t) { return t == DType::kQ2_K ? 82 : 2; }
// Byte offset of a K-quant super-block's f16 d.
inline constexpr int64_t kquant_d_offset(DType t) {
  return t == DType::kQ6_K ? 208 : t == DType::kQ3_K ? 108 : t == DType::kQ2_K ? 80 : 0;
}
// The K-quants whose prefill builds 8-row panels of pack_panel_k's layout (Q2_K reads its packed
// groups at every count; IQ4_XS too, except for AVX2's wide panels).
inline constexpr bool has_k_panels(DType t) { return is_kquant(t) && t != DType::kIQ4_XS && t != DType::kQ2_K; }

// One matmul call as the kernels see it: compute y[t, r] for every token t < n and a range of
// weight rows r.
struct KernelArgs {
  const float* x = nullptr;        // [n, cols] f32 activations
  const float* xp = nullptr;       // [n, cols] f32 activations de-interleaved for BF16 weights: in each
                                   // group of KernelSet::bf16_group elements, the even ones then the odd
                                   // ones (a bf16 pair widens to f32 with one shift and one and)
  const uint16_t* xb = nullptr;    // [n, bf16_x_stride(cols)] the activations rounded to bf16, an odd
                                   // row padded with 0 (BF16 weights at kAvx512Bf16), else null
  const float* xd = nullptr;       // [n, cols/32] f32 scales of the Q8_0-rounded activations (Q8_0/Q4_0)
  const int8_t* xq = nullptr;      // [n, cols] int8 codes of the Q8_0-rounded activations (Q8_0/Q4_0)
  const int32_t* xs = nullptr;     // [n, cols/32] the sum of each block's 32 codes: the correction for
                                   // weights stored unsigned (Q4_0 nibbles, Q8_0 codes + 128)
  const float* xsd = nullptr;      // [n, cols/32] xd · f32(xs): each block's activation sum (the offsets' term)
  const int16_t* xw = nullptr;     // xq (IQ4_XS: kq) widened to int16 in groups of 4 tokens (wide_x_offset),
                                   // where KernelSet::wide_signed_panels and n ≥ kPanelMinTokens, else null
  const uint16_t* mins = nullptr;  // Q4_1 / Q5_1: Weight::mins (f16, mins_index order), else null
  int64_t n = 0;
  const uint8_t* w = nullptr;  // [rows, w_stride bytes] weights in `dtype`, row-major or `packed`
  bool packed = false;         // w is in pack_weight's layout (groups of 8 rows, 8·w_stride bytes each)
  DType dtype = DType::kF32;   // F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL or a K-quant
  int64_t rows = 0;            // rows of w: kernels prefetch ahead but never past the last row
  int64_t cols = 0;
  int64_t w_stride = 0;  // bytes per weight row
  float* y = nullptr;    // [n, y_stride] f32 outputs; column r holds weight row r
  int64_t y_stride = 0;
  // K-quant weights: the activations rounded to Q8_K (ggml's quantize_row_q8_K, see QuantizeKKernel).
  const float* kd = nullptr;      // [n, cols/256] f32 scale d of each super-block (negative when its
                                  // largest-magnitude value is positive: ggml's d = 1/(-127/max))
  const int8_t* kq = nullptr;     // [n, cols] int8 codes in [-127, 127]
  const int16_t* kb = nullptr;    // [n, cols/16] sums of 16 consecutive codes (ggml's bsums)
  const int32_t* kb32 = nullptr;  // [n, cols/32] sums of 32 consecutive codes (the mins term)
};

// Quantized weights (Q8_0 / Q4_0 / the K-quants) with at least kPanelMinTokens tokens: weights
// repacked per call into panels of 8 rows (panel_block_bytes per block of the dtype), kPackRows
// rows at a time, in the calling thread's scratch (panel_scratch_bytes); fewer tokens read the
// weights in place.
inline constexpr int64_t kPanelMinTokens = 8;
// Calls of at most this many tokens are decode-shaped: each weight byte streams from memory once,
// for every token; threads take long runs of rows, and prefetch distances are set for streaming.
inline constexpr int64_t kDecodeShapedTokens = 4;
// Packed Q4_K / Q6_K (KernelArgs::packed) read their groups in place up to this many tokens: the
// panels' per-call build does not pay off before (measured on Zen 4, up 3072×1024, 2 threads:
// in place 1.7–1.8× the panels at 16 tokens, 1.3–1.4× at 32, equal at 64).
inline constexpr int64_t kPackedKPanelMinTokens = 64;
inline constexpr int64_t kPanelBlock = 8 * 32 + 8 * 4;  // Q8_0 / Q4_0: codes, f32 scales
// Where KernelSet::wide_signed_panels, the wide panels of a block of `block_cols` columns: its
// weights as int16 (block_cols / 2 vectors of 2 × 8 rows), then the 8 rows' f32 scales. Q8_0 /
// IQ4_NL: the codes per block of 32; IQ4_XS: per super-block, each level times its sub-block's
// scale.
inline constexpr int64_t wide_panel_block_bytes(int64_t block_cols) { return block_cols / 2 * 32 + 8 * 4; }
inline constexpr int64_t kPanelBlockWide = wide_panel_block_bytes(32);
inline constexpr bool has_signed_codes(DType d) { return d == DType::kQ8_0 || d == DType::kIQ4_NL; }
// KernelArgs::xw: codes 2i, 2i + 1 of token t at this int16 offset, so that a 4-token tile's pairs
// lie side by side (ceil(n / 4) · 4 · cols elements).
inline constexpr int64_t wide_x_offset(int64_t t, int64_t i, int64_t cols) {
  return t / 4 * 4 * cols + 8 * i + 2 * (t % 4);
}
// Q4_K: codes (64 groups of 4 × 8 rows), sub-block scales (8 × 8 int32), min pairs (4 × 8 × 2
// int16), d and dmin (8 f32 each). Q6_K: codes, sub-block scales (16 × 8 int32), scale pairs
// (8 × 8 × 2 int16), d (8 f32). See pack_panel_k in matmul_simd_inl.h.
inline constexpr int64_t kPanelBlockQ4K = 2048 + 256 + 128 + 64;
inline constexpr int64_t kPanelBlockQ6K = 2048 + 512 + 256 + 32;
inline constexpr int64_t kPackRows = 64;
// Q3_K panels are Q6_K panels (codes + 28, the scales as int8).
inline constexpr int64_t panel_block_bytes(DType d) {
  return kquant_has_mins(d) ? kPanelBlockQ4K : has_k_panels(d) ? kPanelBlockQ6K : kPanelBlock;
}
inline constexpr int64_t panel_scratch_bytes(DType d, int64_t cols) {
  if (d == DType::kBF16) return kPackRows * ((cols + 1) / 2) * 4;  // 16-row panels of column pairs
  // The wide panels, then one panel of bytes to widen from.
  if (has_signed_codes(d)) return (kPackRows / 8 * kPanelBlockWide + kPanelBlock) * (cols / kQBlock);
  if (d == DType::kIQ4_XS) return kPackRows / 8 * (cols / kKBlock) * wide_panel_block_bytes(kKBlock);
  return kPackRows / 8 * (cols / (is_kquant(d) ? kKBlock : kQBlock)) * panel_block_bytes(d);
}

// pack_weight's layout (KernelArgs::packed): rows in groups of 8, each group's bytes contiguous
// (8 · row stride); within a group, block b of the 8 rows is the 8 · block_bytes bytes at
// 8 · b · block_bytes. packed_offset(d, j, i) is where byte i of row j's block lands in it, and
// the bytes from i on up to packed_run(d, i) stay together:
//  - Q8_0 / Q4_0: the 8 f16 scales, then 32-byte code vectors of 4 bytes per row (row j at 4j):
//    vector v holds block bytes 2 + 4v .. 5 + 4v (Q8_0: codes 4v..4v+3; Q4_0: nibbles).
//  - Q5_0: Q4_0's layout for the scales and the 4 nibble vectors (its block bytes 6 + 4v ..),
//    then one vector of the 8 rows' qh words (row j's 4 bytes at 144 + 4j).
//  - Q4_1 / Q5_1: the 8 f16 d, the 8 f16 m, then Q4_0's / Q5_0's vectors 16 bytes later (the
//    kernels skip the m: matmul reads the offsets from Weight::mins).
//  - Q4_K: 8 f16 d, 8 f16 dmin, the 12 packed scale bytes as planes (plane p: byte p of rows
//    0..7), then 32 code vectors (vector v: code bytes 4v..4v+3 of each row).
//  - Q5_K: Q4_K's layout for d, dmin, scales and the 32 vectors of low nibbles, then 8 vectors of
//    qh (vector u at 1152: qh bytes 4u..4u+3 of each row, the fifth bits of the codes in the
//    same lanes of code vectors u, 8 + u, 16 + u, 24 + u).
//  - Q6_K: 8 f16 d, the 16 int8 sub-block scales as planes (scale s of rows 0..7), 32 vectors of
//    ql (vector v: ql bytes 4v..4v+3), 16 vectors of qh (qh bytes 4v..4v+3).
//  - Q3_K: 8 f16 d, the 12 packed scale bytes as planes (plane p at 16 + 8p: byte p of rows
//    0..7), 16 vectors of qs at 112 (vector v: qs bytes 4v..4v+3), 8 vectors of hmask at 624
//    (vector u: hmask bytes 4u..4u+3, the high bits of the codes in the same lanes of qs
//    vectors u and 8 + u).
//  - IQ4_XS: 8 f16 d, the 8 rows' scales_h words at 16 (row j at 16 + 2j), their scales_l dwords
//    at 32 (row j at 32 + 4j: one 32-bit lane per row), then 32 vectors of qs at 64 (vector v: qs
//    bytes 4v..4v+3 of each row; vectors 4s..4s+3 are sub-block s, low nibbles its elements
//    4(v % 4)..+3, high nibbles those + 16).
//  - Q2_K: 8 f16 d, 8 f16 dmin, the 16 scale bytes as planes at 32 (plane s: byte s of rows
//    0..7), then 16 vectors of qs at 160 (vector v: qs bytes 4v..4v+3; bits 2j of vector 8h + q
//    are the codes of elements 128h + 32j + 4q .. + 3, sub-block 8h + 2j + q / 4).
// Q8_0 and Q4_0 offsets are the same formula; only whole groups of 8 rows are packed.
// BF16 (no blocks): panels of 16 rows, column pair i of the 16 rows in the 64 bytes at 64·i
// (row j's pair at 4j), the prefill panel layout of matmul_avx512.cc; whole panels, even cols.
inline constexpr int64_t packed_offset(DType d, int64_t j, int64_t i) {
  switch (d) {
    case DType::kQ4_K:
      return i < 2    ? 2 * j + i
             : i < 4  ? 16 + 2 * j + (i - 2)
             : i < 16 ? 32 + 8 * (i - 4) + j
                      : 128 + 32 * ((i - 16) / 4) + 4 * j + (i - 16) % 4;
    case DType::kQ5_K:
      return i < 16   ? packed_offset(DType::kQ4_K, j, i)
             : i < 48 ? 1152 + 32 * ((i - 16) / 4) + 4 * j + (i - 16) % 4
                      : 128 + 32 * ((i - 48) / 4) + 4 * j + (i - 48) % 4;
    case DType::kQ6_K:
      return i < 128   ? 144 + 32 * (i / 4) + 4 * j + i % 4
             : i < 192 ? 1168 + 32 * ((i - 128) / 4) + 4 * j + (i - 128) % 4
             : i < 208 ? 16 + 8 * (i - 192) + j
                       : 2 * j + (i - 208);
    case DType::kQ5_0:
      return i < 2 ? 2 * j + i : i < 6 ? 144 + 4 * j + (i - 2) : 16 + 32 * ((i - 6) / 4) + 4 * j + (i - 6) % 4;
    case DType::kQ4_1: return i < 4 ? 16 * (i / 2) + 2 * j + i % 2 : 32 + 32 * ((i - 4) / 4) + 4 * j + (i - 4) % 4;
    case DType::kQ5_1:
      return i < 4   ? 16 * (i / 2) + 2 * j + i % 2
             : i < 8 ? 160 + 4 * j + (i - 4)
                     : 32 + 32 * ((i - 8) / 4) + 4 * j + (i - 8) % 4;
    case DType::kQ3_K:
      return i < 32    ? 624 + 32 * (i / 4) + 4 * j + i % 4
             : i < 96  ? 112 + 32 * ((i - 32) / 4) + 4 * j + (i - 32) % 4
             : i < 108 ? 16 + 8 * (i - 96) + j
                       : 2 * j + (i - 108);
    case DType::kQ2_K:
      return i < 16   ? 32 + 8 * i + j
             : i < 80 ? 160 + 32 * ((i - 16) / 4) + 4 * j + (i - 16) % 4
             : i < 82 ? 2 * j + (i - 80)
                      : 16 + 2 * j + (i - 82);
    case DType::kIQ4_XS:
      return i < 2   ? 2 * j + i
             : i < 4 ? 16 + 2 * j + (i - 2)
             : i < 8 ? 32 + 4 * j + (i - 4)
                     : 64 + 32 * ((i - 8) / 4) + 4 * j + (i - 8) % 4;
    default: return i < 2 ? 2 * j + i : 16 + 32 * ((i - 2) / 4) + 4 * j + (i - 2) % 4;  // Q8_0, Q4_0, IQ4_NL
  }
}
inline constexpr int64_t packed_run(DType d, int64_t i) {
  switch (d) {
    case DType::kQ4_K:
    case DType::kQ5_K: return i < 4 ? 2 : i < 16 ? 1 : 4;
    case DType::kQ6_K: return i < 192 ? 4 : i < 208 ? 1 : 2;
    case DType::kQ3_K: return i < 96 ? 4 : i < 108 ? 1 : 2;
    case DType::kIQ4_XS: return i < 4 ? 2 : 4;
    case DType::kQ2_K: return i < 16 ? 1 : i < 80 ? 4 : 2;
    case DType::kQ4_1:
    case DType::kQ5_1: return i < 4 ? 2 : 4;
    default: return i < 2 ? 2 : 4;  // Q8_0, Q4_0, Q5_0, IQ4_NL
  }
}

// Computes y for rows [r0, r1) of every token. scratch: panel_scratch_bytes(dtype, cols) bytes
// owned by the calling thread for quantized weights (null: the kernel reads the weights in
// place), else unused.
using RowsKernel = void (*)(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch);
// Adds the offsets' term of Q8_0 weights with Weight::mins to y for rows [r0, r1) of every token
// (after rows() wrote them): macc = fma(m_b, xsd_b, macc) per row over the blocks in order,
// y += macc. r0 is a multiple of 8.
using MinsKernel = void (*)(const KernelArgs& a, int64_t r0, int64_t r1);

// ggml's activation rounding: x [cols] f32 -> d [cols/32] f32 (fp16-rounded), q [cols] int8,
// and s [cols/32] the sum of each block's codes (may be null).
using QuantizeKernel = void (*)(const float* x, int64_t cols, float* d, int8_t* q, int32_t* s);

// Activation rounding to Q8_K: x [cols] f32 -> d [cols/256], q [cols], b16 [cols/16], b32 [cols/32]
// (see KernelArgs::kd ...); cols % 256 == 0.
using QuantizeKKernel = void (*)(const float* x, int64_t cols, float* d, int8_t* q, int16_t* b16, int32_t* b32);

// Dequantizes one row of K-quant super-blocks: row [cols/256 blocks] -> out [cols] f32,
// bitwise equal to dequantize_row (same f32 operations in the same order as ggml's).
using DequantKernel = void (*)(DType dtype, const uint8_t* row, int64_t cols, float* out);

// One K-quant super-block of 256 elements -> out [256] f32.
using SuperBlockFn = void (*)(const uint8_t* blk, float* out);

namespace scalar {
// ggml's dequantize_row_q2_K / q3_K / iq4_xs for one super-block (every ISA's
// DequantKernel uses them).
void dequantize_q2_k(const uint8_t* blk, float* out);
void dequantize_q3_k(const uint8_t* blk, float* out);
void dequantize_iq4_xs(const uint8_t* blk, float* out);
}  // namespace scalar

// A row of super-blocks -> out [cols] f32 with one ISA's block functions: the loop behind every
// DequantKernel and the reference dequantize_row.
template <SuperBlockFn kQ4K, SuperBlockFn kQ5K, SuperBlockFn kQ6K>
inline void dequant_k_row(DType dtype, const uint8_t* row, int64_t cols, float* out) {
  const SuperBlockFn f = dtype == DType::kQ4_K     ? kQ4K
                         : dtype == DType::kQ5_K   ? kQ5K
                         : dtype == DType::kQ3_K   ? scalar::dequantize_q3_k
                         : dtype == DType::kQ2_K   ? scalar::dequantize_q2_k
                         : dtype == DType::kIQ4_XS ? scalar::dequantize_iq4_xs
                                                   : kQ6K;
  const int64_t block_bytes = dtype_info(dtype).block_bytes;
  for (int64_t b = 0; b < cols / 256; ++b) f(row + b * block_bytes, out + b * 256);
}

// Row stride of KernelArgs::xb: whole column pairs.
inline constexpr int64_t bf16_x_stride(int64_t cols) { return (cols + 1) / 2 * 2; }

// x [count] f32 -> out [count] bf16 bits, rounded like f32_to_bf16 (core/fp16.h): to nearest
// even, NaN kept quiet.
using RoundBf16Kernel = void (*)(const float* x, int64_t count, uint16_t* out);

struct KernelSet {
  RowsKernel rows;
  // rows() takes these weights in pack_weight's layout (KernelArgs::packed): the quantized
  // types; BF16 only where it has the 16-row panel kernel (round_bf16 non-null).
  bool reads_packed;
  QuantizeKernel quantize;
  int bf16_group;              // group size of KernelArgs::xp (2 x vector lanes); 0: the kernel reads x
  RoundBf16Kernel round_bf16;  // non-null: BF16 weights take bf16-rounded activations (KernelArgs::xb)
  DequantKernel dequant_k;
  QuantizeKKernel quantize_k;
  MinsKernel add_mins;
  // Q8_0 / IQ4_NL / IQ4_XS panels (from kPanelMinTokens tokens) multiply int16 weights with
  // vpmaddwd and read KernelArgs::xw: AVX2, where the int8 route needs a vpsignb per maddubs (see
  // panel_tile_wide).
  bool wide_signed_panels;
};

// Switches for A/B benchmarks only (bench/ops_matmul --variant); 0 = the shipped kernels.
// Bit 0: no software prefetch. Bit 1: BF16 widened by zero-extension instead of even/odd.
// Bit 2: K-quant rows dequantized to f32 and run through the F32 kernel (the pre-integer
// path, for before/after figures). Bit 3 is the benchmark's own (weights packed as at load).
// Bit 4: packed quantized decode in 256-bit vectors on AVX-512. Bit 5: packed quantized types
// without the 16-row kernels rows16_q / rows16_k (8 rows in place, then panels). Results are the same either
// way except bits 1 and 2 (another f32 summation order for BF16; exact f32 activations for
// K-quants).
extern int g_kernel_variant;

namespace scalar {
void rows(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch);
void dequant_k(DType dtype, const uint8_t* row, int64_t cols, float* out);
void quantize(const float* x, int64_t cols, float* d, int8_t* q, int32_t* s);
void quantize_k(const float* x, int64_t cols, float* d, int8_t* q, int16_t* b16, int32_t* b32);
void add_mins(const KernelArgs& a, int64_t r0, int64_t r1);
}  // namespace scalar

#if defined(__x86_64__)
namespace avx2 {
void rows(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch);
void dequant_k(DType dtype, const uint8_t* row, int64_t cols, float* out);
void quantize(const float* x, int64_t cols, float* d, int8_t* q, int32_t* s);
void quantize_k(const float* x, int64_t cols, float* d, int8_t* q, int16_t* b16, int32_t* b32);
void add_mins(const KernelArgs& a, int64_t r0, int64_t r1);
}  // namespace avx2
namespace avx512 {
void rows(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch);
// rows() with BF16 weights through vdpbf16ps against KernelArgs::xb (needs AVX512_BF16).
void rows_bf16dot(const KernelArgs& a, int64_t r0, int64_t r1, uint8_t* scratch);
void round_bf16(const float* x, int64_t count, uint16_t* out);
}  // namespace avx512
#endif

}  // namespace gb::ops

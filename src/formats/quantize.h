// Weight row quantizers into GGUF block formats, bit-exact with GGML's reference quantizers
// (quantize_row_q8_0_ref / quantize_row_q4_0_ref, roundf): used to write GGUF files and for
// load-time Q8_0 conversion. (Activations are rounded differently, as ggml's x86 path does:
// ops::quantize_activations_q8.)
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace gb {

// x [n] f32 -> n/32 blocks of Q8_0 (34 bytes each); n must be a multiple of 32.
void quantize_row_q8_0(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/32 blocks of Q4_0 (18 bytes each); n must be a multiple of 32.
void quantize_row_q4_0(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/32 blocks of Q5_0 (22 bytes: f16 d, the 32 codes' fifth bits as a little-endian
// uint32, Q4_0's nibbles); n must be a multiple of 32. As ggml's reference: d = max/-16 (max =
// the value of largest magnitude), code = min(31, int8(x/d + 16.5)).
void quantize_row_q5_0(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/32 blocks of Q4_1 (20 bytes: f16 d, f16 m, Q4_0's nibbles) / Q5_1 (24 bytes: f16 d,
// f16 m, Q5_0's fifth bits and nibbles); n must be a multiple of 32. As ggml's reference: m = the
// block's min, d = (max − min)/15 (/31), code = min(15 (31), int8((x − min)/d + 0.5)).
void quantize_row_q4_1(const float* x, int64_t n, uint8_t* out);
void quantize_row_q5_1(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/32 blocks of IQ4_NL (18 bytes: f16 d, nibbles indexing ggml's 16 non-linear int8
// levels −127 … 113); n must be a multiple of 32. A simple encoder, not llama-quantize's scale
// search: d = max/−127 (max = the value of largest magnitude), each value to its nearest level.
void quantize_row_iq4_nl(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/256 GGML block_iq4_xs super-blocks (136 bytes: f16 d, 8 6-bit scales ls as
// scales_h / scales_l, IQ4_NL's nibbles per sub-block of 32); n % 256 == 0. ggml's reference
// without an importance matrix (quantize_row_iq4_nl_impl): per sub-block the weighted (x²)
// least-squares scale over 15 trial scales, d = −(largest-magnitude scale)/32, ls − 32 =
// clamp(round(scale/d), −32, 31), each value to the level nearest x/(d·(ls − 32)) with d as stored
// (fp16; ggml picks them with d before rounding, so an occasional code differs from its file's).
void quantize_row_iq4_xs(const float* x, int64_t n, uint8_t* out);

// x [n] f32 -> n/256 GGML block_q2_K super-blocks (84 bytes each); n % 256 == 0. The Q4_K encoder
// below per sub-block of 16 with 2-bit codes and 4-bit scales and mins (no llama-quantize
// make_qkx2_quants search: less accurate, not bit-exact with it): min = min(0, min x), scale =
// (max x − min)/3, d = fp16(max scale/15), dmin = fp16(max min/15), codes = clamp(round((x +
// dmin·mn)/(d·sc)), 0, 3).
void quantize_row_q2_K(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/256 GGML block_q3_K super-blocks (110 bytes each); n % 256 == 0. The Q6_K encoder
// below with 3-bit codes: per sub-block of 16, scale = max/-4, the 6-bit scales = round(-32/max
// scale · scale) in [-32, 31] with d = fp16 of their step, codes = clamp(round(x/(d·sc)), -4, 3)
// (no llama-quantize make_q3_quants search: less accurate, not bit-exact with it).
void quantize_row_q3_K(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/256 GGML block_q4_K super-blocks (144 bytes each); n % 256 == 0. A simple
// encoder, not llama-quantize's (no iterative make_qkx2_quants search, so not bit-exact with it
// and somewhat less accurate): per sub-block of 32, min = min(0, min x) and scale = (max x - min)/15;
// d = max scale/63 and dmin = max(-min)/63 (fp16), the 6-bit scales and mins rounded to nearest
// against the fp16 d / dmin, then each code = clamp(round((x + dmin·m)/(d·sc)), 0, 15).
void quantize_row_q4_K(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/256 GGML block_q5_K super-blocks (176 bytes each); n % 256 == 0. The Q4_K
// encoder above with 5-bit codes: scale = (max x - min)/31, codes clamped to 0..31, the low 4
// bits as Q4_K's nibbles and bit 4 of element 32s + l in bit s of qh[l].
void quantize_row_q5_K(const float* x, int64_t n, uint8_t* out);
// x [n] f32 -> n/256 GGML block_q6_K super-blocks (210 bytes each); n % 256 == 0. Like
// llama-quantize's reference without its weighted scale search: per sub-block of 16, scale =
// max/-32 (max = the value of largest magnitude), the 8-bit scales = round(-128/max scale · scale)
// (at most 127) with d = fp16 of their step, codes = clamp(round(x/(d·sc)), -32, 31) + 32.
void quantize_row_q6_K(const float* x, int64_t n, uint8_t* out);
// One block_q6_K from its 256 codes (0..63, value = d·sc·(code − 32)), 16 int8 scales and f16 d.
void pack_q6_K(const uint8_t* codes, const int8_t* scales, uint16_t d, uint8_t* blk);

// Converts one f32 row to dtype (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_XS);
// out holds row_bytes(dtype, n).
Status convert_row(const float* x, int64_t n, DType dtype, uint8_t* out);

}  // namespace gb

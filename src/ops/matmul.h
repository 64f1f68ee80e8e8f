// Matrix multiplication against weights in their storage dtype: the one op that decides decode
// speed (it streams every weight byte once per step). Dispatches at run time to the best
// kernel the CPU has (ops/cpu_features.h); matmul_ref is the scalar reference every kernel is
// tested against.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace gb::ops {

// A weight matrix W [rows, cols] (rows = output features), row-major in its storage dtype;
// each row holds row_bytes(dtype, cols) bytes.
struct Weight {
  const uint8_t* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  // The same matrix in matmul's interleaved layout (pack_weight), made once at load, or null.
  // matmul reads it where its kernels can; everything else (embedding rows, hashes, edits)
  // reads data.
  const uint8_t* packed = nullptr;
  // Q4_1 / Q5_1 (required; with_block_offsets): each block's offset m, so that element i of
  // block b of row r is d·q_i + m, copied out of the blocks; f16 bits, rows·cols/32 of them in
  // mins_index order (matmul_kernels.h: 8 rows' offsets side by side per block). matmul adds the
  // offsets' term from here (the kernels skip the blocks' own m). Null for every other dtype.
  const uint16_t* mins = nullptr;
};

// y[n, rows] = x[n, cols] · Wᵀ, f32 in and out, f32 accumulation.
// Numerics by weight dtype:
//  - F32 / F16, and BF16 below Isa::kAvx512Bf16: exact f32 activations times the weights widened
//    to f32.
//  - BF16 at Isa::kAvx512Bf16: like llama.cpp's CPU backend, the activations rounded to bf16
//    (f32_to_bf16) and vdpbf16ps (exact products, f32 accumulation).
//  - Q8_0 / Q4_0: like llama.cpp's CPU backend, each activation row is first rounded to Q8_0
//    (blocks of 32, d = fp16(amax/127), q = round-half-even(x·127/amax)); then per block the
//    exact integer dot product isum of weight and activation codes, and acc = fma(d_w·d_x,
//    f32(isum), acc) over the blocks in order. Q8_0 with offsets (Weight::mins: Q4_1 / Q5_1)
//    then adds, per row, the offsets' term in a second f32 accumulator: macc = fma(m_b,
//    d_x·f32(xsum_b), macc) over the blocks in order (xsum_b = the block's activation codes
//    summed: ggml's q4_1 · q8_1 term m·s), y = acc + macc. Every ISA level computes exactly this (bitwise
//    equal to scalar), in place for few tokens and on weights repacked into 8-row panels (a
//    vpdpbusd / maddubs GEMM; Q8_0 / IQ4_NL on AVX2 in int16, vpmaddwd) from kPanelMinTokens tokens on — at AVX-512 on
//    weights packed at load, in place 16 rows per vector at every count from 4 (Q4_0) / 8 (Q8_0) tokens. (Not ggml's
//    bits: it sums 8 lanes.)
//  - Q4_K / Q5_K / Q6_K: like llama.cpp's CPU backend, each activation row is first rounded to Q8_K
//    (quantize_activations_q8k: blocks of 256, f32 d, int8 codes, code sums per 16 and 32), then
//    per super-block the exact int32 isum = Σ sub-block scale·Σ code·x (Q6_K: code - 32) and
//    Q4_K's / Q5_K's msum = Σ sub-block min·Σ x, and acc = fma(d_w·d_x, f32(isum), acc), those also
//    acc = fma(-(dmin_w·d_x), f32(msum), acc), over the super-blocks in order (scalar::rows_k in
//    matmul.cc is the definition): scalar, AVX2 and AVX-512 give the same bits, in place for few
//    tokens and through 8-row panels from kPanelMinTokens on (weights packed at load: from
//    kPackedKPanelMinTokens; at AVX-512 16 rows per vector in place from 4 tokens, Q4_K / Q5_K at
//    every count, Q6_K up to 127).
//  - IQ4_XS: the K-quants' numerics with isum = Σ_sub-block (ls − 32)·Σ level·x (ggml's
//    iq4_xs · q8_K), no msum; Q2_K: Q4_K's two terms over 16 sub-blocks of 16 (4-bit scales and
//    mins, codes 0..3; ggml's q2_K · q8_K). Both read their packed groups in place at every
//    count (no panels).
// A token's result does not depend on n, on the other tokens or on the thread count (bitwise),
// only on the ISA level (quantized types: not even on that). The exception: BF16 at
// kAvx512Bf16 without packed weights (Weight::packed null: rows not a multiple of 16, odd cols),
// where steps of fewer than kPanelMinTokens tokens and larger ones sum in different orders (each
// invariant by itself; ARCHITECTURE.md says why); packed BF16 takes the panel order for every n.
// Supported dtypes: matmul_supported().
// Nothing is allocated per call once the per-thread scratch has grown to the largest size seen.
void matmul(ThreadPool& pool, const float* x, int64_t n, const Weight& w, float* y);

// Several matmuls of the same x in one parallel region (at most 4, all W_i with x's cols; q/k/v,
// gate/up): y_i = x · W_iᵀ, each exactly what matmul gives alone. The activations are rounded once per form the
// weights' kernels read, and the threads take row chunks of all matrices from one counter, so a
// decode step waits once instead of once per matrix.
struct MatmulOut {
  const Weight* w;
  float* y;  // [n, w->rows]
};
void matmul_multi(ThreadPool& pool, const float* x, int64_t n, std::initializer_list<MatmulOut> outs);

// Whether pack_weight has a layout for w: Q8_0, Q4_0 and the K-quants with rows a multiple of 8;
// BF16 with rows a multiple of 16 and even cols when the active ISA level has the bf16 dot
// product kernels (Isa::kAvx512Bf16: they read it; other levels would not).
bool packable(const Weight& w);

// Writes w repacked for matmul's SIMD kernels to out (w.rows · row_bytes(w.dtype, w.cols) bytes,
// as many as w holds; nothing when !packable(w)): per
// group of 8 rows and per block, the 8 rows' scales, then their codes interleaved 4 bytes per
// row (matmul_kernels.h has the byte layout). Decode then reads one contiguous stream per 8
// rows and gets the 8 rows' sums in the lanes of one vector, with no reduction across lanes;
// prefill's panels come from it without a transpose. Results are bitwise the same as from the
// row-major layout. Point Weight::packed at the bytes (which must outlive the weight).
void pack_weight(const Weight& w, uint8_t* out);

// Whether matmul handles this weight dtype (cols must also be a multiple of the block size).
bool matmul_supported(DType dtype);

// Scalar reference: each row dequantized, products with the exact activations summed in double.
void matmul_ref(const float* x, int64_t n, const Weight& w, float* y);

// Scalar reference of what matmul computes for quantized weights (and BF16 at kAvx512Bf16: the
// activations rounded to bf16, then matmul_ref), summed in double (matmul itself sums in f32: the
// tests bound the difference). Q8_0 / Q4_0 / Q5_0 / IQ4_NL: activations rounded to Q8_0 as ggml does, exact integer
// block dot products, Σ_b (d_w·d_x as f32)·isum_b (Q5_0 likewise, its codes − 16). K-quants: activations rounded to
// Q8_K, per super-block the exact Σ_sub-block scale·Σ code·x (Q6_K codes - 32, Q3_K its signed codes) times (d_w·d_x as
// f32), Q4_K / Q5_K / Q2_K minus (dmin_w·d_x as f32)·Σ_sub-block min·Σ x; IQ4_XS Σ_sub-block (ls − 32)·Σ level·x. For
// other dtypes it is matmul_ref.
void matmul_ref_quantized_acts(const float* x, int64_t n, const Weight& w, float* y);

// out[cols] = row r of w as f32 (embedding lookup, tests). Every dtype of DType with a block
// format (F32, F16, BF16, Q8_0 with or without mins, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_XS); zeros for integer dtypes.
void dequantize_row(const Weight& w, int64_t r, float* out);

// Activation rounding of matmul for K-quant weights (ggml's quantize_row_q8_K_ref, what its
// x86 backend uses): per block of 256, d = 1/(-127/max) with max the first value of largest
// magnitude (so d < 0 when that value is positive), q = round-half-even(x·(-127/max)) in
// [-127, 127]; bsums16 [cols/16] and bsums32 [cols/32] the sums of 16 / 32 consecutive codes.
// A block holding NaN / ±inf, or with amax < ~3.7e-37 (the scale overflows), is all zeros.
// cols % 256 == 0.
void quantize_activations_q8k(const float* x, int64_t cols, float* d, int8_t* q, int16_t* bsums16, int32_t* bsums32);

// Activation rounding of matmul for quantized weights (ggml's x86 quantize_row_q8_0):
// d[cols/32] = fp16-rounded scales as f32, q[cols] int8 codes. cols % 32 == 0.
void quantize_activations_q8(const float* x, int64_t cols, float* d, int8_t* q);

// A weight that owns its bytes (weight.data points into bytes; moving keeps it valid).
struct OwnedWeight {
  std::vector<uint8_t> bytes;
  Weight weight;
};

// w (Q4_1 / Q5_1) with Weight::mins: its blocks' f16 offsets m copied out in mins_index order
// (OwnedWeight::bytes holds them; weight.data stays w.data). matmul computes ggml's q4_1 · q8_1,
// d·d_x·Σ q·x + m·(d_x·Σ x), as two f32 chains over the blocks: the codes' (the Q4_0 / Q5_0
// kernels with the codes unsigned and no offset) and the offsets' (add_mins), added. Errors:
// another dtype, or cols not a multiple of 32.
Result<OwnedWeight> with_block_offsets(const Weight& w);

// Load-time conversion of an F32 / F16 / BF16 weight to Q8_0 (same blocks as a Q8_0 GGUF made
// by llama-quantize from the same values), for faster decode: 34 bytes per 32 weights instead
// of 64 (bf16). Accuracy cost: each weight moves by at most d/2 = amax_block/254 (relative RMS
// error ≈ 0.3–0.5% of a block's values for Gaussian-like rows), and activations get rounded to
// Q8_0 as for any Q8_0 weight — see docs/PERFORMANCE.md and docs/ARCHITECTURE.md. Errors: unsupported dtype, or cols
// not a multiple of 32.
Result<OwnedWeight> convert_to_q8(const Weight& w);

}  // namespace gb::ops

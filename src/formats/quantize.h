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

// Converts one f32 row to dtype (F32, F16, BF16, Q8_0, Q4_0); out holds row_bytes(dtype, n).
Status convert_row(const float* x, int64_t n, DType dtype, uint8_t* out);

}  // namespace gb

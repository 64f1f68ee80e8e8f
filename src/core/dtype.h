// Element types of weights and activations, and their storage geometry. Quantized types are
// stored in blocks along the innermost (row) dimension, as in GGML.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gb {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,    // blocks of 32: f16 scale d, 32 x int8 q; x = d * q
  kQ4_0,    // blocks of 32: f16 scale d, 16 bytes; low nibbles = x[0..15], high = x[16..31]; x = d * (q - 8)
  kQ5_0,    // blocks of 32: f16 d, 32 fifth bits, Q4_0's nibbles; x = d * (q - 16)
  kQ4_1,    // blocks of 32: f16 d, f16 m, Q4_0's nibbles; x = d * q + m
  kQ5_1,    // blocks of 32: f16 d, f16 m, Q5_0's fifth bits and nibbles; x = d * q + m
  kIQ4_NL,  // blocks of 32: f16 d, Q4_0's nibbles indexing a 16-entry int8 table; x = d * table[q]
  kQ2_K,    // super-blocks of 256 (GGML block_q2_K, 84 bytes): 4-bit scales and mins per 16, 2-bit codes
  kQ3_K,    // super-blocks of 256 (GGML block_q3_K, 110 bytes): 6-bit scales per 16, 3-bit codes
  kQ4_K,    // super-blocks of 256 (GGML block_q4_K, 144 bytes)
  kQ5_K,    // super-blocks of 256 (GGML block_q5_K, 176 bytes): Q4_K's scales and mins, a fifth code bit
  kQ6_K,    // super-blocks of 256 (GGML block_q6_K, 210 bytes)
  kIQ4_XS,  // super-blocks of 256 (GGML block_iq4_xs, 136 bytes): f16 d, 6-bit scales per 32 (ls − 32),
            // IQ4_NL's nibbles and levels; x = d · (ls − 32) · table[q]
  kI8,
  kI32,
  kI64,
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};

inline constexpr DTypeInfo dtype_info(DType t) {
  switch (t) {
    case DType::kF32: return {"f32", 1, 4};
    case DType::kF16: return {"f16", 1, 2};
    case DType::kBF16: return {"bf16", 1, 2};
    case DType::kQ8_0: return {"q8_0", 32, 34};
    case DType::kQ4_0: return {"q4_0", 32, 18};
    case DType::kQ5_0: return {"q5_0", 32, 22};
    case DType::kQ4_1: return {"q4_1", 32, 20};
    case DType::kQ5_1: return {"q5_1", 32, 24};
    case DType::kIQ4_NL: return {"iq4_nl", 32, 18};
    case DType::kQ2_K: return {"q2_k", 256, 84};
    case DType::kQ3_K: return {"q3_k", 256, 110};
    case DType::kQ4_K: return {"q4_k", 256, 144};
    case DType::kQ5_K: return {"q5_k", 256, 176};
    case DType::kQ6_K: return {"q6_k", 256, 210};
    case DType::kIQ4_XS: return {"iq4_xs", 256, 136};
    case DType::kI8: return {"i8", 1, 1};
    case DType::kI32: return {"i32", 1, 4};
    case DType::kI64: return {"i64", 1, 8};
  }
  return {"?", 1, 1};
}

inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }

// Bytes of one row of n elements; n must be a multiple of the block size.
inline constexpr int64_t row_bytes(DType t, int64_t n) {
  const DTypeInfo i = dtype_info(t);
  return n / i.block_elems * i.block_bytes;
}

}  // namespace gb

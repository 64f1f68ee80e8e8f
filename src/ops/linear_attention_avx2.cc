// AVX2 + FMA copies of the Gated DeltaNet loops (linear_attention_inl.h): 8-float vectors and two
// tokens per pass over the state, compiled with -mavx2 -mfma (see src/ops/CMakeLists.txt) and
// reached through linear_attention.cc's dispatch.
#if defined(__x86_64__)
#include <cstdint>

#include "ops/linear_attention.h"

namespace gb::ops::avx2 {
#define GB_DELTA_VEC 8
#define GB_DELTA_TOKENS 2
#include "ops/linear_attention_inl.h"
}  // namespace gb::ops::avx2
#endif

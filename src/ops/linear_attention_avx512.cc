// AVX-512 copies of the Gated DeltaNet loops (linear_attention_inl.h): 16-float vectors and four
// tokens per pass over the state, compiled with -mavx512f (see src/ops/CMakeLists.txt) and
// reached through linear_attention.cc's dispatch.
#if defined(__x86_64__)
#include <cstdint>

#include "ops/linear_attention.h"

namespace gb::ops::avx512 {
#define GB_DELTA_VEC 16
#define GB_DELTA_TOKENS 4
#include "ops/linear_attention_inl.h"
}  // namespace gb::ops::avx512
#endif

// CPU feature detection for kernel dispatch: cpuid says what the core implements, xgetbv
// whether the OS saves the wider register state (without it AVX instructions fault).
#include "ops/cpu_features.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace gb::ops {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12);
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  const bool f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM0-15 upper, ZMM16-31
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;
  if (!ymm_state) return f;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17);
  const bool avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  const bool vnni = c & (1u << 11);
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  const bool bf16 = a1 & (1u << 5);

  f.avx2 = avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && vnni;
  f.avx512_bf16 = f.avx512 && bf16;
  f.amx = f.avx512 && tile_state && amx_tile && amx_int8 && amx_bf16;
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

Isa detect_best() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512 && f.avx512_vnni && f.avx512_bf16) return Isa::kAvx512Bf16;
  if (f.avx512 && f.avx512_vnni) return Isa::kAvx512;
  if (f.avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

// The level chosen at start-up: the best one, lowered (never raised) by GLASSBOX_ISA.
Isa initial_isa() {
  const Isa best = best_isa();
  const char* env = std::getenv("GLASSBOX_ISA");
  if (env == nullptr || *env == '\0') return best;
  Isa wanted;
  if (!parse_isa(env, &wanted)) {
    std::fprintf(stderr, "glassbox: ignoring GLASSBOX_ISA=%s (use scalar, avx2, avx512 or avx512bf16)\n", env);
    return best;
  }
  if (wanted > best) {
    std::fprintf(stderr, "glassbox: GLASSBOX_ISA=%s is not supported by this CPU; using %s\n", env,
                 isa_name(best).data());
    return best;
  }
  return wanted;
}

std::atomic<int>& isa_state() {
  static std::atomic<int> state{static_cast<int>(initial_isa())};
  return state;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

bool parse_isa(std::string_view name, Isa* out) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (name == isa_name(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

Isa best_isa() {
  static const Isa best = detect_best();
  return best;
}

bool isa_supported(Isa isa) { return isa <= best_isa(); }

Isa active_isa() { return static_cast<Isa>(isa_state().load(std::memory_order_relaxed)); }

bool set_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  isa_state().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace gb::ops

// Run-time CPU feature detection (cpuid + xgetbv) and the choice of kernel ISA, which the
// GLASSBOX_ISA environment variable or set_isa() can force down to a lower level.
#pragma once

#include <cstdint>
#include <string_view>

namespace gb::ops {

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C, with the OS saving YMM state
  bool avx512 = false;       // AVX-512 F/BW/VL/DQ, with the OS saving ZMM state
  bool avx512_vnni = false;  // vpdpbusd
  bool avx512_bf16 = false;  // vdpbf16ps
  bool amx = false;          // AMX tile + int8 + bf16 (the OS must still grant the tile state)
};

// Detected once; cheap to call.
const CpuFeatures& cpu_features();

// Kernel levels, ordered: a CPU that runs one runs every lower one.
enum class Isa : uint8_t {
  kScalar,      // portable C++, any CPU
  kAvx2,        // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  kAvx512,      // AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later)
  kAvx512Bf16,  // kAvx512 + AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and later): BF16
                // weights against bf16-rounded activations with vdpbf16ps (ops/matmul.h)
};

std::string_view isa_name(Isa isa);
// Parses "scalar" | "avx2" | "avx512" | "avx512bf16"; false for anything else.
bool parse_isa(std::string_view name, Isa* out);

// Highest level this CPU runs.
Isa best_isa();
bool isa_supported(Isa isa);

// The level kernels use now: best_isa(), lowered by GLASSBOX_ISA if set, or by set_isa().
Isa active_isa();
// Forces the level for tests and benchmarks; false (and no change) if the CPU lacks it.
bool set_isa(Isa isa);

// RAII: forces an ISA for a scope (tests). ok() is false when the CPU lacks it.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : previous_(active_isa()), ok_(set_isa(isa)) {}
  ~ScopedIsa() { set_isa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
  bool ok() const { return ok_; }

 private:
  Isa previous_;
  bool ok_;
};

}  // namespace gb::ops

// Matmul kernels against the scalar references: every weight dtype, every ISA level this CPU
// runs (others skip), odd shapes, thread and batch invariance; dequantize_row on hand-built
// blocks; CPU dispatch; Q8_0 conversion.
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include "formats/quantize.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "ops/cpu_features.h"
#include "ops/matmul_kernels.h"

namespace gb::ops {
namespace {

// Weight bytes of a random matrix in `dtype`; values ~ N(0, 0.05) like trained weights.
std::vector<uint8_t> random_weight_bytes(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t stride = row_bytes(dtype, cols);
  std::vector<uint8_t> bytes(static_cast<size_t>(stride * rows));
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = normal(rng);
    uint8_t* out = bytes.data() + r * stride;
    switch (dtype) {
      case DType::kF32: std::memcpy(out, row.data(), cols * 4); break;
      case DType::kF16:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = f32_to_f16(row[i]);
          std::memcpy(out + 2 * i, &h, 2);
        }
        break;
      case DType::kBF16:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = f32_to_bf16(row[i]);
          std::memcpy(out + 2 * i, &h, 2);
        }
        break;
      case DType::kQ8_0: gb::quantize_row_q8_0(row.data(), cols, out); break;
      default:  // Q4_0, Q3_K ... Q6_K: random codes, then sane f16 scales
        for (int64_t i = 0; i < stride; ++i) out[i] = static_cast<uint8_t>(rng());
        for (int64_t b = 0; b < cols / dtype_info(dtype).block_elems; ++b) {
          uint8_t* blk = out + b * dtype_info(dtype).block_bytes;
          const uint16_t d = f32_to_f16(0.002f + 0.01f * (rng() % 100) / 100.0f);
          const uint16_t dmin = f32_to_f16(0.001f * (rng() % 100) / 100.0f);
          if (dtype == DType::kQ4_0 || dtype == DType::kQ5_0 || dtype == DType::kIQ4_NL || dtype == DType::kIQ4_XS)
            std::memcpy(blk, &d, 2);
          if (dtype == DType::kQ4_K || dtype == DType::kQ5_K) {
            std::memcpy(blk, &d, 2);
            std::memcpy(blk + 2, &dmin, 2);
          }
          if (dtype == DType::kQ6_K) std::memcpy(blk + 208, &d, 2);
          if (dtype == DType::kQ3_K) std::memcpy(blk + 108, &d, 2);
          if (dtype == DType::kQ2_K) {
            std::memcpy(blk + 80, &d, 2);
            std::memcpy(blk + 82, &dmin, 2);
          }
        }
        break;
    }
  }
  return bytes;
}

// Activations ~ N(0, 1) with a few large outliers (massive activations exist in real models).
std::vector<float> random_acts(int64_t n, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * cols);
  for (auto& v : x) v = normal(rng);
  for (int64_t t = 0; t < n; ++t) x[t * cols + (t * 7) % cols] *= 50.0f;
  return x;
}

bool quantized_acts(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ5_0 || t == DType::kIQ4_NL || t == DType::kQ4_1 ||
         t == DType::kQ5_1;
}
bool kquant(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K ||
         t == DType::kIQ4_XS;
}

// The Q8_K-rounded activations d·q as f32 [n, cols].
std::vector<float> q8k_values(const std::vector<float>& x, int64_t n, int64_t cols) {
  std::vector<float> out(n * cols), d(cols / 256);
  std::vector<int8_t> q(cols);
  std::vector<int16_t> b16(cols / 16);
  std::vector<int32_t> b32(cols / 32);
  for (int64_t t = 0; t < n; ++t) {
    quantize_activations_q8k(&x[t * cols], cols, d.data(), q.data(), b16.data(), b32.data());
    for (int64_t i = 0; i < cols; ++i) out[t * cols + i] = d[i / 256] * q[i];
  }
  return out;
}

// Σ_i |x̃_i · w_i| per output: the scale of the f32 rounding error of any summation order
// (x̃ = the Q8_0-rounded activations for Q8_0/Q4_0 weights).
std::vector<double> magnitudes(const std::vector<float>& x, int64_t n, const Weight& w) {
  std::vector<float> xe = x;
  if (quantized_acts(w.dtype)) {
    const int64_t nb = w.cols / 32;
    std::vector<float> d(nb);
    std::vector<int8_t> q(w.cols);
    for (int64_t t = 0; t < n; ++t) {
      quantize_activations_q8(&x[t * w.cols], w.cols, d.data(), q.data());
      for (int64_t i = 0; i < w.cols; ++i) xe[t * w.cols + i] = d[i / 32] * q[i];
    }
  }
  if (kquant(w.dtype)) xe = q8k_values(x, n, w.cols);
  std::vector<double> mag(n * w.rows);
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t i = 0; i < w.cols; ++i) s += std::fabs(static_cast<double>(xe[t * w.cols + i]) * row[i]);
      mag[t * w.rows + r] = s;
    }
  }
  return mag;
}

// Tolerance as a fraction of Σ|x̃_i·w_i| (the scale of f32 rounding in any summation order).
// Float weights: f32 products and sums over up to 4096 terms; the worst seen is 8e-7 (scalar:
// one sequential chain) and 3e-7 (AVX2: 8-lane chains), so 2e-6. Q8_0 / Q4_0: block sums are
// exact integers and only the f32 sum over ≤ 128 blocks rounds; worst seen 2e-7, so 1e-6.
// K-quants: exact integers per super-block, f32 only in 8-lane sums over ≤ 16 super-blocks
// (and the f32 scale products); 1e-6 like Q8_0.
double tolerance_factor(DType t) { return quantized_acts(t) || kquant(t) ? 1e-6 : 2e-6; }

const Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16};
const DType kKernelDTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,  DType::kQ8_0,
                               DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL};

struct Case {
  DType dtype;
  int64_t rows, cols;
};

std::vector<Case> shape_cases() {
  std::vector<Case> cases;
  for (DType dt : kKernelDTypes)
    for (int64_t rows : {1, 3, 33, 257})
      for (int64_t cols : {32, 64, 96, 4096}) cases.push_back({dt, rows, cols});
  // Row lengths that are not a multiple of the vector width (plain float dtypes only).
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t cols : {1, 7, 40, 100}) cases.push_back({dt, 33, cols});
  for (DType dt : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS})
    for (int64_t rows : {1, 3, 5, 33, 67})
      for (int64_t cols : {256, 512, 768, 4096}) cases.push_back({dt, rows, cols});
  return cases;
}

class MatmulIsaTest : public ::testing::TestWithParam<Isa> {};

TEST_P(MatmulIsaTest, MatchesScalarReferenceOnOddShapes) {
  const Isa isa = GetParam();
  ScopedIsa scoped(isa);
  if (!scoped.ok()) GTEST_SKIP() << "CPU lacks " << isa_name(isa) << "; its kernels are not run here";
  ThreadPool pool(2);
  const int64_t kNs[] = {1, 2, 3, 5, 17, 64};
  uint32_t seed = 1;
  std::map<DType, double> worst;  // largest |y - ref| / Σ|x̃·w| seen, per dtype
  for (const Case& c : shape_cases()) {
    const auto bytes = random_weight_bytes(c.dtype, c.rows, c.cols, seed++);
    const Weight w{bytes.data(), c.dtype, c.rows, c.cols};
    for (int64_t n : kNs) {
      if (c.cols * c.rows * n > (int64_t{1} << 24)) continue;  // keep the scalar reference fast
      const auto x = random_acts(n, c.cols, seed++);
      std::vector<float> y(n * c.rows, NAN), ref(n * c.rows);
      matmul(pool, x.data(), n, w, y.data());
      matmul_ref_quantized_acts(x.data(), n, w, ref.data());
      const auto mag = magnitudes(x, n, w);
      const double f = tolerance_factor(c.dtype);
      for (int64_t i = 0; i < n * c.rows; ++i) {
        if (mag[i] > 0) worst[c.dtype] = std::max(worst[c.dtype], std::fabs(y[i] - ref[i]) / mag[i]);
        ASSERT_NEAR(y[i], ref[i], f * mag[i] + 1e-30)
            << isa_name(isa) << " " << dtype_name(c.dtype) << " rows=" << c.rows << " cols=" << c.cols << " n=" << n
            << " at token " << i / c.rows << " row " << i % c.rows;
      }
    }
  }
  std::printf("%s: worst |y - ref| / sum|x*w| by dtype:", std::string(isa_name(isa)).c_str());
  for (const auto& [dt, v] : worst) std::printf(" %s %.2g", std::string(dtype_name(dt)).c_str(), v);
  std::printf("\n");
}

// One or two threads, one token alone or inside a batch: bitwise the same result.
TEST_P(MatmulIsaTest, ThreadAndBatchInvariantBitwise) {
  const Isa isa = GetParam();
  ScopedIsa scoped(isa);
  if (!scoped.ok()) GTEST_SKIP() << "CPU lacks " << isa_name(isa) << "; its kernels are not run here";
  ThreadPool one(1), two(2);
  const int64_t rows = 77, cols = 256, n = 17;
  uint32_t seed = 100;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL,
                   DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS}) {
    // BF16 at kAvx512Bf16: invariant within each kernel only (MatmulBf16Dot.BatchAndThreadInvariantWithinEachKernel).
    if (dt == DType::kBF16 && isa == Isa::kAvx512Bf16) continue;
    const auto bytes = random_weight_bytes(dt, rows, cols, seed++);
    const Weight w{bytes.data(), dt, rows, cols};
    const auto x = random_acts(n, cols, seed++);
    std::vector<float> y1(n * rows), y2(n * rows), single(rows);
    matmul(one, x.data(), n, w, y1.data());
    matmul(two, x.data(), n, w, y2.data());
    ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << dtype_name(dt) << " threads 1 vs 2";
    for (int64_t t = 0; t < n; ++t) {
      matmul(two, &x[t * cols], 1, w, single.data());
      ASSERT_EQ(0, std::memcmp(single.data(), &y2[t * rows], rows * 4))
          << dtype_name(dt) << " token " << t << " alone vs in a batch of " << n;
    }
  }
}

// Q8_0 / Q4_0: block sums are exact integers and the f32 steps are the same fma per block in
// block order at every ISA level, so scalar, AVX2 and AVX-512 (VNNI) agree bitwise, in the
// in-place kernel (n < kPanelMinTokens) and the panel kernel (n >= kPanelMinTokens) alike; rows
// 1..7 past a multiple of 8 exercise the partial panel and the single-row tail.
TEST(MatmulQuantized, EveryIsaAndBothKernelsBitwiseEqual) {
  ThreadPool pool(2);
  uint32_t seed = 500;
  for (DType dt : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t rows : {1, 7, 9, 64, 77, 131}) {
      for (int64_t cols : {32, 96, 1024}) {
        const auto bytes = random_weight_bytes(dt, rows, cols, seed++);
        const Weight w{bytes.data(), dt, rows, cols};
        for (int64_t n : {int64_t{1}, int64_t{3}, kPanelMinTokens - 1, kPanelMinTokens, int64_t{13}, int64_t{40}}) {
          const auto x = random_acts(n, cols, seed++);
          std::vector<float> want(n * rows);
          {
            ScopedIsa scoped(Isa::kScalar);
            ASSERT_TRUE(scoped.ok());
            matmul(pool, x.data(), n, w, want.data());
          }
          for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
            ScopedIsa scoped(isa);
            if (!scoped.ok()) continue;
            std::vector<float> y(n * rows, NAN);
            matmul(pool, x.data(), n, w, y.data());
            for (int64_t i = 0; i < n * rows; ++i)
              ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want[i]))
                  << isa_name(isa) << " " << dtype_name(dt) << " rows=" << rows << " cols=" << cols << " n=" << n
                  << " token " << i / rows << " row " << i % rows << ": " << y[i] << " vs scalar " << want[i];
          }
        }
      }
    }
  }
}

// Weights repacked at load (pack_weight) give bitwise what the row-major layout gives at the
// scalar level, in decode (in place) and prefill (panels), at every SIMD level, 1 or 2 threads.
TEST(PackedWeights, EveryIsaMatchesRowMajorScalarBitwise) {
  ThreadPool pool1(1), pool2(2);
  uint32_t seed = 900;
  int compared = 0;
  for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                   DType::kQ6_K, DType::kIQ4_XS, DType::kQ2_K}) {
    for (int64_t rows : {8, 24, 136}) {
      const bool kq = kquant(dt);
      for (int64_t cols : kq ? std::vector<int64_t>{256, 768, 2048} : std::vector<int64_t>{32, 96, 1024}) {
        const auto bytes = random_weight_bytes(dt, rows, cols, seed++);
        Weight w{bytes.data(), dt, rows, cols};
        ASSERT_TRUE(packable(w));
        std::vector<uint8_t> packed(bytes.size());
        pack_weight(w, packed.data());
        for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, kPanelMinTokens - 1, kPanelMinTokens, int64_t{13},
                          int64_t{40}, kPackedKPanelMinTokens, kPackedKPanelMinTokens + 6}) {
          const auto x = random_acts(n, cols, seed++);
          std::vector<float> want(n * rows);
          {
            ScopedIsa scoped(Isa::kScalar);
            w.packed = packed.data();  // the scalar kernels read the rows
            matmul(pool2, x.data(), n, w, want.data());
          }
          for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
            ScopedIsa scoped(isa);
            if (!scoped.ok()) continue;
            for (ThreadPool* pool : {&pool1, &pool2}) {
              std::vector<float> y(n * rows, NAN);
              matmul(*pool, x.data(), n, w, y.data());
              ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
                  << isa_name(isa) << " " << dtype_name(dt) << " rows=" << rows << " cols=" << cols << " n=" << n
                  << " threads=" << pool->size();
              ++compared;
            }
          }
        }
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "CPU has no SIMD level; only the scalar kernel runs";
}

// BF16 packed at load (Isa::kAvx512Bf16): every n takes the panel order, so a token's result is
// what the row-major weights give in a step of ≥ kPanelMinTokens tokens, whatever n and threads.
TEST(PackedWeights, Bf16OneOrderForEveryBatch) {
  ScopedIsa scoped(Isa::kAvx512Bf16);
  if (!scoped.ok()) GTEST_SKIP() << "CPU has no AVX512_BF16";
  ThreadPool pool1(1), pool2(2);
  uint32_t seed = 1300;
  const int64_t big = 40;
  for (int64_t rows : {16, 48, 144}) {
    for (int64_t cols : {64, 1000, 1024}) {
      const auto bytes = random_weight_bytes(DType::kBF16, rows, cols, seed++);
      Weight w{bytes.data(), DType::kBF16, rows, cols};
      ASSERT_TRUE(packable(w));
      std::vector<uint8_t> packed(bytes.size());
      pack_weight(w, packed.data());
      const auto x = random_acts(big, cols, seed++);
      std::vector<float> want(big * rows);
      matmul(pool2, x.data(), big, w, want.data());  // row-major, panels packed per call
      w.packed = packed.data();
      for (int64_t n : {int64_t{1}, int64_t{3}, kPanelMinTokens - 1, kPanelMinTokens, int64_t{13}, big}) {
        for (ThreadPool* pool : {&pool1, &pool2}) {
          std::vector<float> y(n * rows, NAN);
          matmul(*pool, x.data(), n, w, y.data());
          ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
              << "rows=" << rows << " cols=" << cols << " n=" << n << " threads=" << pool->size();
        }
      }
    }
  }
}

// Several matrices of one input in one parallel region: each output is what matmul gives alone,
// with mixed dtypes (rounded activations shared, or not; on AVX2 from 8 tokens a form and its
// widened form side by side, the wider second), packed or not, any n. The region runs first, so
// that its roundings are the first to size their buffers.
TEST(MatmulMulti, EachOutputEqualsItsOwnMatmul) {
  ThreadPool pool(2);
  uint32_t seed = 1700;
  const int64_t cols = 512;
  const std::vector<std::vector<DType>> mixes = {{DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K},
                                                 {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL},
                                                 {DType::kBF16, DType::kF32, DType::kQ8_0, DType::kQ6_K},
                                                 {DType::kIQ4_XS, DType::kQ4_K, DType::kQ8_0, DType::kIQ4_XS},
                                                 {DType::kQ2_K, DType::kQ3_K, DType::kQ2_K, DType::kQ6_K},
                                                 {DType::kQ4_K, DType::kIQ4_XS, DType::kQ4_0, DType::kIQ4_NL}};
  const int64_t rows[4] = {64, 24, 48, 136};
  for (Isa isa : kAllIsas) {
    ScopedIsa scoped(isa);
    if (!scoped.ok()) continue;
    for (const auto& mix : mixes) {
      std::vector<std::vector<uint8_t>> bytes, packed;
      std::vector<Weight> w;
      for (size_t i = 0; i < mix.size(); ++i) {
        bytes.push_back(random_weight_bytes(mix[i], rows[i], cols, seed++));
        w.push_back(Weight{bytes.back().data(), mix[i], rows[i], cols});
      }
      for (size_t i = 0; i < mix.size(); ++i) {
        packed.emplace_back(packable(w[i]) ? bytes[i].size() : 0);
        pack_weight(w[i], packed.back().data());
        if (i % 2 == 0 && packable(w[i])) w[i].packed = packed.back().data();  // some packed, some not
      }
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{40}}) {
        const auto x = random_acts(n, cols, seed++);
        std::vector<std::vector<float>> want(mix.size()), got(mix.size());
        for (size_t i = 0; i < mix.size(); ++i) got[i].assign(n * rows[i], NAN);
        if (mix.size() == 2) {
          matmul_multi(pool, x.data(), n, {{&w[0], got[0].data()}, {&w[1], got[1].data()}});
        } else if (mix.size() == 3) {
          matmul_multi(pool, x.data(), n, {{&w[0], got[0].data()}, {&w[1], got[1].data()}, {&w[2], got[2].data()}});
        } else {
          matmul_multi(
              pool, x.data(), n,
              {{&w[0], got[0].data()}, {&w[1], got[1].data()}, {&w[2], got[2].data()}, {&w[3], got[3].data()}});
        }
        for (size_t i = 0; i < mix.size(); ++i) {
          want[i].resize(n * rows[i]);
          matmul(pool, x.data(), n, w[i], want[i].data());
        }
        for (size_t i = 0; i < mix.size(); ++i)
          ASSERT_EQ(0, std::memcmp(got[i].data(), want[i].data(), want[i].size() * 4))
              << isa_name(isa) << " output " << i << " (" << dtype_name(mix[i]) << ") n=" << n;
      }
    }
  }
}

// Decode-shaped regions are handed out in guided pieces (long runs first, shorter towards the
// end, each a share of the rows left in the whole region, cut at each matrix's end): a region of
// several matrices of megabytes, odd row counts, at 1 to 16 threads, computes every row exactly
// as one thread does.
TEST(MatmulMulti, DecodePiecesCoverEveryRowAtAnyThreadCount) {
  uint32_t seed = 1900;
  const int64_t cols = 1024;
  const DType types[3] = {DType::kQ4_0, DType::kF32, DType::kQ8_0};
  const int64_t rows[3] = {4000, 1000, 40};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Weight> w;
  for (int i = 0; i < 3; ++i) {
    bytes.push_back(random_weight_bytes(types[i], rows[i], cols, seed++));
    w.push_back(Weight{bytes.back().data(), types[i], rows[i], cols});
  }
  std::vector<uint8_t> packed(packable(w[0]) ? bytes[0].size() : 0);
  pack_weight(w[0], packed.data());
  if (packable(w[0])) w[0].packed = packed.data();
  for (int64_t n : {int64_t{1}, int64_t{4}}) {
    const auto x = random_acts(n, cols, seed++);
    std::vector<std::vector<float>> want(3);
    for (int threads : {1, 2, 3, 7, 16}) {
      ThreadPool pool(threads);
      std::vector<std::vector<float>> got(3);
      for (int i = 0; i < 3; ++i) got[i].assign(n * rows[i], NAN);
      matmul_multi(pool, x.data(), n, {{&w[0], got[0].data()}, {&w[1], got[1].data()}, {&w[2], got[2].data()}});
      for (int i = 0; i < 3; ++i) {
        for (float v : got[i]) ASSERT_FALSE(std::isnan(v)) << "a row left unwritten: output " << i;
        if (threads == 1) want[i] = got[i];
        ASSERT_EQ(0, std::memcmp(got[i].data(), want[i].data(), want[i].size() * 4))
            << "output " << i << " (" << dtype_name(types[i]) << ") n=" << n << " threads=" << threads;
      }
    }
  }
}

TEST(PackedWeights, OnlyWholeGroupsOfEightRowsArePacked) {
  const auto bytes = random_weight_bytes(DType::kQ8_0, 12, 64, 7);
  const Weight odd{bytes.data(), DType::kQ8_0, 12, 64};
  EXPECT_FALSE(packable(odd));
  const auto f = random_weight_bytes(DType::kF32, 16, 64, 8);
  EXPECT_FALSE(packable(Weight{f.data(), DType::kF32, 16, 64}));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MatmulIsaTest, ::testing::ValuesIn(kAllIsas),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });

// The SIMD activation quantizer rounds exactly like the scalar one (and so like ggml).
TEST(QuantizeActivations, SimdMatchesScalarBitwise) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "CPU lacks avx2";
  const int64_t cols = 4096;
  auto x = random_acts(1, cols, 7);
  // Ties: amax 127 gives scale 1, so 2.5 -> 2 and -3.5 -> -4 (half to even), 0.5 -> 0.
  x[0] = 127.0f, x[1] = 2.5f, x[2] = -3.5f, x[3] = 0.5f;
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;        // an all-zero block
  for (int i = 64; i < 96; ++i) x[i] = 1e-30f * i;  // subnormal-scale block
  std::vector<float> d1(cols / 32), d2(cols / 32);
  std::vector<int8_t> q1(cols), q2(cols);
  std::vector<int32_t> s1(cols / 32), s2(cols / 32);
  scalar::quantize(x.data(), cols, d1.data(), q1.data(), s1.data());
#if defined(__x86_64__)
  avx2::quantize(x.data(), cols, d2.data(), q2.data(), s2.data());
#endif
  EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * 4));
  EXPECT_EQ(0, std::memcmp(q1.data(), q2.data(), q1.size()));
  EXPECT_EQ(0, std::memcmp(s1.data(), s2.data(), s1.size() * 4));
  int32_t block0 = 0;
  for (int i = 0; i < 32; ++i) block0 += q1[i];
  EXPECT_EQ(s1[0], block0);
  EXPECT_EQ(s1[1], 0);
  EXPECT_EQ(q1[0], 127);
  EXPECT_EQ(q1[1], 2);
  EXPECT_EQ(q1[2], -4);
  EXPECT_EQ(q1[3], 0);
  EXPECT_EQ(d1[0], f16_to_f32(f32_to_f16(1.0f)));
  EXPECT_EQ(d1[1], 0.0f);
  EXPECT_EQ(q1[40], 0);
}

// The SIMD K-quant dequantizers produce exactly the scalar (ggml) values.
TEST(DequantizeKQuants, SimdMatchesScalarBitwise) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "CPU lacks avx2";
  const int64_t rows = 5, cols = 1024;
  for (DType dt : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS, DType::kQ2_K}) {
    const auto bytes = random_weight_bytes(dt, rows, cols, 31);
    const Weight w{bytes.data(), dt, rows, cols};
    std::vector<float> a(cols), b(cols);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, a.data());
#if defined(__x86_64__)
      avx2::dequant_k(dt, bytes.data() + r * row_bytes(dt, cols), cols, b.data());
#endif
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), cols * 4)) << dtype_name(dt) << " row " << r;
    }
  }
}

// Rounding the activations moves results by far more than f32 rounding does (the reason the
// quantized references need matmul_ref_quantized_acts), but stays within ~1% of the scale.
TEST(MatmulReference, QuantizedActivationsStayCloseToExact) {
  const int64_t rows = 16, cols = 1024, n = 3;
  for (DType dt : {DType::kQ8_0, DType::kQ4_0}) {
    const auto bytes = random_weight_bytes(dt, rows, cols, 11);
    const Weight w{bytes.data(), dt, rows, cols};
    const auto x = random_acts(n, cols, 12);
    std::vector<float> exact(n * rows), rounded(n * rows);
    matmul_ref(x.data(), n, w, exact.data());
    matmul_ref_quantized_acts(x.data(), n, w, rounded.data());
    const auto mag = magnitudes(x, n, w);
    double worst = 0;
    for (int64_t i = 0; i < n * rows; ++i) worst = std::max(worst, std::fabs(exact[i] - rounded[i]) / mag[i]);
    EXPECT_LT(worst, 1e-2) << dtype_name(dt);
    EXPECT_GT(worst, 1e-6) << dtype_name(dt) << ": activations were not rounded";
  }
}

// ---- dequantize_row against hand-built blocks ----

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

TEST(DequantizeRow, PlainFloatTypes) {
  float f[2] = {1.5f, -2.25f};
  std::vector<float> out(2);
  dequantize_row(Weight{reinterpret_cast<uint8_t*>(f), DType::kF32, 1, 2}, 0, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.25f);
  uint8_t h[4];
  put16(h, 0x3c00), put16(h + 2, 0xc000);  // f16 1.0, -2.0
  dequantize_row(Weight{h, DType::kF16, 1, 2}, 0, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  put16(h, 0x3f80), put16(h + 2, 0xc0a0);  // bf16 1.0, -5.0
  dequantize_row(Weight{h, DType::kBF16, 1, 2}, 0, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -5.0f);
}

TEST(DequantizeRow, Q8_0AndQ4_0) {
  uint8_t q8[2 * 34] = {};
  put16(q8, 0x3800);  // d = 0.5
  for (int i = 0; i < 32; ++i) q8[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  put16(q8 + 34, 0x4000);  // second row d = 2
  q8[36] = static_cast<uint8_t>(-127);
  std::vector<float> out(32);
  dequantize_row(Weight{q8, DType::kQ8_0, 2, 32}, 0, out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * (i - 16));
  dequantize_row(Weight{q8, DType::kQ8_0, 2, 32}, 1, out.data());
  EXPECT_EQ(out[0], -254.0f);
  EXPECT_EQ(out[1], 0.0f);

  uint8_t q4[18] = {};
  put16(q4, 0x4000);  // d = 2
  q4[2] = 0x1f;       // element 0 = low nibble 15, element 16 = high nibble 1
  q4[3] = 0x88;       // elements 1 and 17 = 8 - 8 = 0
  dequantize_row(Weight{q4, DType::kQ4_0, 1, 32}, 0, out.data());
  EXPECT_EQ(out[0], 14.0f);
  EXPECT_EQ(out[16], -14.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[17], 0.0f);
  EXPECT_EQ(out[2], -16.0f);  // nibble 0
}

TEST(DequantizeRow, Q5_0) {
  uint8_t b[22] = {};
  put16(b, 0x4000);  // d = 2
  const uint32_t qh = 1u << 0 | 1u << 17 | 1u << 31;
  std::memcpy(b + 2, &qh, 4);
  uint8_t* qs = b + 6;
  qs[0] = 0x1f;   // element 0 = 15 + 16 = 31; element 16 = 1 (bit 16 clear)
  qs[1] = 0x3a;   // element 1 = 10; element 17 = 3 + 16 = 19
  qs[15] = 0xf0;  // element 15 = 0; element 31 = 15 + 16 = 31
  std::vector<float> out(32);
  dequantize_row(Weight{b, DType::kQ5_0, 1, 32}, 0, out.data());
  EXPECT_EQ(out[0], 2.0f * 15);
  EXPECT_EQ(out[16], 2.0f * -15);
  EXPECT_EQ(out[1], 2.0f * -6);
  EXPECT_EQ(out[17], 2.0f * 3);
  EXPECT_EQ(out[15], 2.0f * -16);
  EXPECT_EQ(out[31], 2.0f * 15);
  EXPECT_EQ(out[2], 2.0f * -16);  // code 0
}

// Q5_0 files written by the quantizer stay within half a step of the source.
TEST(QuantizeQ5_0, WithinHalfAStep) {
  const int64_t rows = 7, cols = 96;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = normal(rng);
  x[5] = 40.0f, x[cols + 40] = -40.0f;  // outliers of either sign
  std::vector<uint8_t> q5(static_cast<size_t>(rows * row_bytes(DType::kQ5_0, cols)));
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_TRUE(
        gb::convert_row(&x[r * cols], cols, DType::kQ5_0, q5.data() + r * row_bytes(DType::kQ5_0, cols)).is_ok());
  const Weight w5{q5.data(), DType::kQ5_0, rows, cols};
  std::vector<float> a(cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w5, r, a.data());
    for (int64_t blk = 0; blk < cols / 32; ++blk) {
      float m = 0;  // the block's value of largest magnitude, with its sign
      for (int i = 0; i < 32; ++i)
        m = std::fabs(x[r * cols + blk * 32 + i]) > std::fabs(m) ? x[r * cols + blk * 32 + i] : m;
      const float d = m / -16;  // codes 0..31 hold d·(code − 16): m itself is code 0
      for (int i = 0; i < 32; ++i) {
        const int64_t k = r * cols + blk * 32 + i;
        // Half a step (plus the fp16 rounding of d over up to 16 steps); a full step where the
        // top code 31 clamps a value of the other sign (x/d above 15.5).
        const float bound = ((x[k] / d > 15.5f ? 1.0f : 0.5f) + 0.01f) * std::fabs(d);
        ASSERT_LE(std::fabs(a[blk * 32 + i] - x[k]), bound) << "element " << k;
      }
    }
  }
}

void expect_matmul_bitwise(ThreadPool& pool, const Weight& weight, const std::vector<float>& x,
                           std::initializer_list<int64_t> counts, const std::vector<float>& want);

// Q5_0 runs natively (packed: Q4_0's nibble vectors plus one vector of the rows' qh words, the
// fifth bits placed by a byte shuffle and a bit test; its codes taken 0..31 with −16·Σx):
// matmul's integer sums are ggml's q5_0 · q8_0 (its decode written out as ggml's
// dequantize_row_q5_0 has it), fma(d·d_x, isum, acc) in block order — bitwise, on every ISA,
// row-major and packed, through every kernel (in place, 512-bit, 16-row from 4 tokens, panels
// from 8), with rows past the last group of 8.
TEST(MatmulQ5_0, NativeKernelsMultiplyAsGgmlsDotProduct) {
  ThreadPool pool(2);
  for (int64_t rows : {24, 13}) {
    const int64_t cols = 160, nb = cols / 32, n = 70;
    std::mt19937 rng(57 + static_cast<uint32_t>(rows));
    std::vector<uint8_t> q5(static_cast<size_t>(rows * row_bytes(DType::kQ5_0, cols)));
    for (auto& v : q5) v = static_cast<uint8_t>(rng());
    for (int64_t b = 0; b < rows * nb; ++b) put16(&q5[b * 22], f32_to_f16(0.001f + 0.01f * (rng() % 100) / 100.0f));
    const Weight w5{q5.data(), DType::kQ5_0, rows, cols};
    const auto x = random_acts(n, cols, 58);
    std::vector<float> want(n * rows), d(nb);
    std::vector<int8_t> q(cols);
    for (int64_t t = 0; t < n; ++t) {
      quantize_activations_q8(&x[t * cols], cols, d.data(), q.data());
      for (int64_t r = 0; r < rows; ++r) {
        float acc = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = &q5[(r * nb + b) * 22];
          uint32_t qh;
          std::memcpy(&qh, blk + 2, 4);
          int32_t isum = 0;
          for (int j = 0; j < 16; ++j) {
            const int x0 = ((blk[6 + j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16;
            const int x1 = ((blk[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            isum += x0 * q[b * 32 + j] + x1 * q[b * 32 + j + 16];
          }
          uint16_t dw;
          std::memcpy(&dw, blk, 2);
          acc = std::fma(f16_to_f32(dw) * d[b], static_cast<float>(isum), acc);
        }
        want[t * rows + r] = acc;
      }
    }
    expect_matmul_bitwise(pool, w5, x, {1, 2, 3, 4, 5, 8, 9, 17, n}, want);
  }
}

// Q3_K as ggml's dequantize_row_q3_K / vec_dot_q3_K read it, written out independently: the 12
// scale bytes unpacked through four 32-bit words, codes 0..7 minus 4 where the hmask bit is clear.
void q3k_reference_decode(const uint8_t* blk, int* scale, int* code) {
  uint32_t aux[4];
  std::memcpy(aux, blk + 96, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | (((tmp >> 4) & 0x03030303) << 4);
  aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | (((tmp >> 6) & 0x03030303) << 4);
  aux[0] = (aux[0] & 0x0f0f0f0f) | (((tmp >> 0) & 0x03030303) << 4);
  aux[1] = (aux[1] & 0x0f0f0f0f) | (((tmp >> 2) & 0x03030303) << 4);
  const auto* s = reinterpret_cast<const int8_t*>(aux);
  for (int k = 0; k < 16; ++k) scale[k] = s[k] - 32;
  int i = 0;
  for (int half = 0; half < 2; ++half) {
    for (int shift = 0; shift < 8; shift += 2) {
      const uint8_t m = static_cast<uint8_t>(1 << (4 * half + shift / 2));
      for (int l = 0; l < 32; ++l, ++i) code[i] = ((blk[32 + 32 * half + l] >> shift) & 3) - ((blk[l] & m) ? 0 : 4);
    }
  }
}

// matmul of a weight, row-major and (where its rows allow) packed as at load, on every ISA this
// CPU runs, for each token count: bitwise the definition `want` [max count, rows] (a prefix of it
// for fewer tokens).
void expect_matmul_bitwise(ThreadPool& pool, const Weight& weight, const std::vector<float>& x,
                           std::initializer_list<int64_t> counts, const std::vector<float>& want) {
  std::vector<uint8_t> packed(static_cast<size_t>(weight.rows * row_bytes(weight.dtype, weight.cols)));
  Weight wp = weight;
  if (packable(wp)) {
    pack_weight(wp, packed.data());
    wp.packed = packed.data();
  }
  int compared = 0;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    ScopedIsa s(isa);
    if (!s.ok()) continue;
    for (const Weight& w : {weight, wp}) {
      for (int64_t m : counts) {
        std::vector<float> y(m * w.rows, NAN);
        matmul(pool, x.data(), m, w, y.data());
        ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
            << isa_name(isa) << (w.packed ? " packed" : " row-major") << " n=" << m;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, weight.rows % 8 == 0 ? 6 : 3);
}

// Q3_K runs natively (packed: 12 scale-byte planes, 2-bit and high-bit code vectors; its codes
// taken 0..7 with −4 per scale): matmul's integer sums are ggml's q3_K · q8_K (Σ scale · Σ code ·
// x per super-block, fma(d·d_x, isum, acc) in block order) — bitwise, on every ISA, row-major
// and packed, through every kernel: in place (1–3 tokens; 16 rows at a time on AVX-512 from 4),
// panels from row-major weights (from 8) and from packed ones (from 128), rows past the last
// group of 8, scale bytes and codes random (every scale and hmask bit pattern).
TEST(MatmulQ3_K, NativeKernelsMultiplyAsGgmlsDotProduct) {
  ThreadPool pool(2);
  for (int64_t rows : {24, 13}) {
    const int64_t cols = 768, n = 130;
    std::mt19937 rng(31 + static_cast<uint32_t>(rows));
    std::vector<uint8_t> q3(static_cast<size_t>(rows * row_bytes(DType::kQ3_K, cols)));
    for (auto& v : q3) v = static_cast<uint8_t>(rng());
    for (size_t b = 0; b < q3.size() / 110; ++b)
      put16(&q3[b * 110 + 108], f32_to_f16(0.001f + 0.004f * (rng() % 100) / 100.0f));
    const Weight w3{q3.data(), DType::kQ3_K, rows, cols};
    const auto x = random_acts(n, cols, 32);
    std::vector<float> want(n * rows), d(cols / 256);
    std::vector<int8_t> q(cols);
    std::vector<int16_t> b16(cols / 16);
    std::vector<int32_t> b32(cols / 32);
    for (int64_t t = 0; t < n; ++t) {
      quantize_activations_q8k(&x[t * cols], cols, d.data(), q.data(), b16.data(), b32.data());
      for (int64_t r = 0; r < rows; ++r) {
        float acc = 0;
        for (int64_t sb = 0; sb < cols / 256; ++sb) {
          const uint8_t* blk = &q3[(r * (cols / 256) + sb) * 110];
          int scale[16], code[256];
          q3k_reference_decode(blk, scale, code);
          int32_t isum = 0;
          for (int k = 0; k < 16; ++k) {
            int32_t s = 0;
            for (int i = 16 * k; i < 16 * k + 16; ++i) s += code[i] * q[sb * 256 + i];
            isum += scale[k] * s;
          }
          uint16_t dw;
          std::memcpy(&dw, blk + 108, 2);
          acc = std::fma(f16_to_f32(dw) * d[sb], static_cast<float>(isum), acc);
        }
        want[t * rows + r] = acc;
      }
    }
    expect_matmul_bitwise(pool, w3, x, {1, 2, 3, 4, 5, 8, 17, 64, n}, want);
  }
}

TEST(DequantizeRow, Q4_1AndQ5_1) {
  uint8_t b4[20] = {}, b5[24] = {};
  put16(b4, 0x4000), put16(b4 + 2, 0xbc00);  // d = 2, m = -1
  b4[4] = 0x3f;                              // element 0 = 15, element 16 = 3
  put16(b5, 0x3800), put16(b5 + 2, 0x3c00);  // d = 0.5, m = 1
  const uint32_t qh = 1u << 0 | 1u << 31;
  std::memcpy(b5 + 4, &qh, 4);
  b5[8] = 0x2f;   // element 0 = 15 + 16 = 31, element 16 = 2
  b5[23] = 0xf1;  // element 15 = 1, element 31 = 15 + 16 = 31
  std::vector<float> out(32);
  dequantize_row(Weight{b4, DType::kQ4_1, 1, 32}, 0, out.data());
  EXPECT_EQ(out[0], 2.0f * 15 - 1);
  EXPECT_EQ(out[16], 2.0f * 3 - 1);
  EXPECT_EQ(out[1], -1.0f);  // code 0: the block's minimum
  dequantize_row(Weight{b5, DType::kQ5_1, 1, 32}, 0, out.data());
  EXPECT_EQ(out[0], 0.5f * 31 + 1);
  EXPECT_EQ(out[16], 0.5f * 2 + 1);
  EXPECT_EQ(out[15], 0.5f * 1 + 1);
  EXPECT_EQ(out[31], 0.5f * 31 + 1);
  EXPECT_EQ(out[5], 1.0f);
}

// Q4_1 / Q5_1 run natively (packed as Q4_0 / Q5_0 after the 8 rows' m; codes unsigned, no
// offset) with their blocks' offsets copied out at load (with_block_offsets: Weight::mins), and
// matmul computes its definition — the block sums' f32 chain, then the offsets' own chain
// fma(m, d_x·Σ codes, ·), added — bitwise on every ISA, row-major and packed, through every
// kernel (in place, 16-row from 4 tokens, panels from 8), with rows past the last whole group
// of 8. The quantizers stay within half a step of their source.
TEST(MatmulQ4_1AndQ5_1, NativeKernelsMultiplyWithTheirOffsets) {
  ThreadPool pool(2);
  for (DType dt : {DType::kQ4_1, DType::kQ5_1}) {
    for (int64_t rows : {24, 13}) {
      const int64_t cols = 160, nb = cols / 32;
      std::mt19937 rng(static_cast<uint32_t>(rows) * 7 + static_cast<uint32_t>(dt));
      std::normal_distribution<float> normal(0.02f, 0.05f);
      std::vector<float> src(rows * cols);
      for (auto& v : src) v = normal(rng);
      std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes(dt, cols)));
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_TRUE(gb::convert_row(&src[r * cols], cols, dt, bytes.data() + r * row_bytes(dt, cols)).is_ok());
      const Weight wq{bytes.data(), dt, rows, cols};
      auto wide = with_block_offsets(wq);
      ASSERT_TRUE(wide.is_ok()) << wide.message();
      ASSERT_EQ(wide->weight.dtype, dt);
      ASSERT_EQ(wide->weight.data, wq.data);
      ASSERT_NE(wide->weight.mins, nullptr);
      std::vector<float> a(cols);
      const float top = dt == DType::kQ4_1 ? 15.0f : 31.0f;
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(wq, r, a.data());
        for (int64_t blk = 0; blk < nb; ++blk) {
          float lo = src[r * cols + blk * 32], hi = lo;
          for (int i = 0; i < 32; ++i)
            lo = std::min(lo, src[r * cols + blk * 32 + i]), hi = std::max(hi, src[r * cols + blk * 32 + i]);
          const float step = (hi - lo) / top;  // half a step, plus fp16 rounding of d (over 31 steps) and m
          for (int i = 0; i < 32; ++i)
            ASSERT_LE(std::fabs(a[blk * 32 + i] - src[r * cols + blk * 32 + i]), 0.5f * step + 0.02f * step + 1e-4f);
        }
      }
      // The definition, from the file's blocks.
      const int64_t n = 70;
      const auto x = random_acts(n, cols, 77);
      std::vector<float> want(n * rows), xd(nb);
      std::vector<int8_t> xq(cols);
      for (int64_t t = 0; t < n; ++t) {
        quantize_activations_q8(&x[t * cols], cols, xd.data(), xq.data());
        for (int64_t r = 0; r < rows; ++r) {
          float acc = 0, macc = 0;
          for (int64_t blk = 0; blk < nb; ++blk) {
            const uint8_t* p = bytes.data() + r * row_bytes(dt, cols) + blk * dtype_info(dt).block_bytes;
            uint16_t d16, m16;
            std::memcpy(&d16, p, 2);
            std::memcpy(&m16, p + 2, 2);
            int32_t isum = 0, xsum = 0;
            for (int i = 0; i < 32; ++i) {
              const uint8_t byte = p[(dt == DType::kQ4_1 ? 4 : 8) + i % 16];
              int code = i < 16 ? byte & 0xf : byte >> 4;
              if (dt == DType::kQ5_1) {
                uint32_t qh;
                std::memcpy(&qh, p + 4, 4);
                code |= static_cast<int>((qh >> i) & 1) << 4;
              }
              isum += code * xq[blk * 32 + i];
              xsum += xq[blk * 32 + i];
            }
            acc = std::fma(f16_to_f32(d16) * xd[blk], static_cast<float>(isum), acc);
            macc = std::fma(f16_to_f32(m16), xd[blk] * static_cast<float>(xsum), macc);
          }
          want[t * rows + r] = acc + macc;
        }
      }
      std::vector<uint8_t> packed(bytes.size());
      std::vector<Weight> layouts = {wide->weight};
      if (packable(wide->weight)) {
        pack_weight(wide->weight, packed.data());
        layouts.push_back(wide->weight);
        layouts.back().packed = packed.data();
      }
      int compared = 0;
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
        ScopedIsa s(isa);
        if (!s.ok()) continue;
        for (const Weight& w : layouts) {
          for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8}, int64_t{17}, n}) {
            std::vector<float> y(m * rows, NAN);
            matmul(pool, x.data(), m, w, y.data());
            ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
                << isa_name(isa) << " " << dtype_name(dt) << " rows=" << rows << (w.packed ? " packed" : " row-major")
                << " n=" << m;
            ++compared;
          }
        }
      }
      EXPECT_GE(compared, 6);
      // The double reference of the same arithmetic stays within f32 rounding.
      std::vector<float> ref(n * rows);
      matmul_ref_quantized_acts(x.data(), n, wide->weight, ref.data());
      const auto mag = magnitudes(x, n, wide->weight);
      for (int64_t i = 0; i < n * rows; ++i) ASSERT_NEAR(want[i], ref[i], 1e-5 * mag[i] + 1e-6) << i;
    }
  }
}

TEST(DequantizeRow, IQ4_NL) {
  uint8_t b[18] = {};
  put16(b, 0x4000);  // d = 2
  b[2] = 0xf0;       // element 0: level 0 (-127); element 16: level 15 (113)
  b[3] = 0x78;       // element 1: level 8 (1); element 17: level 7 (-10)
  std::vector<float> out(32);
  dequantize_row(Weight{b, DType::kIQ4_NL, 1, 32}, 0, out.data());
  EXPECT_EQ(out[0], 2.0f * -127);
  EXPECT_EQ(out[16], 2.0f * 113);
  EXPECT_EQ(out[1], 2.0f * 1);
  EXPECT_EQ(out[17], 2.0f * -10);
  EXPECT_EQ(out[2], 2.0f * -127);
}

// IQ4_NL runs natively (packed as Q4_0; each nibble vector looked up in its 16-level table by
// one vpshufb, the levels signed like Q8_0's codes): matmul's integer sums are ggml's
// iq4_nl · q8_0 (Σ level · x per block) — bitwise on every ISA, packed and row-major, through
// every kernel (in place, 16-row from 4 tokens, panels from 8). Its encoder puts each value on
// its nearest level.
TEST(MatmulIQ4_NL, NativeKernelsMultiplyAsGgmlsDotProduct) {
  ThreadPool pool(2);
  const int64_t rows = 24, cols = 96, nb = cols / 32, n = 70;
  static constexpr int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> src(rows * cols);
  for (auto& v : src) v = normal(rng);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes(DType::kIQ4_NL, cols)));
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_TRUE(gb::convert_row(&src[r * cols], cols, DType::kIQ4_NL, bytes.data() + r * nb * 18).is_ok());
  const Weight wi{bytes.data(), DType::kIQ4_NL, rows, cols};
  std::vector<float> a(cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(wi, r, a.data());
    for (int64_t i = 0; i < cols; ++i) {  // no other level is nearer
      uint16_t d16;
      std::memcpy(&d16, bytes.data() + r * nb * 18 + i / 32 * 18, 2);
      for (int l = 0; l < 16; ++l)
        ASSERT_LE(std::fabs(a[i] - src[r * cols + i]),
                  std::fabs(f16_to_f32(d16) * kLevels[l] - src[r * cols + i]) + 1e-7f);
    }
  }
  const auto x = random_acts(n, cols, 42);
  std::vector<float> want(n * rows), xd(nb);
  std::vector<int8_t> xq(cols);
  for (int64_t t = 0; t < n; ++t) {
    quantize_activations_q8(&x[t * cols], cols, xd.data(), xq.data());
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0;
      for (int64_t blk = 0; blk < nb; ++blk) {
        const uint8_t* p = bytes.data() + (r * nb + blk) * 18;
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j)
          isum += kLevels[p[2 + j] & 0xf] * xq[blk * 32 + j] + kLevels[p[2 + j] >> 4] * xq[blk * 32 + 16 + j];
        uint16_t d16;
        std::memcpy(&d16, p, 2);
        acc = std::fma(f16_to_f32(d16) * xd[blk], static_cast<float>(isum), acc);
      }
      want[t * rows + r] = acc;
    }
  }
  expect_matmul_bitwise(pool, wi, x, {1, 2, 3, 4, 5, 8, 9, 17, n}, want);
}

TEST(DequantizeRow, IQ4_XS) {
  uint8_t b[136] = {};
  put16(b, 0x4000);  // d = 2
  // Sub-block 0: ls = 0x05 | 0b10 << 4 = 37 (scale 5); sub-block 1: ls = 0x0 | 0b00 << 4 (−32);
  // sub-block 7: ls = 0xf | 0b11 << 4 = 63 (31).
  put16(b + 2, 0b11'00'00'00'00'00'00'10);
  b[4] = 0x05;
  b[7] = 0xf0;
  b[8] = 0xf0;        // sub-block 0: element 0 level 0 (−127), element 16 level 15 (113)
  b[8 + 16] = 0x78;   // sub-block 1: element 32 level 8 (1), element 48 level 7 (−10)
  b[8 + 112] = 0x1e;  // sub-block 7: element 224 level 14 (89), element 240 level 1 (−104)
  std::vector<float> out(256);
  dequantize_row(Weight{b, DType::kIQ4_XS, 1, 256}, 0, out.data());
  EXPECT_EQ(out[0], 2.0f * 5 * -127);
  EXPECT_EQ(out[16], 2.0f * 5 * 113);
  EXPECT_EQ(out[1], 2.0f * 5 * -127);
  EXPECT_EQ(out[32], 2.0f * -32 * 1);
  EXPECT_EQ(out[48], 2.0f * -32 * -10);
  EXPECT_EQ(out[224], 2.0f * 31 * 89);
  EXPECT_EQ(out[240], 2.0f * 31 * -104);
  EXPECT_EQ(out[100], 2.0f * -32 * -127);  // sub-block 3: all-zero scale bits (ls 0) and codes
}

// IQ4_XS runs natively (packed groups of 8 rows, each code vector's nibbles looked up in the
// level table by one vpshufb, 8 sub-block scales per row unpacked in int32 lanes; the in-place
// kernel for rows past the last group; AVX2 from 8 tokens: wide int16 panels of level · scale):
// matmul's integer sums are ggml's iq4_xs · q8_K (per super-block Σ_sub-block (ls − 32)·Σ
// level·x, times d_w·d_x) — bitwise on every ISA, packed and row-major, at every token count. Its
// encoder (ggml's reference search) keeps each value on the level nearest it for its sub-block's
// scale, and round-trips Gaussian rows within 10% RMS.
TEST(MatmulIQ4_XS, NativeKernelsMultiplyAsGgmlsDotProduct) {
  ThreadPool pool(2);
  static constexpr int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int64_t rows : {24, 13, 136}) {  // 136: AVX2's wide panels over three row blocks of 64
    const int64_t cols = 768, nb = cols / 256, n = 70;
    std::mt19937 rng(91 + static_cast<uint32_t>(rows));
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> src(rows * cols);
    for (auto& v : src) v = normal(rng);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes(DType::kIQ4_XS, cols)));
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_TRUE(gb::convert_row(&src[r * cols], cols, DType::kIQ4_XS, bytes.data() + r * nb * 136).is_ok());
    const Weight w{bytes.data(), DType::kIQ4_XS, rows, cols};
    auto scale_of = [&](const uint8_t* blk, int s) {
      uint16_t h;
      std::memcpy(&h, blk + 2, 2);
      return (((blk[4 + s / 2] >> (4 * (s % 2))) & 0xf) | ((h >> (2 * s)) & 3) << 4) - 32;
    };
    std::vector<float> deq(cols);
    double err2 = 0, norm2 = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, deq.data());
      for (int64_t i = 0; i < cols; ++i) {
        const uint8_t* blk = bytes.data() + (r * nb + i / 256) * 136;
        uint16_t d16;
        std::memcpy(&d16, blk, 2);
        const float dl = f16_to_f32(d16) * static_cast<float>(scale_of(blk, static_cast<int>(i % 256 / 32)));
        for (int l = 0; l < 16; ++l)  // no other level of the sub-block is nearer
          ASSERT_LE(std::fabs(deq[i] - src[r * cols + i]), std::fabs(dl * kLevels[l] - src[r * cols + i]) + 1e-6f)
              << "row " << r << " element " << i;
        err2 += std::pow(deq[i] - src[r * cols + i], 2.0);
        norm2 += std::pow(src[r * cols + i], 2.0);
      }
    }
    EXPECT_LT(std::sqrt(err2 / norm2), 0.10);
    const auto x = random_acts(n, cols, 92);
    std::vector<float> want(n * rows), kd(nb);
    std::vector<int8_t> kq(cols);
    std::vector<int16_t> b16(cols / 16);
    std::vector<int32_t> b32(cols / 32);
    for (int64_t t = 0; t < n; ++t) {
      quantize_activations_q8k(&x[t * cols], cols, kd.data(), kq.data(), b16.data(), b32.data());
      for (int64_t r = 0; r < rows; ++r) {
        float acc = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = bytes.data() + (r * nb + b) * 136;
          int32_t isum = 0;
          for (int s = 0; s < 8; ++s) {
            int32_t dot = 0;
            for (int j = 0; j < 16; ++j) {
              const uint8_t q = blk[8 + 16 * s + j];
              dot += kLevels[q & 0xf] * kq[b * 256 + 32 * s + j] + kLevels[q >> 4] * kq[b * 256 + 32 * s + 16 + j];
            }
            isum += scale_of(blk, s) * dot;
          }
          uint16_t d16;
          std::memcpy(&d16, blk, 2);
          acc = std::fma(f16_to_f32(d16) * kd[b], static_cast<float>(isum), acc);
        }
        want[t * rows + r] = acc;
      }
    }
    expect_matmul_bitwise(pool, w, x, {1, 2, 3, 4, 5, 8, 9, 17, 64, n}, want);
  }
}

TEST(DequantizeRow, Q2_K) {
  uint8_t b[84] = {};
  put16(b + 80, 0x4000);            // d = 2
  put16(b + 82, 0x3800);            // dmin = 0.5
  b[0] = 0x35;                      // sub-block 0 (elements 0..15): scale 5, min 3
  b[9] = 0xf1;                      // sub-block 9 (elements 144..159): scale 1, min 15
  b[16] = 0b11'10'01'11;            // byte 0: element 0 code 3, element 32 code 1, 64 code 2, 96 code 3
  b[16 + 32 + 16] = 0b00'00'10'00;  // byte 48: element 128 + 16 + 32 = 176 code 2 (sub-block 11)
  b[16 + 32 + 17] = 0b00'00'00'11;  // byte 49: element 145 code 3 (sub-block 9)
  std::vector<float> out(256);
  dequantize_row(Weight{b, DType::kQ2_K, 1, 256}, 0, out.data());
  EXPECT_EQ(out[0], 2.0f * 5 * 3 - 0.5f * 3);
  EXPECT_EQ(out[1], 2.0f * 5 * 0 - 0.5f * 3);
  EXPECT_EQ(out[32], 0.0f);  // sub-block 2: scale 0, min 0
  EXPECT_EQ(out[145], 2.0f * 1 * 3 - 0.5f * 15);
  EXPECT_EQ(out[144], 2.0f * 1 * 0 - 0.5f * 15);
  EXPECT_EQ(out[176], 0.0f);  // code 2, but sub-block 11 has scale 0 and min 0
}

// Q2_K runs natively (packed: 16 scale planes and 16 code vectors per group, four 2-bit code
// vectors from each; the mins as int16 pair products with the code sums per 16): matmul's
// integer sums are ggml's q2_K · q8_K (d·d_x·Σ sc·Σ q·x − dmin·d_x·Σ mn·Σ x per super-block) —
// bitwise on every ISA, packed and row-major, at every token count, rows past the last group of
// 8, scale bytes and codes random. Its encoder round-trips Gaussian rows within 40% RMS.
TEST(MatmulQ2_K, NativeKernelsMultiplyAsGgmlsDotProduct) {
  ThreadPool pool(2);
  for (int64_t rows : {24, 13}) {
    const int64_t cols = 512, nb = cols / 256, n = 70;
    const auto bytes = random_weight_bytes(DType::kQ2_K, rows, cols, 71 + static_cast<uint32_t>(rows));
    const Weight w{bytes.data(), DType::kQ2_K, rows, cols};
    const auto x = random_acts(n, cols, 72);
    std::vector<float> want(n * rows), kd(nb);
    std::vector<int8_t> kq(cols);
    std::vector<int16_t> b16(cols / 16);
    std::vector<int32_t> b32(cols / 32);
    for (int64_t t = 0; t < n; ++t) {
      quantize_activations_q8k(&x[t * cols], cols, kd.data(), kq.data(), b16.data(), b32.data());
      for (int64_t r = 0; r < rows; ++r) {
        float acc = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = bytes.data() + (r * nb + b) * 84;
          int32_t isum = 0, msum = 0;
          for (int s = 0; s < 16; ++s) {  // ggml's element order: qs[32h + l] >> 2j, l = 0..31
            const int h = s / 8, j = s % 8 / 2, half = s % 2;
            int32_t dot = 0, xs = 0;
            for (int l = 16 * half; l < 16 * half + 16; ++l) {
              const int i = 128 * h + 32 * j + l;
              dot += ((blk[16 + 32 * h + l] >> (2 * j)) & 3) * kq[b * 256 + i];
              xs += kq[b * 256 + i];
            }
            isum += (blk[s] & 0xf) * dot;
            msum += (blk[s] >> 4) * xs;
          }
          uint16_t d16, m16;
          std::memcpy(&d16, blk + 80, 2);
          std::memcpy(&m16, blk + 82, 2);
          acc = std::fma(f16_to_f32(d16) * kd[b], static_cast<float>(isum), acc);
          acc = std::fma(-(f16_to_f32(m16) * kd[b]), static_cast<float>(msum), acc);
        }
        want[t * rows + r] = acc;
      }
    }
    expect_matmul_bitwise(pool, w, x, {1, 2, 3, 4, 5, 8, 9, 17, 64, n}, want);
  }
  // The encoder: each value within its sub-block's reach, the row's RMS error bounded.
  std::mt19937 rng(73);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> src(1024), deq(1024);
  for (auto& v : src) v = normal(rng);
  std::vector<uint8_t> q2(static_cast<size_t>(row_bytes(DType::kQ2_K, 1024)));
  ASSERT_TRUE(gb::convert_row(src.data(), 1024, DType::kQ2_K, q2.data()).is_ok());
  dequantize_row(Weight{q2.data(), DType::kQ2_K, 1, 1024}, 0, deq.data());
  double err2 = 0, norm2 = 0;
  for (int i = 0; i < 1024; ++i) err2 += std::pow(deq[i] - src[i], 2.0), norm2 += std::pow(src[i], 2.0);
  EXPECT_LT(std::sqrt(err2 / norm2), 0.4);
}

TEST(WithBlockOffsets, RejectsTypesWithoutOffsets) {
  uint8_t dummy[256] = {};
  auto a = with_block_offsets(Weight{dummy, DType::kQ6_K, 1, 256});
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.message().find("q6_k"), std::string::npos);
  auto b = with_block_offsets(Weight{dummy, DType::kQ4_1, 1, 48});
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.message().find("multiple of 32"), std::string::npos);
}

TEST(DequantizeRow, Q4_K) {
  uint8_t b[144] = {};
  put16(b, 0x3c00);      // d = 1
  put16(b + 2, 0x3800);  // dmin = 0.5
  uint8_t* sc = b + 4;
  sc[0] = 0x43;  // sub-block 0 scale 3; its top bits (1) are bits 4-5 of sub-block 4's scale
  sc[4] = 2;     // sub-block 0 min 2
  sc[8] = 0x51;  // sub-block 4: scale low bits 1, min low bits 5
  uint8_t* qs = b + 16;
  qs[0] = 0x75;   // element 0 (sub-block 0) = 5, element 32 (sub-block 1) = 7
  qs[64] = 0x0a;  // element 128 (sub-block 4) = 10
  std::vector<float> out(256);
  dequantize_row(Weight{b, DType::kQ4_K, 1, 256}, 0, out.data());
  EXPECT_EQ(out[0], 1.0f * 3 * 5 - 0.5f * 2);      // 14
  EXPECT_EQ(out[1], -1.0f);                        // q = 0: -dmin·min
  EXPECT_EQ(out[32], 0.0f);                        // sub-block 1: scale 0, min 0
  EXPECT_EQ(out[128], 1.0f * 17 * 10 - 0.5f * 5);  // 167.5
  EXPECT_EQ(out[129], -2.5f);
}

TEST(DequantizeRow, Q5_K) {
  uint8_t b[176] = {};
  put16(b, 0x3c00);      // d = 1
  put16(b + 2, 0x3800);  // dmin = 0.5
  uint8_t* sc = b + 4;   // Q4_K's scale and min packing
  sc[0] = 0x43;          // sub-block 0 scale 3; its top bits (1) are bits 4-5 of sub-block 4's scale
  sc[4] = 2;             // sub-block 0 min 2
  sc[8] = 0x51;          // sub-block 4: scale low bits 1, min low bits 5
  sc[11] = 0x02;         // sub-block 7: scale 2, min 0
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  qs[0] = 0x75;   // element 0 low bits 5, element 32 low bits 7
  qh[0] = 0x11;   // bit 0: element 0 + 16 = 21; bit 4: element 128 + 16
  qs[64] = 0x0a;  // element 128 low bits 10 -> 26
  qh[3] = 0x80;   // bit 7: element 224 + 3 (sub-block 7) ...
  qs[99] = 0xf0;  // ... high nibble 15 -> 31
  std::vector<float> out(256);
  dequantize_row(Weight{b, DType::kQ5_K, 1, 256}, 0, out.data());
  EXPECT_EQ(out[0], 1.0f * 3 * 21 - 0.5f * 2);     // 62
  EXPECT_EQ(out[1], -1.0f);                        // q = 0: -dmin·min
  EXPECT_EQ(out[32], 0.0f);                        // sub-block 1: scale 0, min 0
  EXPECT_EQ(out[128], 1.0f * 17 * 26 - 0.5f * 5);  // 439.5
  EXPECT_EQ(out[129], -2.5f);
  EXPECT_EQ(out[227], 1.0f * 2 * 31);  // 62
  EXPECT_EQ(out[226], 0.0f);           // code 0, min 0
}

TEST(DequantizeRow, Q6_K) {
  uint8_t b[210] = {};
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  put16(b + 208, 0x3800);  // d = 0.5
  sc[0] = 3, sc[6] = -2, sc[8] = 4;
  ql[0] = 0x07;   // element 0 low 4 bits 7; element 64 low bits 0
  qh[0] = 0x81;   // element 0 high bits 01 -> q = 23; element 96 high bits 10
  ql[32] = 0xf0;  // element 96 low bits 15 -> q = 47
  std::vector<float> out(256);
  dequantize_row(Weight{b, DType::kQ6_K, 1, 256}, 0, out.data());
  EXPECT_EQ(out[0], 0.5f * 3 * (23 - 32));    // -13.5
  EXPECT_EQ(out[96], 0.5f * -2 * (47 - 32));  // -15
  EXPECT_EQ(out[128], 0.5f * 4 * -32);        // -64: second half uses scales 8..15
  EXPECT_EQ(out[1], 0.5f * 3 * -32);          // -48
  EXPECT_EQ(out[16], 0.0f);                   // sub-block 1, scale 0
}

TEST(DequantizeRow, Q3_K) {
  uint8_t b[110] = {};
  uint8_t* hm = b;
  uint8_t* qs = b + 32;
  uint8_t* sc = b + 96;
  put16(b + 108, 0x3800);  // d = 0.5
  // Scales (6 bits, stored + 32): 0 -> 35 (3), 1 -> 30 (-2), 9 -> 0 (-32), 15 -> 63 (31).
  sc[0] = 0x03, sc[8] = 0x02;   // scale 0: low 3, high bits 2 (bits 0-1 of byte 8) -> 35
  sc[1] = 0xee;                 // scale 1: low 14 (low nibble); scale 9: low 14 (high nibble)
  sc[9] = 0x01 | 0x00 << 2;     // scale 1: high bits 1 -> 30; scale 5: high 0
  sc[7] = 0xf0, sc[11] = 0xc0;  // scale 15: low 15 (high nibble of byte 7), high bits 3 (bits 6-7 of byte 11)
  // scale 9's high bits: byte 8 + 1, bits 2-3 = 0 -> 14 - 32 = -18.
  qs[0] = 0x03 | 0x02 << 2;  // element 0: bits 3; element 32: bits 2
  hm[0] = 0x01;              // element 0: high bit set -> code 3; element 32: clear -> 2 - 4 = -2
  qs[16] = 0x01;             // element 16 (scale 1): bits 1, high bit clear -> -3
  qs[32 + 31] = 0xc0;        // element 128 + 96 + 31 = 255 (scale 15): bits 3
  hm[31] = 0x80;             // bit 4·1 + 3: element 255's high bit -> code 3
  std::vector<float> out(256);
  dequantize_row(Weight{b, DType::kQ3_K, 1, 256}, 0, out.data());
  EXPECT_EQ(out[0], 0.5f * 3 * 3);
  EXPECT_EQ(out[32], 0.5f * -32 * -2);  // scale 2: all bits clear -> -32
  EXPECT_EQ(out[16], 0.5f * (30 - 32) * -3);
  EXPECT_EQ(out[255], 0.5f * 31 * 3);
  EXPECT_EQ(out[150], 0.5f * (14 - 32) * -4);  // scale 9, all bits clear -> code -4
  EXPECT_EQ(out[1], 0.5f * 3 * -4);
}

// ---- dispatch ----

TEST(CpuFeatures, DispatchLevels) {
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  EXPECT_EQ(isa_supported(Isa::kAvx2), cpu_features().avx2);
  EXPECT_EQ(isa_supported(Isa::kAvx512), cpu_features().avx512 && cpu_features().avx512_vnni);
  EXPECT_EQ(isa_supported(Isa::kAvx512Bf16),
            cpu_features().avx512 && cpu_features().avx512_vnni && cpu_features().avx512_bf16);
  Isa parsed;
  EXPECT_TRUE(parse_isa("avx512bf16", &parsed));
  EXPECT_EQ(parsed, Isa::kAvx512Bf16);
  EXPECT_TRUE(parse_isa("avx2", &parsed));
  EXPECT_EQ(parsed, Isa::kAvx2);
  EXPECT_FALSE(parse_isa("sse9", &parsed));
  {
    ScopedIsa s(Isa::kScalar);
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(active_isa(), Isa::kScalar);
  }
  if (!isa_supported(Isa::kAvx512)) {
    const Isa before = active_isa();
    EXPECT_FALSE(set_isa(Isa::kAvx512));
    EXPECT_EQ(active_isa(), before);
  }
}

// ---- BF16 weights against bf16-rounded activations (Isa::kAvx512Bf16) ----

// The SIMD rounding is f32_to_bf16's, bit for bit, on ordinary values and on the edges: ties,
// denormals, the largest finite values (which round to inf), infinities and NaNs.
TEST(MatmulBf16Dot, ActivationRoundingMatchesScalarBitwise) {
#if defined(__x86_64__)
  if (!isa_supported(Isa::kAvx512Bf16)) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  std::mt19937 rng(3);
  std::vector<uint32_t> bits;
  for (int i = 0; i < 4000; ++i) bits.push_back(rng());
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x3f808000u, 0x3f818000u, 0x3f80ffffu,
                     0x7f7fffffu, 0x7f7f7fffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffffffffu})
    bits.push_back(u);
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  for (size_t count : {bits.size(), size_t{15}, size_t{17}}) {
    std::vector<uint16_t> got(count);
    avx512::round_bf16(x.data() + bits.size() - count, static_cast<int64_t>(count), got.data());
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(got[i], f32_to_bf16(x[bits.size() - count + i])) << std::hex << bits[bits.size() - count + i];
  }
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

// The activations really are rounded (the result differs from exact f32 activations), and by no
// more than Σ|w|·|x - bf16(x)| plus f32 rounding; without AVX512_BF16 BF16 stays exact.
TEST(MatmulBf16Dot, WithinActivationRoundingOfExactReference) {
  ThreadPool pool(2);
  const int64_t rows = 37, cols = 1000, n = 5;  // 1000: a tail past the last 32 columns
  const auto bytes = random_weight_bytes(DType::kBF16, rows, cols, 41);
  const Weight w{bytes.data(), DType::kBF16, rows, cols};
  const auto x = random_acts(n, cols, 42);
  for (Isa isa : {Isa::kAvx512, Isa::kAvx512Bf16}) {
    ScopedIsa s(isa);
    if (!s.ok()) continue;
    std::vector<float> y(n * rows), exact(n * rows), row(cols);
    matmul(pool, x.data(), n, w, y.data());
    matmul_ref(x.data(), n, w, exact.data());
    const auto mag = magnitudes(x, n, w);
    double differ = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t t = 0; t < n; ++t) {
        double bound = 0;
        for (int64_t i = 0; i < cols; ++i) {
          const float xi = x[t * cols + i];
          bound += std::fabs(row[i]) * std::fabs(xi - bf16_to_f32(f32_to_bf16(xi)));
        }
        const int64_t k = t * rows + r;
        const double err = std::fabs(y[k] - exact[k]);
        differ += err;
        if (isa == Isa::kAvx512Bf16) {
          ASSERT_LE(err, bound + 2e-6 * mag[k]) << "token " << t << " row " << r;
        } else {
          ASSERT_LE(err, 2e-6 * mag[k]) << "token " << t << " row " << r;
        }
      }
    }
    if (isa == Isa::kAvx512Bf16) {
      EXPECT_GT(differ, 0.0) << "activations were not rounded";
    }
  }
}

// Each regime (in place for n < kPanelMinTokens, panels from there on) is batch and thread
// invariant by itself: a token in a batch of 8 or of 70 gives the same bits, 1 or 2 threads,
// over 1289 columns (a tail of 9 and an odd last pair); between the regimes the last bits may
// differ (the documented exception), by no more than f32 rounding.
TEST(MatmulBf16Dot, BatchAndThreadInvariantWithinEachKernel) {
  ScopedIsa s(Isa::kAvx512Bf16);
  if (!s.ok()) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  ThreadPool one(1), two(2);
  const int64_t rows = 41, cols = 1289, n = 70;
  const auto bytes = random_weight_bytes(DType::kBF16, rows, cols, 43);
  const Weight w{bytes.data(), DType::kBF16, rows, cols};
  const auto x = random_acts(n, cols, 44);
  std::vector<float> y1(n * rows), y2(n * rows), few(kPanelMinTokens * rows);
  matmul(one, x.data(), n, w, y1.data());
  matmul(two, x.data(), n, w, y2.data());
  ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << "threads 1 vs 2";
  const auto mag = magnitudes(x, n, w);
  for (int64_t t0 = 0; t0 + kPanelMinTokens <= n; t0 += kPanelMinTokens) {
    matmul(two, &x[t0 * cols], kPanelMinTokens, w, few.data());
    ASSERT_EQ(0, std::memcmp(few.data(), &y2[t0 * rows], few.size() * 4)) << "tokens " << t0 << "+: 8 vs 70";
  }
  std::vector<float> single(rows), pair(2 * rows);
  for (int64_t t = 0; t + 1 < n; t += 7) {
    matmul(one, &x[t * cols], 1, w, single.data());
    matmul(two, &x[t * cols], 2, w, pair.data());
    ASSERT_EQ(0, std::memcmp(single.data(), pair.data(), rows * 4)) << "token " << t << ": 1 vs 2 tokens";
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_NEAR(single[r], y2[t * rows + r], 2e-6 * mag[t * rows + r]) << "token " << t << " row " << r;
  }
}

// ---- load-time conversion ----

TEST(ConvertToQ8, MatchesLlamaQuantizeAndStaysAccurate) {
  const int64_t rows = 40, cols = 1024, n = 2;
  const auto bytes = random_weight_bytes(DType::kBF16, rows, cols, 21);
  const Weight w{bytes.data(), DType::kBF16, rows, cols};
  auto q = convert_to_q8(w);
  ASSERT_TRUE(q.is_ok()) << q.message();
  ASSERT_EQ(q->weight.dtype, DType::kQ8_0);
  ASSERT_EQ(q->weight.data, q->bytes.data());
  // Same bytes as quantizing the f32 values directly.
  std::vector<float> row(cols);
  std::vector<uint8_t> blocks(row_bytes(DType::kQ8_0, cols));
  dequantize_row(w, 5, row.data());
  gb::quantize_row_q8_0(row.data(), cols, blocks.data());
  EXPECT_EQ(0, std::memcmp(blocks.data(), q->bytes.data() + 5 * blocks.size(), blocks.size()));
  // Each weight within half a step of its bf16 value, plus the fp16 rounding of the scale
  // (|q| ≤ 127 times a relative 2^-11): |error| ≤ d·(0.5 + 127/2048) < 0.57·d.
  std::vector<float> back(cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(w, r, row.data());
    dequantize_row(q->weight, r, back.data());
    for (int64_t i = 0; i < cols; ++i) {
      float amax = 0;
      for (int64_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(row[j]));
      ASSERT_LE(std::fabs(back[i] - row[i]), amax / 127.f * 0.57f + 1e-7f);
    }
  }
  ThreadPool pool(2);
  const auto x = random_acts(n, cols, 22);
  std::vector<float> y(n * rows), ref(n * rows);
  matmul(pool, x.data(), n, q->weight, y.data());
  matmul_ref(x.data(), n, w, ref.data());
  const auto mag = magnitudes(x, n, w);
  for (int64_t i = 0; i < n * rows; ++i) ASSERT_NEAR(y[i], ref[i], 2e-2 * mag[i]);
}

TEST(ConvertToQ8, RejectsWhatItCannotConvert) {
  uint8_t dummy[64] = {};
  auto a = convert_to_q8(Weight{dummy, DType::kQ4_0, 1, 32});
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.message().find("q4_0"), std::string::npos);
  auto b = convert_to_q8(Weight{dummy, DType::kF32, 1, 8});
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.message().find("multiple of 32"), std::string::npos);
}

// ---- Q4_K / Q6_K: integer kernels against Q8_K activations ----

// ggml's quantize_row_q8_K_ref written out independently (the definition the kernels follow).
void q8k_definition(const float* x, int64_t cols, float* d, int8_t* q, int16_t* b16) {
  for (int64_t b = 0; b < cols / 256; ++b) {
    const float* xb = x + b * 256;
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    if (amax == 0) {
      d[b] = 0;
      for (int j = 0; j < 256; ++j) q[b * 256 + j] = 0;
    } else {
      const float iscale = -127.f / max;
      for (int j = 0; j < 256; ++j) {
        // nearest_int: adding 1.5·2^23 rounds to the nearest integer, ties to even.
        const float v = iscale * xb[j] + 12582912.f;
        int32_t i;
        std::memcpy(&i, &v, 4);
        q[b * 256 + j] = static_cast<int8_t>(std::min(127, (i & 0x007fffff) - 0x00400000));
      }
      d[b] = 1 / iscale;
    }
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += q[b * 256 + 16 * j + i];
      b16[b * 16 + j] = static_cast<int16_t>(s);
    }
  }
}

TEST(QuantizeActivationsQ8K, MatchesGgmlDefinitionAndSimdBitwise) {
  const int64_t cols = 256 * 12;
  auto x = random_acts(1, cols, 41);
  // Block 0: ties at scale 1 (max = -127 -> iscale = 1): 2.5 -> 2, -3.5 -> -4, 0.5 -> 0.
  x[0] = -127.0f, x[1] = 2.5f, x[2] = -3.5f, x[3] = 0.5f;
  // Block 1: +5 comes before -5: max = +5, so d < 0 and +5 -> -127.
  for (int i = 256; i < 512; ++i) x[i] = 0.01f * (i % 7);
  x[300] = 5.0f, x[400] = -5.0f;
  for (int i = 512; i < 768; ++i) x[i] = 0.0f;         // all zero
  for (int i = 768; i < 1024; ++i) x[i] = 1e-30f * i;  // tiny but representable scale
  for (int i = 1024; i < 1280; ++i) x[i] = 1e-38f;     // subnormal: -127/max overflows -> zeros
  std::vector<float> d(cols / 256), dd(cols / 256), ds(cols / 256);
  std::vector<int8_t> q(cols), qd(cols), qs(cols);
  std::vector<int16_t> b(cols / 16), bd(cols / 16), bs(cols / 16);
  std::vector<int32_t> c(cols / 32), cs(cols / 32);
  quantize_activations_q8k(x.data(), cols, d.data(), q.data(), b.data(), c.data());
  q8k_definition(x.data(), cols, dd.data(), qd.data(), bd.data());
  for (int64_t blk = 0; blk < cols / 256; ++blk) {
    if (blk == 4) continue;  // ggml's codes are undefined there; ours are zeros
    EXPECT_EQ(0, std::memcmp(&d[blk], &dd[blk], 4)) << "block " << blk;
    EXPECT_EQ(0, std::memcmp(&q[blk * 256], &qd[blk * 256], 256)) << "block " << blk;
    EXPECT_EQ(0, std::memcmp(&b[blk * 16], &bd[blk * 16], 32)) << "block " << blk;
  }
  for (int64_t j = 0; j < cols / 32; ++j) EXPECT_EQ(c[j], b[2 * j] + b[2 * j + 1]);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[1], 2);
  EXPECT_EQ(q[2], -4);
  EXPECT_EQ(q[3], 0);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(q[300], -127);
  EXPECT_EQ(q[400], 127);
  EXPECT_LT(d[1], 0.0f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_GT(std::fabs(d[3]), 0.0f);
  EXPECT_EQ(d[4], 0.0f);
  for (int i = 1024; i < 1280; ++i) ASSERT_EQ(q[i], 0);
  // Non-finite inputs give an all-zero block rather than undefined codes.
  auto bad = x;
  bad[1300] = NAN;
  bad[1600] = INFINITY;
  quantize_activations_q8k(bad.data(), cols, d.data(), q.data(), b.data(), c.data());
  EXPECT_EQ(d[5], 0.0f);
  EXPECT_EQ(d[6], 0.0f);
  EXPECT_EQ(q[1301], 0);
  EXPECT_EQ(q[1601], 0);
#if defined(__x86_64__)
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "CPU lacks avx2";
  for (const auto* in : {&x, &bad}) {
    quantize_activations_q8k(in->data(), cols, d.data(), q.data(), b.data(), c.data());
    avx2::quantize_k(in->data(), cols, ds.data(), qs.data(), bs.data(), cs.data());
    EXPECT_EQ(0, std::memcmp(d.data(), ds.data(), d.size() * 4));
    EXPECT_EQ(0, std::memcmp(q.data(), qs.data(), q.size()));
    EXPECT_EQ(0, std::memcmp(b.data(), bs.data(), b.size() * 2));
    EXPECT_EQ(0, std::memcmp(c.data(), cs.data(), c.size() * 4));
  }
#endif
}

// Every ISA computes the scalar kernel's bits (same integers, same f32 operations), in the
// in-place kernel (n < kPanelMinTokens) and the panel kernel alike; rows past a multiple of 8
// exercise the partial panel and the single-row tail.
TEST(MatmulKQuants, EveryIsaMatchesScalarBitwise) {
  ThreadPool pool(2);
  uint32_t seed = 500;
  int compared = 0;
  for (DType dt : {DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int64_t rows : {1, 3, 5, 9, 13, 67, 131}) {
      for (int64_t cols : {256, 768, 2048}) {
        const auto bytes = random_weight_bytes(dt, rows, cols, seed++);
        const Weight w{bytes.data(), dt, rows, cols};
        for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, kPanelMinTokens - 1, kPanelMinTokens,
                          int64_t{17}, int64_t{40}}) {
          if (rows * cols * n > (int64_t{1} << 23)) continue;  // keep the scalar kernel fast
          const auto x = random_acts(n, cols, seed++);
          std::vector<float> ref(n * rows);
          {
            ScopedIsa s(Isa::kScalar);
            matmul(pool, x.data(), n, w, ref.data());
          }
          for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
            ScopedIsa s(isa);
            if (!s.ok()) continue;
            std::vector<float> y(n * rows, NAN);
            matmul(pool, x.data(), n, w, y.data());
            ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
                << isa_name(isa) << " " << dtype_name(dt) << " rows=" << rows << " cols=" << cols << " n=" << n;
            ++compared;
          }
        }
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "CPU has no SIMD level; only the scalar kernel runs";
}

// The largest integer partial sums the kernels can meet: every weight code at its maximum (Q4_K
// 15, Q5_K 31, Q6_K 63, Q3_K 7) against activations that all round to the same extreme code
// (±127), row-major and packed at load, in place and in panels. The kernels' int16 sums (maddubs,
// then int16 adds on AVX2) sit just under 32767 here for Q4_K ... Q6_K; one group more per int16
// run overflows and fails this test.
TEST(MatmulKQuants, ExtremeCodesMatchScalarBitwise) {
  ThreadPool pool(2);
  const int64_t rows = 24, cols = 512;
  for (DType dt : {DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    auto bytes = random_weight_bytes(dt, rows, cols, 901);
    const int64_t stride = row_bytes(dt, cols), bb = dtype_info(dt).block_bytes;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < cols / 256; ++b) {
        uint8_t* blk = bytes.data() + r * stride + b * bb;
        if (dt == DType::kQ4_K) {
          std::memset(blk + 16, 0xff, 128);
        } else if (dt == DType::kQ5_K) {
          std::memset(blk + 16, 0xff, 160);  // qh and the nibbles: code 31
        } else if (dt == DType::kQ3_K) {
          std::memset(blk, 0xff, 96);  // hmask and qs: code 7 (3; 35 in panels)
        } else {
          std::memset(blk, 0xff, 192);  // ql and qh: code 63
        }
      }
    Weight w{bytes.data(), dt, rows, cols};
    std::vector<uint8_t> packed(bytes.size());
    pack_weight(w, packed.data());
    for (float v : {1.0f, -1.0f}) {
      for (int64_t n : {int64_t{1}, int64_t{4}, kPanelMinTokens, int64_t{13}, kPackedKPanelMinTokens}) {
        const std::vector<float> x(n * cols, v);
        std::vector<float> ref(n * rows);
        {
          ScopedIsa s(Isa::kScalar);
          w.packed = nullptr;
          matmul(pool, x.data(), n, w, ref.data());
        }
        for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
          ScopedIsa s(isa);
          if (!s.ok()) continue;
          const uint8_t* layouts[] = {nullptr, packed.data()};
          for (const uint8_t* layout : layouts) {
            w.packed = layout;
            std::vector<float> y(n * rows, NAN);
            matmul(pool, x.data(), n, w, y.data());
            ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
                << isa_name(isa) << " " << dtype_name(dt) << " x=" << v << " n=" << n << (layout ? " packed" : "");
          }
        }
      }
    }
  }
}

// A token alone (n = 1) or at any place in a batch of 37; 1 or 2 threads: the same bits.
TEST(MatmulKQuants, BatchAndThreadInvariantBitwise) {
  ThreadPool one(1), two(2);
  const int64_t rows = 83, cols = 1024, n = 37;
  for (Isa isa : kAllIsas) {
    ScopedIsa s(isa);
    if (!s.ok()) continue;
    for (DType dt : {DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      const auto bytes = random_weight_bytes(dt, rows, cols, 77);
      const Weight w{bytes.data(), dt, rows, cols};
      const auto x = random_acts(n, cols, 78);
      std::vector<float> y1(n * rows), y2(n * rows), single(rows);
      matmul(one, x.data(), n, w, y1.data());
      matmul(two, x.data(), n, w, y2.data());
      ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << isa_name(isa) << " " << dtype_name(dt);
      for (int64_t t = 0; t < n; ++t) {
        matmul(one, &x[t * cols], 1, w, single.data());
        ASSERT_EQ(0, std::memcmp(single.data(), &y2[t * rows], rows * 4))
            << isa_name(isa) << " " << dtype_name(dt) << " token " << t << " alone vs in a batch of " << n;
      }
    }
  }
}

// Against the exact-activation reference: the difference is the activation rounding, bounded by
// Σ|w_i|·|x_i - x̃_i| (x̃ = the Q8_K values) plus f32 rounding; the typical error is far below
// the bound, and it is not zero (the activations really are rounded).
TEST(MatmulKQuants, WithinActivationRoundingOfExactReference) {
  ThreadPool pool(2);
  const int64_t rows = 40, cols = 2048, n = 5;
  for (DType dt : {DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const auto bytes = random_weight_bytes(dt, rows, cols, 90);
    const Weight w{bytes.data(), dt, rows, cols};
    const auto x = random_acts(n, cols, 91);
    const auto xr = q8k_values(x, n, cols);
    std::vector<float> y(n * rows), exact(n * rows), row(cols);
    matmul(pool, x.data(), n, w, y.data());
    matmul_ref(x.data(), n, w, exact.data());
    const auto mag = magnitudes(x, n, w);
    double worst_share = 0, rel_sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t t = 0; t < n; ++t) {
        double bound = 0;
        for (int64_t i = 0; i < cols; ++i) bound += std::fabs(row[i]) * std::fabs(x[t * cols + i] - xr[t * cols + i]);
        const int64_t k = t * rows + r;
        const double err = std::fabs(y[k] - exact[k]);
        ASSERT_LE(err, bound + 1e-6 * mag[k]) << dtype_name(dt) << " token " << t << " row " << r;
        worst_share = std::max(worst_share, err / bound);
        rel_sum += err / mag[k];
      }
    }
    EXPECT_LT(worst_share, 0.25) << dtype_name(dt) << ": errors should be far below the worst case";
    EXPECT_GT(rel_sum, 0.0) << dtype_name(dt) << ": activations were not rounded";
    EXPECT_LT(rel_sum / (n * rows), 3e-3) << dtype_name(dt);
  }
}

// ---- K-quant encoders (formats/quantize.h) through dequantize_row ----

// Q4_K (codes 0..15) and Q5_K (0..31): the same encoder but for the code range.
void expect_min_k_round_trip(DType dt, int max_code) {
  const int64_t cols = 256 * 8;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> x(cols), back(cols);
  for (auto& v : x) v = normal(rng);
  for (int i = 256; i < 512; ++i) x[i] = std::fabs(x[i]) + 0.01f;  // all positive: min clipped to 0
  for (int i = 512; i < 768; ++i) x[i] = -std::fabs(x[i]);         // all negative
  for (int i = 768; i < 1024; ++i) x[i] = 0.0f;                    // all zero
  x[1500] = 1.0f;                                                  // an outlier sub-block
  std::vector<uint8_t> blocks(row_bytes(dt, cols));
  ASSERT_TRUE(gb::convert_row(x.data(), cols, dt, blocks.data()).is_ok());
  dequantize_row(Weight{blocks.data(), dt, 1, cols}, 0, back.data());
  double se = 0, steps = 0;
  for (int64_t b = 0; b < cols / 256; ++b) {
    float scale[8], minv[8], max_scale = 0, max_min = 0;
    for (int s = 0; s < 8; ++s) {
      float lo = 0, hi = x[b * 256 + 32 * s];
      for (int i = 0; i < 32; ++i)
        lo = std::min(lo, x[b * 256 + 32 * s + i]), hi = std::max(hi, x[b * 256 + 32 * s + i]);
      scale[s] = (hi - lo) / max_code, minv[s] = -lo;
      max_scale = std::max(max_scale, scale[s]), max_min = std::max(max_min, minv[s]);
    }
    for (int i = 0; i < 256; ++i) {
      const int64_t k = b * 256 + i;
      // Half a step, plus the rounding of the 6-bit scale (≤ d/2 per step, max_code steps) and min.
      const double bound = 0.5 * scale[i / 32] + (max_code + 1) / 2.0 * max_scale / 63 + 0.52 * max_min / 63 + 1e-7;
      ASSERT_LE(std::fabs(back[k] - x[k]), bound) << dtype_name(dt) << " element " << k;
      se += (back[k] - x[k]) * (back[k] - x[k]);
      steps += scale[i / 32] * scale[i / 32];
    }
  }
  EXPECT_EQ(back[800], 0.0f);
  // Rounding to nearest on a uniform grid: RMS error ≈ step/√12 ≈ 0.29 step.
  EXPECT_LT(std::sqrt(se / steps), 0.4) << dtype_name(dt);
}

TEST(QuantizeKQuants, Q4_KRoundTripWithinItsBound) { expect_min_k_round_trip(DType::kQ4_K, 15); }

TEST(QuantizeKQuants, Q5_KRoundTripWithinItsBound) { expect_min_k_round_trip(DType::kQ5_K, 31); }

// The signed K-quant encoders (Q6_K, Q3_K): each sub-block of 16's largest-magnitude value lands
// on code −half (its step = amax/half), every value within a step plus `slack` steps of the
// scales' own rounding (max step / scale_levels), zeros stay zero. Returns the RMS error relative
// to the steps and to the values.
std::pair<double, double> expect_signed_k_round_trip(DType dt, int half, int scale_levels, double slack) {
  const int64_t cols = 256 * 8;
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> x(cols), back(cols);
  for (auto& v : x) v = normal(rng);
  for (int i = 256; i < 512; ++i) x[i] = std::fabs(x[i]);  // positive maxima: negative scales
  for (int i = 768; i < 1024; ++i) x[i] = 0.0f;
  x[1500] = -1.0f;
  std::vector<uint8_t> blocks(row_bytes(dt, cols));
  EXPECT_TRUE(gb::convert_row(x.data(), cols, dt, blocks.data()).is_ok());
  dequantize_row(Weight{blocks.data(), dt, 1, cols}, 0, back.data());
  double se = 0, steps = 0, ss = 0;
  for (int64_t b = 0; b < cols / 256; ++b) {
    float step[16], max_step = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[b * 256 + 16 * j + i]));
      step[j] = amax / static_cast<float>(half), max_step = std::max(max_step, step[j]);
    }
    const double d = max_step / scale_levels;  // the step of the integer scales
    for (int i = 0; i < 256; ++i) {
      const int64_t k = b * 256 + i;
      const double bound = step[i / 16] + slack * d + 1e-7;
      EXPECT_LE(std::fabs(back[k] - x[k]), bound) << dtype_name(dt) << " element " << k;
      se += (back[k] - x[k]) * (back[k] - x[k]);
      steps += step[i / 16] * step[i / 16];
      ss += x[k] * x[k];
    }
  }
  EXPECT_EQ(back[800], 0.0f);
  EXPECT_NEAR(back[1500], -1.0f, 1e-3);  // the block's largest value maps to code −half, up to fp16 d
  return {std::sqrt(se / steps), std::sqrt(se / ss)};
}

TEST(QuantizeKQuants, Q6_KRoundTripWithinItsBound) {
  EXPECT_LT(expect_signed_k_round_trip(DType::kQ6_K, 32, 128, 18).first, 0.4);
}

// 3-bit codes (−4..3) under 6-bit scales: a relative RMS error near what 3 bits give.
TEST(QuantizeKQuants, Q3_KRoundTripWithinItsBound) {
  const double rel = expect_signed_k_round_trip(DType::kQ3_K, 4, 32, 4.5).second;
  std::printf("q3_k round trip: relative RMS error %.3f\n", rel);
  EXPECT_LT(rel, 0.25);
}

TEST(QuantizeKQuants, ConvertRowChecksTheLength) {
  std::vector<float> x(300, 0.5f);
  std::vector<uint8_t> out(row_bytes(DType::kQ4_K, 512));
  EXPECT_FALSE(gb::convert_row(x.data(), 300, DType::kQ4_K, out.data()).is_ok());
  EXPECT_FALSE(gb::convert_row(x.data(), 300, DType::kQ5_K, out.data()).is_ok());
  EXPECT_TRUE(gb::convert_row(x.data(), 256, DType::kQ5_K, out.data()).is_ok());
  EXPECT_TRUE(gb::convert_row(x.data(), 256, DType::kQ6_K, out.data()).is_ok());
}

}  // namespace
}  // namespace gb::ops

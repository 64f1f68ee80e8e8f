// Paged causal attention: KV stores, the portable tile kernel (the original per-row loop), the
// dispatch to the SIMD tile kernels, and the double-precision reference.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "ops/attention_kernels.h"
#include "ops/cpu_features.h"
#include "ops/dot.h"

namespace gb::ops {

// 32 KiB: decode from DRAM, Zen 5 (bench_ops_attention --prefetch-kib): at 4096 tokens of
// context, 2 threads, bf16 KV 1.03 → 0.73 ms per layer, f32 1.66 → 1.17 (off → 128 KiB, thirteenth
// pass); with the cache in huge pages 32 KiB is as fast at 4096 and 3–11% faster than 128 at 512
// tokens, AVX2 and AVX-512 alike (fifteenth pass); 512 KiB worse; prefill unchanged.
int64_t g_attn_prefetch_bytes = int64_t{32} << 10;

namespace {

float load_elem(const uint8_t* p, DType d) {
  if (d == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
}

void store_elem(uint8_t* p, DType d, float x) {
  if (d == DType::kF32) {
    std::memcpy(p, &x, 4);
    return;
  }
  const uint16_t h = d == DType::kF16 ? f32_to_f16(x) : f32_to_bf16(x);
  std::memcpy(p, &h, 2);
}

// Tiles of at most this many rows reach the kernels (their row pointers live on the stack).
constexpr int64_t kMaxTileRows = 256;

// One row of a tile, the original loop: an 8-lane dot per key, std::exp, the rescale and the
// value sum in plain f32 mul/add. For f32 KV bitwise what attend_head computed before the
// tiled kernels. scratch: scores [block_size], key [head_dim], value [head_dim].
void portable_row(const float* q, const PagedKv& kv, int64_t kv_head, const int32_t* block_table, int64_t n_ctx,
                  float scale, float* out, float* scratch, int64_t n_sink, float* sink_mass) {
  const int64_t hd = kv.head_dim, bs = kv.block_size, eb = kv.elem_bytes();
  const DType d = kv.dtype;
  float* scores = scratch;
  float* key = scores + bs;
  float* val = key + hd;
  auto score = [&](const uint8_t* kb, int64_t j) {
    for (int64_t i = 0; i < hd; ++i) key[i] = load_elem(kb + (i * bs + j) * eb, d);
    return dot(q, key, hd) * scale;
  };
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + hd, 0.0f);
  for (int64_t start = 0; start < n_ctx; start += bs) {
    const int64_t n = std::min(bs, n_ctx - start);
    const uint8_t* kb = kv.k_at(block_table[start / bs], kv_head);
    const uint8_t* vb = kv.v_at(block_table[start / bs], kv_head);
    float block_max = running_max;
    for (int64_t j = 0; j < n; ++j) {
      scores[j] = score(kb, j);
      block_max = std::max(block_max, scores[j]);
    }
    // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first block).
    const float correction = std::exp(running_max - block_max);
    running_sum *= correction;
    for (int64_t i = 0; i < hd; ++i) out[i] *= correction;
    for (int64_t j = 0; j < n; ++j) {
      const float p = std::exp(scores[j] - block_max);
      running_sum += p;
      const float* vj = reinterpret_cast<const float*>(vb) + j * hd;
      if (d != DType::kF32) {
        for (int64_t i = 0; i < hd; ++i) val[i] = load_elem(vb + (j * hd + i) * eb, d);
        vj = val;
      }
      for (int64_t i = 0; i < hd; ++i) out[i] += p * vj[i];
    }
    running_max = block_max;
  }
  const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
  for (int64_t i = 0; i < hd; ++i) out[i] *= inv;
  if (n_sink > 0) {
    // The first positions' weights under the final maximum and sum: the same scores (same dot,
    // same inputs) the loop normalised.
    const int64_t m = std::min(n_sink, n_ctx);
    float mass = 0.0f;
    for (int64_t j = 0; j < m; ++j) {
      mass += std::exp(score(kv.k_at(block_table[j / bs], kv_head), j % bs) - running_max);
    }
    *sink_mass = std::min(mass * inv, 1.0f);  // a share of the sum: at most 1 (not above it by rounding)
  }
}

void portable_tile(const AttendTile& t, const PagedKv& kv, float* scratch) {
  for (int64_t i = 0; i < t.n_pos; ++i) {
    const int64_t n_sink = t.n_sink != nullptr && i < t.n_sink_pos ? t.n_sink[i] : 0;
    for (int64_t j = 0; j < t.n_q; ++j) {
      portable_row(t.q + i * t.q_stride + j * kv.head_dim, kv, t.kv_head, t.block_table, t.pos0 + i + 1, t.scale,
                   t.out + i * t.out_stride + j * kv.head_dim, scratch, n_sink,
                   n_sink > 0 ? t.sink_mass + i * t.sink_stride + j : nullptr);
    }
  }
}

using TileKernel = void (*)(const AttendTile&, const PagedKv&, float*);

TileKernel tile_kernel() {
#if defined(__x86_64__)
  switch (active_isa()) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return avx512::attend_tile;
    case Isa::kAvx2: return avx2::attend_tile;
    case Isa::kScalar: break;
  }
#endif
  return portable_tile;
}

}  // namespace

float PagedKv::key(int64_t slot, int64_t h, int64_t i) const {
  return load_elem(k_at(slot / block_size, h) + (i * block_size + slot % block_size) * elem_bytes(), dtype);
}

float PagedKv::value(int64_t slot, int64_t h, int64_t i) const {
  return load_elem(v_at(slot / block_size, h) + ((slot % block_size) * head_dim + i) * elem_bytes(), dtype);
}

bool kv_dtype_supported(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row, int64_t h0, int64_t h1) {
  // BF16 / F16 through the SIMD rounding where there is one (the scalar f16 rounding took 5.3 ns
  // an element, ~15% of a 512-token prefill: docs/PERFORMANCE.md, twelfth pass).
  if (h1 < 0) h1 = kv.n_kv_heads;
#if defined(__x86_64__)
  if (kv.dtype != DType::kF32) {
    switch (active_isa()) {
      case Isa::kAvx512Bf16:
      case Isa::kAvx512: return avx512::kv_store(kv, slot, k_row, v_row, h0, h1);
      case Isa::kAvx2: return avx2::kv_store(kv, slot, k_row, v_row, h0, h1);
      case Isa::kScalar: break;
    }
  }
#endif
  const int64_t block = slot / kv.block_size, off = slot % kv.block_size;
  const int64_t hd = kv.head_dim, bs = kv.block_size, eb = kv.elem_bytes();
  for (int64_t h = h0; h < h1; ++h) {
    uint8_t* kb = kv.k_at(block, h);
    uint8_t* vb = kv.v_at(block, h) + off * hd * eb;
    const float* kr = k_row + h * hd;
    const float* vr = v_row + h * hd;
    if (kv.dtype == DType::kF32) {
      for (int64_t i = 0; i < hd; ++i) std::memcpy(kb + (i * bs + off) * 4, kr + i, 4);
      std::memcpy(vb, vr, hd * sizeof(float));
      continue;
    }
    for (int64_t i = 0; i < hd; ++i) {
      store_elem(kb + (i * bs + off) * eb, kv.dtype, kr[i]);
      store_elem(vb + i * eb, kv.dtype, vr[i]);
    }
  }
}

int64_t attend_tile_positions(int64_t n_q) { return std::max<int64_t>(1, 32 / std::max<int64_t>(1, n_q)); }

int64_t attend_scratch_floats(const PagedKv& kv, int64_t max_rows) {
  const int64_t r = std::min(std::max<int64_t>(1, max_rows), kMaxTileRows), bsp = attn_padded_block(kv.block_size);
  return 2 * r + r * bsp + kv.head_dim * bsp + kv.block_size * kv.head_dim + 2 * r * kv.head_dim;
}

void attend_tile(const AttendTile& t, const PagedKv& kv, float* scratch) {
  const TileKernel kernel = tile_kernel();
  if (t.n_pos * t.n_q <= kMaxTileRows) {
    kernel(t, kv, scratch);
    return;
  }
  // Larger tiles in parts (a row's result does not depend on its tile).
  const int64_t heads = std::min(t.n_q, kMaxTileRows), pos = std::max<int64_t>(1, kMaxTileRows / heads);
  for (int64_t i = 0; i < t.n_pos; i += pos) {
    for (int64_t j = 0; j < t.n_q; j += heads) {
      AttendTile s = t;
      s.n_pos = std::min(pos, t.n_pos - i);
      s.n_q = std::min(heads, t.n_q - j);
      s.pos0 = t.pos0 + i;
      s.q = t.q + i * t.q_stride + j * kv.head_dim;
      s.out = t.out + i * t.out_stride + j * kv.head_dim;
      if (t.n_sink != nullptr) {
        s.n_sink = t.n_sink + std::min(i, t.n_sink_pos);
        s.n_sink_pos = std::max<int64_t>(0, t.n_sink_pos - i);
        s.sink_mass = t.sink_mass + i * t.sink_stride + j;
      }
      kernel(s, kv, scratch);
    }
  }
}

void attend_head(const float* q, const PagedKv& kv, int64_t kv_head, const int32_t* block_table, int64_t n_ctx,
                 float scale, float* out, float* scratch, int64_t n_sink, float* sink_mass) {
  const uint8_t ns = static_cast<uint8_t>(std::clamp<int64_t>(n_sink, 0, 255));
  AttendTile t;
  t.q = q;
  t.out = out;
  t.n_pos = 1;
  t.n_q = 1;
  t.pos0 = n_ctx - 1;
  t.kv_head = kv_head;
  t.block_table = block_table;
  t.scale = scale;
  if (ns > 0) {
    t.n_sink = &ns;
    t.n_sink_pos = 1;
    t.sink_mass = sink_mass;
  }
  attend_tile(t, kv, scratch);
}

void attend_head_ref(const float* q, const float* k, const float* v, int64_t n_ctx, int64_t head_dim, float scale,
                     float* out, int64_t n_sink, double* sink_mass) {
  std::vector<double> s(n_ctx);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n_ctx; ++j) {
    double dot = 0;
    for (int64_t i = 0; i < head_dim; ++i) dot += static_cast<double>(q[i]) * k[j * head_dim + i];
    s[j] = dot * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (int64_t i = 0; i < head_dim; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < n_ctx; ++j) acc += s[j] * v[j * head_dim + i];
    out[i] = static_cast<float>(acc / sum);
  }
  if (sink_mass != nullptr) {
    double mass = 0;
    for (int64_t j = 0; j < std::min(n_sink, n_ctx); ++j) mass += s[j];
    *sink_mass = mass / sum;
  }
}

}  // namespace gb::ops

// Paged causal attention (portable). Decode is bound by the weight matmuls; this loop is O(context)
// per head and simple on purpose until a long-context profile says otherwise.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/dot.h"

namespace gb::ops {

void kv_store(const PagedKv& kv, int64_t slot, const float* k_row, const float* v_row) {
  const int64_t block = slot / kv.block_size;
  const int64_t off = slot % kv.block_size;
  for (int64_t h = 0; h < kv.n_kv_heads; ++h) {
    std::memcpy(kv.k_at(block, h) + off * kv.head_dim, k_row + h * kv.head_dim, kv.head_dim * sizeof(float));
    std::memcpy(kv.v_at(block, h) + off * kv.head_dim, v_row + h * kv.head_dim, kv.head_dim * sizeof(float));
  }
}

void attend_head(const float* q, const PagedKv& kv, int64_t kv_head, const int32_t* block_table, int64_t n_ctx,
                 float scale, float* out, float* scores, int64_t n_sink, float* sink_mass) {
  const int64_t hd = kv.head_dim;
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  std::fill(out, out + hd, 0.0f);
  for (int64_t start = 0; start < n_ctx; start += kv.block_size) {
    const int64_t n = std::min(kv.block_size, n_ctx - start);
    const float* kb = kv.k_at(block_table[start / kv.block_size], kv_head);
    const float* vb = kv.v_at(block_table[start / kv.block_size], kv_head);
    float block_max = running_max;
    for (int64_t j = 0; j < n; ++j) {
      scores[j] = dot(q, kb + j * hd, hd) * scale;
      block_max = std::max(block_max, scores[j]);
    }
    // Rescale what was accumulated under the old maximum (exp(-inf) = 0 on the first block).
    const float correction = std::exp(running_max - block_max);
    running_sum *= correction;
    for (int64_t i = 0; i < hd; ++i) out[i] *= correction;
    for (int64_t j = 0; j < n; ++j) {
      const float p = std::exp(scores[j] - block_max);
      running_sum += p;
      for (int64_t i = 0; i < hd; ++i) out[i] += p * vb[j * hd + i];
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
      const float* kj = kv.k_at(block_table[j / kv.block_size], kv_head) + (j % kv.block_size) * hd;
      mass += std::exp(dot(q, kj, hd) * scale - running_max);
    }
    *sink_mass = std::min(mass * inv, 1.0f);  // a share of the sum: at most 1 (not above it by rounding)
  }
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

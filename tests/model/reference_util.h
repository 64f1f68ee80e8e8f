// Test helpers: the reference fixtures of shared/testdata/reference (arrays + reference.json) and
// max-abs comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "support/test_support.h"

namespace gb::test {

struct RefArray {
  std::vector<int64_t> shape;
  std::vector<float> f;    // F32 data
  std::vector<int32_t> i;  // I32 data
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

struct Reference {
  std::string dir;
  nlohmann::json json;
  std::map<std::string, RefArray> arrays;

  const RefArray& at(const std::string& key) const {
    auto it = arrays.find(key);
    if (it == arrays.end()) {
      ADD_FAILURE() << "reference has no " << key;
      static const RefArray empty;
      return empty;
    }
    return it->second;
  }
  int n_seqs() const { return static_cast<int>(json["sequences"].size()); }
  std::vector<int32_t> ids(int s) const { return json["sequences"][s].get<std::vector<int32_t>>(); }
  // Absolute tolerance for key ("logits", "decode_logits", "embed", "layers.attn_out", ...).
  double tol(const std::string& key) const { return json["tolerances"]["f32"][key].get<double>(); }
  // Quantized logits tolerance: the larger of the exact-activation and ggml-rounding figures, so
  // the test holds for either matmul numerics.
  double qtol(const std::string& q) const {
    const auto& t = json["tolerances"][q];
    return std::max(t["logits_exact_activations"].get<double>(), t["logits_ggml_activation_rounding"].get<double>());
  }
  std::vector<double> margins(const std::string& q, int s) const {
    return json["greedy_margin"][q][s].get<std::vector<double>>();
  }
};

inline Reference load_reference(const std::string& fixture) {
  Reference r;
  r.dir = shared_path("testdata/reference/" + fixture);
  std::ifstream in(r.dir + "/reference.json");
  r.json = nlohmann::json::parse(in);
  auto st = read_safetensors(r.dir + "/reference.safetensors");
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return r;
  for (const auto& t : st->tensors) {
    RefArray a;
    a.shape = t.shape;
    if (t.dtype == DType::kF32) {
      a.f.resize(t.numel());
      std::memcpy(a.f.data(), t.data, t.nbytes);
    } else if (t.dtype == DType::kI32) {
      a.i.resize(t.numel());
      std::memcpy(a.i.data(), t.data, t.nbytes);
    }
    r.arrays[t.name] = std::move(a);
  }
  return r;
}

// max |a - b| over n values.
inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t k = 0; k < n; ++k) m = std::max(m, std::fabs(static_cast<double>(a[k]) - b[k]));
  return m;
}

}  // namespace gb::test

// Glass-box test fixtures: edited copies of the HF reference fixtures (written with our own
// safetensors writer into a temp dir) and control-vector GGUFs written with our GGUF writer.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "glass/spec.h"
#include "model/model.h"
#include "support/test_support.h"

namespace gb::test {

// A model for a glass-box test (null, with a test failure, when it does not load).
inline std::unique_ptr<Model> load_glass_model(const std::string& path, int threads = 1) {
  auto m = load_model(path, {.max_batch_tokens = 128, .n_threads = threads});
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(*m) : nullptr;
}

// spec resolved against m (null, with a test failure, when it does not resolve).
inline std::shared_ptr<const GlassSpec> resolve_for(GlassSpec spec, const Model& m) {
  auto r = resolve_glass_spec(std::move(spec), m.config());
  EXPECT_TRUE(r.is_ok()) << r.message();
  return r.is_ok() ? *r : nullptr;
}

// n token ids: BOS (1) first and never elsewhere, then random ids in [3, vocab).
inline std::vector<int32_t> random_prompt(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  ids[0] = 1;
  for (int i = 1; i < n; ++i) ids[static_cast<size_t>(i)] = 3 + static_cast<int32_t>(rng() % (vocab - 3));
  return ids;
}

// Copies an F32 HF fixture (config.json, generation_config.json, model.safetensors) into a fresh
// temp dir, calling edit(name, shape, data) on every tensor first. Returns the directory.
inline std::string write_edited_fixture(
    const std::string& src_dir,
    const std::function<void(const std::string&, const std::vector<int64_t>&, std::vector<float>&)>& edit) {
  const std::string dir = temp_dir();
  for (const char* f : {"config.json", "generation_config.json"}) {
    if (std::filesystem::exists(src_dir + "/" + f)) {
      std::filesystem::copy_file(src_dir + "/" + f, dir + "/" + f);
      std::filesystem::permissions(dir + "/" + f,
                                   std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    }
  }
  auto st = read_safetensors(src_dir + "/model.safetensors");
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return dir;
  std::vector<std::vector<float>> data;
  data.reserve(st->tensors.size());
  std::vector<SafetensorsEntry> entries;
  for (const auto& t : st->tensors) {
    EXPECT_EQ(t.dtype, DType::kF32) << t.name;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    std::memcpy(v.data(), t.data, t.nbytes);
    edit(t.name, t.shape, v);
    data.push_back(std::move(v));
    entries.push_back({t.name, DType::kF32, t.shape, data.back().data()});
  }
  const Status w = write_safetensors(dir + "/model.safetensors", entries);
  EXPECT_TRUE(w.is_ok()) << w.message();
  return dir;
}

// Copies an F32 HF checkpoint without layers [first, last]: their tensors dropped, the later
// layers' tensors renamed down ("model.layers.5." → "model.layers.3." when 2 are removed),
// num_hidden_layers lowered and layer_types (hybrid models) cut to match. Returns the directory.
inline std::string write_fixture_without_layers(const std::string& src_dir, int32_t first, int32_t last) {
  const std::string dir = temp_dir();
  const int32_t removed = last - first + 1;
  {
    std::ifstream in(src_dir + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["num_hidden_layers"] = config["num_hidden_layers"].get<int32_t>() - removed;
    if (config.contains("layer_types")) {
      auto& types = config["layer_types"];
      types.erase(types.begin() + first, types.begin() + last + 1);
    }
    std::ofstream(dir + "/config.json") << config.dump(2);
  }
  if (std::filesystem::exists(src_dir + "/generation_config.json"))
    std::filesystem::copy_file(src_dir + "/generation_config.json", dir + "/generation_config.json");
  auto st = read_safetensors(src_dir + "/model.safetensors");
  EXPECT_TRUE(st.is_ok()) << st.message();
  if (!st.is_ok()) return dir;
  std::vector<SafetensorsEntry> entries;
  const std::string prefix = "model.layers.";
  for (const auto& t : st->tensors) {
    EXPECT_EQ(t.dtype, DType::kF32) << t.name;
    std::string name = t.name;
    if (name.rfind(prefix, 0) == 0) {
      const size_t dot = name.find('.', prefix.size());
      const int32_t layer = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
      if (layer >= first && layer <= last) continue;
      if (layer > last) name = prefix + std::to_string(layer - removed) + name.substr(dot);
    }
    entries.push_back({name, DType::kF32, t.shape, t.data});
  }
  const Status w = write_safetensors(dir + "/model.safetensors", entries);
  EXPECT_TRUE(w.is_ok()) << w.message();
  return dir;
}

// llama-gqa (3 layers, hidden 64, ffn 160, BOS 1) edited so that the token at position 0 (the
// BOS, which appears nowhere else in the tests' prompts, and which the edited tied lm_head never
// predicts) carries |x| ≈ 2000 on dim kDim of the residual from layer kLayer's MLP on, every
// other value staying O(1):
//  - embedding: BOS = e_m (dim kMarker = 1, all else 0); every other token gets x_m = −1 on top
//    of its small random row (std 0.02), so after RMSNorm x̂_m ≈ +8 for BOS and ≈ −8 otherwise;
//  - layer kLayer, neuron kNeuron: gate and up rows read only x̂_m (scaled to undo the norm
//    weight), so act = silu(x̂_m)·x̂_m ≈ 63 for BOS and ≈ 0.02 otherwise; its down_proj column is
//    kScale·e_d. The massive value is ≈ 63 · 32 ≈ 2000 on BOS only.
struct MassiveFixture {
  static constexpr int32_t kLayer = 1;
  static constexpr int32_t kDim = 17;
  static constexpr int32_t kMarker = 5;
  static constexpr int32_t kNeuron = 42;
  static constexpr float kScale = 32.0f;
  using Edit = std::function<void(const std::string&, const std::vector<int64_t>&, std::vector<float>&)>;
  // also: a further edit applied to every tensor after these (SinkFixture).
  static std::string make(const Edit& also = {}) {
    const std::string src = shared_path("testdata/reference/llama-gqa/hf");
    // The norm weight of dim m at layer kLayer's MLP input.
    float norm_m = 1.0f;
    {
      auto st = read_safetensors(src + "/model.safetensors");
      for (const auto& t : st->tensors) {
        if (t.name == "model.layers." + std::to_string(kLayer) + ".post_attention_layernorm.weight") {
          std::memcpy(&norm_m, t.data + kMarker * 4, 4);
        }
      }
    }
    const std::string lp = "model.layers." + std::to_string(kLayer) + ".mlp.";
    return write_edited_fixture(src,
                                [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& v) {
                                  if (name == "model.embed_tokens.weight") {
                                    const int64_t n_embd = shape[1];
                                    for (int64_t t = 0; t < shape[0]; ++t) {
                                      float* row = v.data() + t * n_embd;
                                      if (t == 1) {
                                        for (int64_t i = 0; i < n_embd; ++i) row[i] = 0.0f;
                                        row[kMarker] = 1.0f;
                                      } else {
                                        row[kMarker] = -1.0f;
                                      }
                                    }
                                  } else if (name == lp + "gate_proj.weight" || name == lp + "up_proj.weight") {
                                    const int64_t n_embd = shape[1];
                                    float* row = v.data() + int64_t{kNeuron} * n_embd;
                                    for (int64_t i = 0; i < n_embd; ++i) row[i] = 0.0f;
                                    row[kMarker] = 1.0f / norm_m;
                                  } else if (name == lp + "down_proj.weight") {
                                    const int64_t n_ff = shape[1];
                                    for (int64_t r = 0; r < shape[0]; ++r)
                                      v[r * n_ff + kNeuron] = r == kDim ? kScale : 0.0f;
                                  }
                                  if (also) also(name, shape, v);
                                });
  }
};

// MassiveFixture whose last layer (kSinkLayer = 2) uses the massive value as an attention sink
// (Sun et al. 2024, §4), so that zeroing it matters. x̂ = RMSNorm input of that layer's attention;
// every other q/k/v/o weight of the layer is zero:
//  - keys: k = kKey · x̂_kDim on head dim kHeadDim of both kv heads: BOS's x̂_kDim ≈ 8 (the massive
//    value dominates its row; the largest any normed value can be), every other token's ≈ 4.5
//    (its dim kDim is ≈ 0.7 beside the marker's −1);
//  - queries: q = −kQuery · x̂_kMarker on kHeadDim of every head: ≈ +6.5 · kQuery for every token
//    but BOS. q·k favours BOS by ≈ (8 − 4.5) · 6.5 · kQuery · kKey / √8 ≈ 32 nats: every query
//    attends to BOS alone. kHeadDim is the last of the head's first half — with HF's rotate-half
//    RoPE the pair of lowest frequency (θ = 10000^(−6/8) = 1e−3): over the tests' prompt lengths
//    the rotation changes q·k by < 1e−4;
//  - values: v = kValue · x̂_kMarker on head dim 0: ≈ −6.5 for every token but BOS, whose marker
//    is ≈ 0.004 beside its massive value: the sink's value is ≈ 0, so the layer's attention adds
//    ≈ nothing to the residual;
//  - o_proj writes each head's dim 0 into the marker dim, × kOut: when the sink is gone (the
//    massive value zeroed: BOS's key drops to 0, the others' are unchanged) the queries attend to
//    the other tokens, whose values add 8 · 6.5 · kValue · |kOut| ≈ +2.6 to the marker, flipping
//    its sign — and the tied lm_head's BOS row is +e_marker, every other row −e_marker + noise: the
//    logits then all but name BOS, a token no prompt continues with.
struct SinkFixture {
  static constexpr int32_t kLayer = MassiveFixture::kLayer;  // where the massive value emerges
  static constexpr int32_t kDim = MassiveFixture::kDim;
  static constexpr int32_t kSinkLayer = 2;
  static constexpr int32_t kHeadDim = 3;
  static constexpr float kQuery = 2.0f, kKey = 2.0f, kValue = 1.0f, kOut = -0.05f;
  static std::string make() {
    const std::string src = shared_path("testdata/reference/llama-gqa/hf");
    const std::string lp = "model.layers." + std::to_string(kSinkLayer) + ".";
    float norm_marker = 1.0f, norm_dim = 1.0f;  // the attention norm's weights of those dims
    int64_t head_dim = 8;
    {
      std::ifstream in(src + "/config.json");
      head_dim = nlohmann::json::parse(in)["head_dim"].get<int64_t>();
      auto st = read_safetensors(src + "/model.safetensors");
      for (const auto& t : st->tensors) {
        if (t.name == lp + "input_layernorm.weight") {
          std::memcpy(&norm_marker, t.data + MassiveFixture::kMarker * 4, 4);
          std::memcpy(&norm_dim, t.data + kDim * 4, 4);
        }
      }
    }
    return MassiveFixture::make([=](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& v) {
      const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
      auto at = [&](int64_t r, int64_t c) -> float& { return v[static_cast<size_t>(r * cols + c)]; };
      if (name == lp + "self_attn.q_proj.weight") {
        std::fill(v.begin(), v.end(), 0.0f);
        for (int64_t r = kHeadDim; r < rows; r += head_dim) at(r, MassiveFixture::kMarker) = -kQuery / norm_marker;
      } else if (name == lp + "self_attn.k_proj.weight") {
        std::fill(v.begin(), v.end(), 0.0f);
        for (int64_t r = kHeadDim; r < rows; r += head_dim) at(r, kDim) = kKey / norm_dim;
      } else if (name == lp + "self_attn.v_proj.weight") {
        std::fill(v.begin(), v.end(), 0.0f);
        for (int64_t r = 0; r < rows; r += head_dim) at(r, MassiveFixture::kMarker) = kValue / norm_marker;
      } else if (name == lp + "self_attn.o_proj.weight") {
        std::fill(v.begin(), v.end(), 0.0f);
        for (int64_t c = 0; c < cols; c += head_dim) at(MassiveFixture::kMarker, c) = kOut;
      }
    });
  }
};

// A control-vector GGUF as llama.cpp / repeng write it: general.architecture = controlvector,
// controlvector.model_hint, controlvector.layer_count, one F32 tensor direction.N per layer.
inline std::string write_control_vector(const std::string& path,
                                        const std::vector<std::pair<int, std::vector<float>>>& dirs,
                                        const std::string& hint = "llama") {
  GgufWriter w;
  w.set("general.architecture", "controlvector");
  w.set("controlvector.model_hint", hint);
  w.set("controlvector.layer_count", static_cast<int32_t>(dirs.size()));
  std::vector<std::string> names;
  for (const auto& [layer, v] : dirs) {
    w.add_tensor("direction." + std::to_string(layer), DType::kF32, {static_cast<int64_t>(v.size())}, v.data(),
                 v.size() * sizeof(float));
  }
  const Status st = w.write(path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return path;
}

}  // namespace gb::test

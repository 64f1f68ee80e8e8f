// Writes a random-weight model for benchmarks, by default with Qwen3-0.6B's shapes: a Hugging
// Face directory (BF16 safetensors) and GGUF files (BF16, Q8_0, Q4_0) with the same weights.
// Usage: glassbox-make-model --out DIR [--types bf16,q8_0,q4_0] [--layers N] ...
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/quantize.h"
#include "formats/safetensors.h"

namespace {

struct Shape {
  int64_t hidden = 1024, layers = 28, heads = 16, kv_heads = 8, head_dim = 128, ffn = 3072, vocab = 151936;
  int64_t max_pos = 40960;
  double rope_theta = 1e6, eps = 1e-6;
};

struct Tensor {
  std::string hf_name, gguf_name;
  std::vector<int64_t> shape;  // outermost first
  std::vector<float> values;
};

// xorshift64*: fast, deterministic, good enough for benchmark weights.
struct Rng {
  uint64_t s;
  float uniform() {  // [-1, 1)
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return static_cast<float>(static_cast<int64_t>(s * 0x2545F4914F6CDD1Dull) >> 11) * (1.0f / 4503599627370496.0f);
  }
};

Tensor make(const std::string& hf, const std::string& gguf, std::vector<int64_t> shape, float scale, float offset,
            uint64_t seed) {
  Tensor t{hf, gguf, std::move(shape), {}};
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.values.resize(n);
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  for (auto& v : t.values) v = offset + scale * rng.uniform();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight Qwen3-shaped model (HF bf16 + GGUF) for benchmarks"};
  Shape s;
  std::string out, types = "bf16,q8_0,q4_0";
  std::string vocab_gguf = "../shared/testdata/tokenizers/llama.cpp-vocab/ggml-vocab-qwen2.gguf";
  std::string tokenizer_json = "../shared/testdata/tokenizers/hf/qwen2-bpe/tokenizer.json";
  app.add_option("--out", out, "output directory")->required();
  app.add_option("--types", types, "GGUF types to write (comma-separated: bf16, q8_0, q4_0, f32)");
  app.add_option("--layers", s.layers, "number of layers");
  app.add_option("--hidden", s.hidden, "hidden size");
  app.add_option("--ffn", s.ffn, "intermediate size");
  app.add_option("--vocab-gguf", vocab_gguf, "GGUF whose tokenizer.* metadata is copied");
  app.add_option("--tokenizer-json", tokenizer_json, "tokenizer.json copied into the HF directory");
  CLI11_PARSE(app, argc, argv);

  // Uniform weights of standard deviation 0.02 (scale 0.02 * sqrt(3)); norms around 1.
  const float w = 0.02f * std::sqrt(3.0f);
  std::vector<Tensor> ts;
  uint64_t seed = 1;
  ts.push_back(make("model.embed_tokens.weight", "token_embd.weight", {s.vocab, s.hidden}, w, 0, seed++));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string hp = "model.layers." + std::to_string(l) + ".", gp = "blk." + std::to_string(l) + ".";
    ts.push_back(make(hp + "input_layernorm.weight", gp + "attn_norm.weight", {s.hidden}, 0.1f, 1, seed++));
    ts.push_back(make(hp + "self_attn.q_proj.weight", gp + "attn_q.weight", {s.heads * s.head_dim, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "self_attn.k_proj.weight", gp + "attn_k.weight", {s.kv_heads * s.head_dim, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "self_attn.v_proj.weight", gp + "attn_v.weight", {s.kv_heads * s.head_dim, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "self_attn.o_proj.weight", gp + "attn_output.weight", {s.hidden, s.heads * s.head_dim}, w, 0, seed++));
    ts.push_back(make(hp + "self_attn.q_norm.weight", gp + "attn_q_norm.weight", {s.head_dim}, 0.1f, 1, seed++));
    ts.push_back(make(hp + "self_attn.k_norm.weight", gp + "attn_k_norm.weight", {s.head_dim}, 0.1f, 1, seed++));
    ts.push_back(make(hp + "post_attention_layernorm.weight", gp + "ffn_norm.weight", {s.hidden}, 0.1f, 1, seed++));
    ts.push_back(make(hp + "mlp.gate_proj.weight", gp + "ffn_gate.weight", {s.ffn, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "mlp.up_proj.weight", gp + "ffn_up.weight", {s.ffn, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "mlp.down_proj.weight", gp + "ffn_down.weight", {s.hidden, s.ffn}, w, 0, seed++));
  }
  ts.push_back(make("model.norm.weight", "output_norm.weight", {s.hidden}, 0.1f, 1, seed++));

  namespace fs = std::filesystem;
  fs::create_directories(fs::path(out) / "hf");
  fs::create_directories(fs::path(out) / "gguf");

  // Hugging Face directory, BF16.
  {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<gb::SafetensorsEntry> entries;
    for (const auto& t : ts) {
      std::vector<uint8_t> b(t.values.size() * 2);
      (void)gb::convert_row(t.values.data(), static_cast<int64_t>(t.values.size()), gb::DType::kBF16, b.data());
      bufs.push_back(std::move(b));
    }
    for (size_t i = 0; i < ts.size(); ++i) entries.push_back({ts[i].hf_name, gb::DType::kBF16, ts[i].shape, bufs[i].data()});
    const auto st = gb::write_safetensors((fs::path(out) / "hf" / "model.safetensors").string(), entries, {{"format", "pt"}});
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    nlohmann::json cfg = {
        {"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"hidden_size", s.hidden},
        {"intermediate_size", s.ffn}, {"num_hidden_layers", s.layers}, {"num_attention_heads", s.heads},
        {"num_key_value_heads", s.kv_heads}, {"head_dim", s.head_dim}, {"hidden_act", "silu"},
        {"max_position_embeddings", s.max_pos}, {"rms_norm_eps", s.eps}, {"rope_theta", s.rope_theta},
        {"rope_scaling", nullptr}, {"attention_bias", false}, {"tie_word_embeddings", true}, {"vocab_size", s.vocab},
        {"bos_token_id", 151643}, {"eos_token_id", 151645}, {"torch_dtype", "bfloat16"}};
    std::ofstream(fs::path(out) / "hf" / "config.json") << cfg.dump(2) << "\n";
    std::ofstream(fs::path(out) / "hf" / "generation_config.json")
        << nlohmann::json{{"bos_token_id", 151643}, {"eos_token_id", {151645, 151643}}}.dump(2) << "\n";
    std::error_code ec;
    fs::copy_file(tokenizer_json, fs::path(out) / "hf" / "tokenizer.json", fs::copy_options::overwrite_existing, ec);
    if (ec) std::fprintf(stderr, "note: no tokenizer.json copied (%s)\n", ec.message().c_str());
    std::printf("wrote %s/hf (bf16)\n", out.c_str());
  }

  // GGUF files. Qwen3's q/k rows are not permuted (NEOX rope), so tensors map one to one.
  auto vocab = gb::read_gguf(vocab_gguf);
  std::stringstream ss(types);
  for (std::string type; std::getline(ss, type, ',');) {
    gb::DType dt;
    if (type == "bf16") dt = gb::DType::kBF16;
    else if (type == "q8_0") dt = gb::DType::kQ8_0;
    else if (type == "q4_0") dt = gb::DType::kQ4_0;
    else if (type == "f32") dt = gb::DType::kF32;
    else {
      std::fprintf(stderr, "unknown type %s\n", type.c_str());
      return 1;
    }
    gb::GgufWriter g;
    const uint32_t file_type = dt == gb::DType::kBF16 ? 32 : dt == gb::DType::kQ8_0 ? 7 : dt == gb::DType::kQ4_0 ? 2 : 0;
    g.set("general.architecture", "qwen3");
    g.set("general.name", "random-qwen3-0.6b-shape");
    g.set("qwen3.block_count", static_cast<uint32_t>(s.layers));
    g.set("qwen3.context_length", static_cast<uint32_t>(s.max_pos));
    g.set("qwen3.embedding_length", static_cast<uint32_t>(s.hidden));
    g.set("qwen3.feed_forward_length", static_cast<uint32_t>(s.ffn));
    g.set("qwen3.attention.head_count", static_cast<uint32_t>(s.heads));
    g.set("qwen3.attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
    g.set("qwen3.rope.freq_base", static_cast<float>(s.rope_theta));
    g.set("qwen3.attention.layer_norm_rms_epsilon", static_cast<float>(s.eps));
    g.set("qwen3.attention.key_length", static_cast<uint32_t>(s.head_dim));
    g.set("qwen3.attention.value_length", static_cast<uint32_t>(s.head_dim));
    g.set("general.file_type", file_type);
    g.set("general.quantization_version", 2u);
    if (vocab.is_ok()) {
      for (const auto& [k, v] : vocab->metadata) {
        if (k.rfind("tokenizer.", 0) == 0) g.set(k, v);
      }
    }
    std::vector<std::vector<uint8_t>> bufs(ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      const Tensor& t = ts[i];
      // Norms stay F32, as llama-quantize leaves 1-D tensors.
      const gb::DType tdt = t.shape.size() == 1 ? gb::DType::kF32 : dt;
      const int64_t cols = t.shape.back(), rows = static_cast<int64_t>(t.values.size()) / cols;
      const int64_t rb = gb::row_bytes(tdt, cols);
      bufs[i].resize(rows * rb);
      for (int64_t r = 0; r < rows; ++r) (void)gb::convert_row(t.values.data() + r * cols, cols, tdt, bufs[i].data() + r * rb);
      g.add_tensor(t.gguf_name, tdt, t.shape, bufs[i].data(), bufs[i].size());
    }
    const std::string path = (fs::path(out) / "gguf" / ("model-" + type + ".gguf")).string();
    const auto st = g.write(path);
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

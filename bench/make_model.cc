// Writes a random-weight model for benchmarks, by default with Qwen3-0.6B's shapes (or, with
// --shape qwen3.5-0.8b, Qwen3.5-0.8B's hybrid Gated DeltaNet + gated attention shapes): a Hugging
// Face directory (BF16 safetensors) and GGUF files (BF16, Q8_0, Q4_0, Q4_K, Q6_K, llama.cpp's
// Q4_K_M mix) with the same weights.
// Usage: glassbox-make-model --out DIR [--shape qwen3-0.6b|qwen3.5-0.8b] [--types bf16,q8_0,q4_0,q4_k_m] [--layers N]
// ...
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
  // Qwen3.5 hybrid (--shape qwen3.5-0.8b): every full_attention_interval-th layer is gated full
  // attention, the others Gated DeltaNet with lin_k_heads/lin_v_heads heads of lin_dim.
  bool qwen35 = false;
  int64_t lin_k_heads = 16, lin_v_heads = 16, lin_dim = 128, conv_kernel = 4, full_interval = 4;
  double partial_rotary = 0.25;
  bool full_attention(int64_t l) const { return (l + 1) % full_interval == 0; }
};

// Qwen3.5-0.8B (Qwen/Qwen3.5-0.8B text_config): hidden 1024, 24 layers in the pattern
// 3 × linear_attention : 1 × full_attention, full attention 8 q / 2 kv heads × 256 with an output
// gate and partial rotary 0.25, linear attention 16 key / 16 value heads × 128, conv kernel 4,
// intermediate 3584, vocab 248320, rope_theta 1e7; tied embeddings assumed (as small Qwen checkpoints do).
Shape qwen35_0_8b() {
  Shape s;
  s.qwen35 = true;
  s.hidden = 1024, s.layers = 24, s.heads = 8, s.kv_heads = 2, s.head_dim = 256, s.ffn = 3584, s.vocab = 248320;
  s.max_pos = 262144;
  s.rope_theta = 1e7;
  return s;
}

struct Tensor {
  std::string hf_name, gguf_name;
  std::vector<int64_t> shape;  // outermost first
  std::vector<float> values;
  std::vector<int64_t> gguf_shape = {};  // when GGUF's differs (conv1d [C, 1, K] -> [C, K])
  bool keep_f32 = false;                 // stays F32 in quantized GGUFs (as llama-quantize leaves it)
  float gguf_add = 0.0f;                 // added in the GGUF copy (Qwen3.5 stores its (1 + w) norms as 1 + w)
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

// One Qwen3.5 layer: HF names (Qwen3_5ForCausalLM) and llama.cpp's qwen35 GGUF names. With as
// many value heads as key heads (0.8B) the converter's value-head reorder is the identity. Norm
// weights are zero-centred in HF (x̂·(1 + w)) and stored as 1 + w in GGUF, except the delta net's
// own norm; A_log is stored as ssm_a = −exp(A_log).
void add_qwen35_layer(std::vector<Tensor>* ts, const Shape& s, int64_t l, const std::string& hp, const std::string& gp,
                      float w, uint64_t* seed) {
  auto norm = [&](const std::string& hf, const std::string& gg, int64_t n) {
    ts->push_back(make(hp + hf, gp + gg, {n}, 0.1f, 0, (*seed)++));
    ts->back().gguf_add = 1.0f;
  };
  norm("input_layernorm.weight", "attn_norm.weight", s.hidden);
  norm("post_attention_layernorm.weight", "post_attention_norm.weight", s.hidden);
  ts->push_back(make(hp + "mlp.gate_proj.weight", gp + "ffn_gate.weight", {s.ffn, s.hidden}, w, 0, (*seed)++));
  ts->push_back(make(hp + "mlp.up_proj.weight", gp + "ffn_up.weight", {s.ffn, s.hidden}, w, 0, (*seed)++));
  ts->push_back(make(hp + "mlp.down_proj.weight", gp + "ffn_down.weight", {s.hidden, s.ffn}, w, 0, (*seed)++));
  if (s.full_attention(l)) {
    const int64_t qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
    ts->push_back(make(hp + "self_attn.q_proj.weight", gp + "attn_q.weight", {2 * qd, s.hidden}, w, 0, (*seed)++));
    ts->push_back(make(hp + "self_attn.k_proj.weight", gp + "attn_k.weight", {kvd, s.hidden}, w, 0, (*seed)++));
    ts->push_back(make(hp + "self_attn.v_proj.weight", gp + "attn_v.weight", {kvd, s.hidden}, w, 0, (*seed)++));
    ts->push_back(make(hp + "self_attn.o_proj.weight", gp + "attn_output.weight", {s.hidden, qd}, w, 0, (*seed)++));
    norm("self_attn.q_norm.weight", "attn_q_norm.weight", s.head_dim);
    norm("self_attn.k_norm.weight", "attn_k_norm.weight", s.head_dim);
    return;
  }
  const int64_t kd = s.lin_k_heads * s.lin_dim, vd = s.lin_v_heads * s.lin_dim, conv = 2 * kd + vd;
  const std::string la = hp + "linear_attn.";
  ts->push_back(make(la + "in_proj_qkv.weight", gp + "attn_qkv.weight", {conv, s.hidden}, w, 0, (*seed)++));
  ts->push_back(make(la + "in_proj_z.weight", gp + "attn_gate.weight", {vd, s.hidden}, w, 0, (*seed)++));
  ts->push_back(make(la + "in_proj_b.weight", gp + "ssm_beta.weight", {s.lin_v_heads, s.hidden}, w, 0, (*seed)++));
  ts->push_back(make(la + "in_proj_a.weight", gp + "ssm_alpha.weight", {s.lin_v_heads, s.hidden}, w, 0, (*seed)++));
  ts->push_back(make(la + "out_proj.weight", gp + "ssm_out.weight", {s.hidden, vd}, w, 0, (*seed)++));
  ts->push_back(make(la + "conv1d.weight", gp + "ssm_conv1d.weight", {conv, 1, s.conv_kernel}, 0.5f, 0, (*seed)++));
  ts->back().gguf_shape = {conv, s.conv_kernel};
  ts->back().keep_f32 = true;
  ts->push_back(make(la + "dt_bias", gp + "ssm_dt.bias", {s.lin_v_heads}, 0.1f, 1, (*seed)++));
  // A_log = log a for a in [1, 16): HF stores A_log, GGUF −exp(A_log) = −a.
  Tensor a_log = make(la + "A_log", gp + "ssm_a", {s.lin_v_heads}, 7.5f, 8.5f, (*seed)++);
  Tensor a_neg = a_log;
  for (auto& v : a_log.values) v = std::log(v);
  for (auto& v : a_neg.values) v = -v;
  a_neg.hf_name.clear();    // GGUF only
  a_log.gguf_name.clear();  // HF only
  ts->push_back(std::move(a_log));
  ts->push_back(std::move(a_neg));
  ts->push_back(make(la + "norm.weight", gp + "ssm_norm.weight", {s.lin_dim}, 0.1f, 1, (*seed)++));
}

// The config.json fields both architectures share.
nlohmann::json common_config(const Shape& s) {
  return {{"hidden_size", s.hidden},
          {"intermediate_size", s.ffn},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"hidden_act", "silu"},
          {"max_position_embeddings", s.max_pos},
          {"rms_norm_eps", s.eps},
          {"attention_bias", false},
          {"tie_word_embeddings", true},
          {"vocab_size", s.vocab},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"torch_dtype", "bfloat16"}};
}

nlohmann::json qwen3_config(const Shape& s) {
  nlohmann::json c = common_config(s);
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["model_type"] = "qwen3";
  c["rope_theta"] = s.rope_theta;
  c["rope_scaling"] = nullptr;
  return c;
}

nlohmann::json qwen35_config(const Shape& s) {
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < s.layers; ++l) types.push_back(s.full_attention(l) ? "full_attention" : "linear_attention");
  nlohmann::json c = common_config(s);
  c["architectures"] = {"Qwen3_5ForCausalLM"};
  c["model_type"] = "qwen3_5_text";
  c["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", s.rope_theta},
                          {"partial_rotary_factor", s.partial_rotary},
                          {"mrope_section", {11, 11, 10}},
                          {"mrope_interleaved", true}};
  c["attn_output_gate"] = true;
  c["full_attention_interval"] = s.full_interval;
  c["layer_types"] = types;
  c["linear_conv_kernel_dim"] = s.conv_kernel;
  c["linear_key_head_dim"] = s.lin_dim;
  c["linear_value_head_dim"] = s.lin_dim;
  c["linear_num_key_heads"] = s.lin_k_heads;
  c["linear_num_value_heads"] = s.lin_v_heads;
  return c;
}

// GLASSBOX_SHARED, else the shared test data directory the build was configured with.
std::string shared_dir() {
  if (const char* env = std::getenv("GLASSBOX_SHARED"); env != nullptr && *env != '\0') return env;
  return GB_SHARED_DIR;
}

// Pads tokenizer.ggml.tokens (and token_type, scores) to n_vocab entries as convert_hf_to_gguf
// does ("[PAD<id>]", type UNUSED, score -1000), so the vocabulary has one token per embedding
// row; a tokenizer larger than the model's vocabulary is an error.
gb::Status pad_vocabulary(nlohmann::json* meta, int64_t n_vocab) {
  auto tokens = meta->find("tokenizer.ggml.tokens");
  if (tokens == meta->end() || !tokens->is_array()) return gb::Status::error("no tokenizer.ggml.tokens array");
  const int64_t n = static_cast<int64_t>(tokens->size());
  if (n > n_vocab) {
    return gb::Status::error(std::to_string(n) + " tokens, more than the model's vocabulary of " +
                             std::to_string(n_vocab));
  }
  auto types = meta->find("tokenizer.ggml.token_type");
  auto scores = meta->find("tokenizer.ggml.scores");
  if (types != meta->end() && (!types->is_array() || static_cast<int64_t>(types->size()) != n))
    return gb::Status::error("tokenizer.ggml.token_type does not have one entry per token");
  if (scores != meta->end() && (!scores->is_array() || static_cast<int64_t>(scores->size()) != n))
    return gb::Status::error("tokenizer.ggml.scores does not have one entry per token");
  constexpr int32_t kUnused = 5;  // llama.cpp's LLAMA_TOKEN_TYPE_UNUSED
  for (int64_t id = n; id < n_vocab; ++id) {
    tokens->push_back("[PAD" + std::to_string(id) + "]");
    if (types != meta->end()) types->push_back(kUnused);
    if (scores != meta->end()) scores->push_back(-1000.0f);
  }
  return gb::Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight Qwen3-shaped model (HF bf16 + GGUF) for benchmarks"};
  Shape s;
  std::string out, types = "bf16,q8_0,q4_0", shape = "qwen3-0.6b";
  // The shape picks the defaults that --layers / --hidden / --ffn then override, so it is read first.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--shape" && i + 1 < argc && std::string(argv[i + 1]) == "qwen3.5-0.8b") ||
        arg == "--shape=qwen3.5-0.8b") {
      s = qwen35_0_8b();
    }
  }
  // The default tokenizer comes from the shared test data (GLASSBOX_SHARED, else the directory
  // this binary was configured with), never from the working directory.
  const std::string shared = shared_dir();
  std::string vocab_gguf = shared + "/testdata/tokenizers/llama.cpp-vocab/ggml-vocab-qwen2.gguf";
  std::string tokenizer_json = shared + "/testdata/tokenizers/hf/qwen2-bpe/tokenizer.json";
  app.add_option("--out", out, "output directory")->required();
  app.add_option("--shape", shape, "qwen3-0.6b (default) or qwen3.5-0.8b; --layers/--hidden/--ffn override");

  app.add_option(
      "--types", types,
      "GGUF types to write (comma-separated: bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, f32, q3_k, q4_k, q5_k, q6_k, "
      "q3_k_m / q4_k_m / q5_k_m = llama.cpp's Q3_K_M / Q4_K_M / Q5_K_M mixes, q2_k / iq4_xs = its Q2_K / IQ4_XS "
      "mixes)");
  app.add_option("--layers", s.layers, "number of layers");
  app.add_option("--hidden", s.hidden, "hidden size");
  app.add_option("--ffn", s.ffn, "intermediate size");
  auto* vocab_flag =
      app.add_option("--vocab-gguf", vocab_gguf, "GGUF whose tokenizer.* metadata is copied")->capture_default_str();
  auto* tokenizer_flag =
      app.add_option("--tokenizer-json", tokenizer_json, "tokenizer.json copied into the HF directory")
          ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (shape != "qwen3-0.6b" && shape != "qwen3.5-0.8b") {
    std::fprintf(stderr, "unknown --shape %s (qwen3-0.6b, qwen3.5-0.8b)\n", shape.c_str());
    return 1;
  }
  // Both tokenizer files must exist before anything is written: a model without its tokenizer
  // is not servable, and a mistyped path must not pass silently.
  for (const auto& [path, flag] : {std::pair{vocab_gguf, vocab_flag}, std::pair{tokenizer_json, tokenizer_flag}}) {
    if (std::filesystem::is_regular_file(path)) continue;
    if (flag->count() > 0) {
      std::fprintf(stderr, "glassbox-make-model: %s %s: no such file\n", flag->get_name().c_str(), path.c_str());
    } else {
      std::fprintf(stderr,
                   "glassbox-make-model: the default tokenizer %s does not exist (set GLASSBOX_SHARED to the shared "
                   "test data, or pass %s FILE)\n",
                   path.c_str(), flag->get_name().c_str());
    }
    return 1;
  }
  auto vocab = gb::read_gguf(vocab_gguf);
  if (!vocab.is_ok()) {
    std::fprintf(stderr, "glassbox-make-model: --vocab-gguf %s: %s\n", vocab_gguf.c_str(), vocab.message().c_str());
    return 1;
  }
  // The GGUF tokenizer, as llama.cpp requires it: exactly one token per embedding row.
  nlohmann::json tokenizer_meta = nlohmann::json::object();
  for (const auto& [k, v] : vocab->metadata) {
    if (k.rfind("tokenizer.", 0) == 0) tokenizer_meta[k] = v;
  }
  if (gb::Status st = pad_vocabulary(&tokenizer_meta, s.vocab); !st.is_ok()) {
    std::fprintf(stderr, "glassbox-make-model: --vocab-gguf %s: %s\n", vocab_gguf.c_str(), st.message().c_str());
    return 1;
  }

  // Uniform weights of standard deviation 0.02 (scale 0.02 * sqrt(3)); norms around 1.
  const float w = 0.02f * std::sqrt(3.0f);
  std::vector<Tensor> ts;
  uint64_t seed = 1;
  ts.push_back(make("model.embed_tokens.weight", "token_embd.weight", {s.vocab, s.hidden}, w, 0, seed++));
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string hp = "model.layers." + std::to_string(l) + ".", gp = "blk." + std::to_string(l) + ".";
    if (s.qwen35) {
      add_qwen35_layer(&ts, s, l, hp, gp, w, &seed);
      continue;
    }
    ts.push_back(make(hp + "input_layernorm.weight", gp + "attn_norm.weight", {s.hidden}, 0.1f, 1, seed++));
    ts.push_back(
        make(hp + "self_attn.q_proj.weight", gp + "attn_q.weight", {s.heads * s.head_dim, s.hidden}, w, 0, seed++));
    ts.push_back(
        make(hp + "self_attn.k_proj.weight", gp + "attn_k.weight", {s.kv_heads * s.head_dim, s.hidden}, w, 0, seed++));
    ts.push_back(
        make(hp + "self_attn.v_proj.weight", gp + "attn_v.weight", {s.kv_heads * s.head_dim, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "self_attn.o_proj.weight", gp + "attn_output.weight", {s.hidden, s.heads * s.head_dim}, w, 0,
                      seed++));
    ts.push_back(make(hp + "self_attn.q_norm.weight", gp + "attn_q_norm.weight", {s.head_dim}, 0.1f, 1, seed++));
    ts.push_back(make(hp + "self_attn.k_norm.weight", gp + "attn_k_norm.weight", {s.head_dim}, 0.1f, 1, seed++));
    ts.push_back(make(hp + "post_attention_layernorm.weight", gp + "ffn_norm.weight", {s.hidden}, 0.1f, 1, seed++));
    ts.push_back(make(hp + "mlp.gate_proj.weight", gp + "ffn_gate.weight", {s.ffn, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "mlp.up_proj.weight", gp + "ffn_up.weight", {s.ffn, s.hidden}, w, 0, seed++));
    ts.push_back(make(hp + "mlp.down_proj.weight", gp + "ffn_down.weight", {s.hidden, s.ffn}, w, 0, seed++));
  }
  if (s.qwen35) {
    ts.push_back(make("model.norm.weight", "output_norm.weight", {s.hidden}, 0.1f, 0, seed++));
    ts.back().gguf_add = 1.0f;
  } else {
    ts.push_back(make("model.norm.weight", "output_norm.weight", {s.hidden}, 0.1f, 1, seed++));
  }

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
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i].hf_name.empty()) entries.push_back({ts[i].hf_name, gb::DType::kBF16, ts[i].shape, bufs[i].data()});
    }
    const auto st =
        gb::write_safetensors((fs::path(out) / "hf" / "model.safetensors").string(), entries, {{"format", "pt"}});
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    const nlohmann::json cfg = s.qwen35 ? qwen35_config(s) : qwen3_config(s);
    std::ofstream(fs::path(out) / "hf" / "config.json") << cfg.dump(2) << "\n";
    std::ofstream(fs::path(out) / "hf" / "generation_config.json")
        << nlohmann::json{{"bos_token_id", 151643}, {"eos_token_id", {151645, 151643}}}.dump(2) << "\n";
    std::error_code ec;
    fs::copy_file(tokenizer_json, fs::path(out) / "hf" / "tokenizer.json", fs::copy_options::overwrite_existing, ec);
    if (ec) {
      std::fprintf(stderr, "glassbox-make-model: cannot copy %s: %s\n", tokenizer_json.c_str(), ec.message().c_str());
      return 1;
    }
    std::printf("wrote %s/hf (bf16)\n", out.c_str());
  }

  // GGUF files. Qwen3's q/k rows are not permuted (NEOX rope), so tensors map one to one.
  std::stringstream ss(types);
  for (std::string type; std::getline(ss, type, ',');) {
    gb::DType dt;
    const bool q3_k_m = type == "q3_k_m", q4_k_m = type == "q4_k_m", q5_k_m = type == "q5_k_m",
               k_m = q3_k_m || q4_k_m || q5_k_m;
    if (type == "bf16") dt = gb::DType::kBF16;
    else if (type == "q8_0") dt = gb::DType::kQ8_0;
    else if (type == "q4_0") dt = gb::DType::kQ4_0;
    else if (type == "q5_0") dt = gb::DType::kQ5_0;
    else if (type == "q4_1") dt = gb::DType::kQ4_1;
    else if (type == "q5_1") dt = gb::DType::kQ5_1;
    else if (type == "iq4_nl") dt = gb::DType::kIQ4_NL;
    else if (type == "f32") dt = gb::DType::kF32;
    else if (type == "q3_k" || q3_k_m) dt = gb::DType::kQ3_K;
    else if (type == "q4_k" || q4_k_m) dt = gb::DType::kQ4_K;
    else if (type == "q5_k" || q5_k_m) dt = gb::DType::kQ5_K;
    else if (type == "q6_k") dt = gb::DType::kQ6_K;
    else if (type == "iq4_xs") dt = gb::DType::kIQ4_XS;
    else if (type == "q2_k") dt = gb::DType::kQ2_K;
    else {
      std::fprintf(stderr, "unknown type %s\n", type.c_str());
      return 1;
    }
    gb::GgufWriter g;
    // llama.cpp's LLAMA_FTYPE_MOSTLY_*: a pure q4_k file is what `llama-quantize --pure Q4_K_M` writes.
    const uint32_t file_type = dt == gb::DType::kBF16     ? 32
                               : dt == gb::DType::kQ8_0   ? 7
                               : dt == gb::DType::kQ4_0   ? 2
                               : dt == gb::DType::kQ5_0   ? 8
                               : dt == gb::DType::kQ4_1   ? 3
                               : dt == gb::DType::kQ5_1   ? 9
                               : dt == gb::DType::kIQ4_NL ? 25
                               : dt == gb::DType::kQ3_K   ? 12
                               : dt == gb::DType::kQ4_K   ? 15
                               : dt == gb::DType::kQ5_K   ? 17
                               : dt == gb::DType::kQ6_K   ? 18
                               : dt == gb::DType::kIQ4_XS ? 30
                               : dt == gb::DType::kQ2_K   ? 10
                                                          : 0;
    const std::string a = s.qwen35 ? "qwen35" : "qwen3";
    g.set("general.architecture", a);
    g.set("general.name", s.qwen35 ? "random-qwen3.5-0.8b-shape" : "random-qwen3-0.6b-shape");
    g.set(a + ".block_count", static_cast<uint32_t>(s.layers));
    g.set(a + ".context_length", static_cast<uint32_t>(s.max_pos));
    g.set(a + ".embedding_length", static_cast<uint32_t>(s.hidden));
    g.set(a + ".feed_forward_length", static_cast<uint32_t>(s.ffn));
    g.set(a + ".attention.head_count", static_cast<uint32_t>(s.heads));
    g.set(a + ".attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
    g.set(a + ".rope.freq_base", static_cast<float>(s.rope_theta));
    g.set(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(s.eps));
    g.set(a + ".attention.key_length", static_cast<uint32_t>(s.head_dim));
    g.set(a + ".attention.value_length", static_cast<uint32_t>(s.head_dim));
    if (s.qwen35) {
      g.set(a + ".rope.dimension_count", static_cast<uint32_t>(s.head_dim * s.partial_rotary));
      g.set(a + ".ssm.conv_kernel", static_cast<uint32_t>(s.conv_kernel));
      g.set(a + ".ssm.state_size", static_cast<uint32_t>(s.lin_dim));
      g.set(a + ".ssm.group_count", static_cast<uint32_t>(s.lin_k_heads));
      g.set(a + ".ssm.time_step_rank", static_cast<uint32_t>(s.lin_v_heads));
      g.set(a + ".ssm.inner_size", static_cast<uint32_t>(s.lin_v_heads * s.lin_dim));
      g.set(a + ".full_attention_interval", static_cast<uint32_t>(s.full_interval));
      // M-RoPE sections (t, h, w, unused) as convert_hf_to_gguf writes them: required by llama.cpp.
      g.set(a + ".rope.dimension_sections", nlohmann::json::array({11, 11, 10, 0}));
    }
    g.set("general.file_type", file_type);
    g.set("general.quantization_version", 2u);
    for (const auto& [k, v] : tokenizer_meta.items()) g.set(k, v);
    std::vector<std::vector<uint8_t>> bufs(ts.size());
    // Q3_K_M / Q4_K_M / Q5_K_M as llama.cpp's llama_tensor_get_type picks them: Q6_K for the output
    // matrix (here the tied token embedding). attn_v and Qwen3.5's fused attn_qkv share one
    // counter: Q4_K_M / Q5_K_M give Q6_K to those use_more_bits picks (the first and last eighth,
    // and every third one between), Q3_K_M Q5_K to the first two and Q4_K to the rest. ffn_down:
    // Q6_K where use_more_bits picks (Q4_K_M / Q5_K_M); Q3_K_M Q5_K in the first sixteenth of the
    // layers, else Q4_K; Q3_K_M's attn_output is Q4_K. IQ4_XS (llama-quantize without an
    // importance matrix): Q6_K for the output matrix, Q5_K for attn_v where 4 or more query heads
    // share a KV head and for ffn_down in the first eighth of the layers. Q2_K: Q6_K for the
    // output matrix, Q3_K for ffn_down and attn_output, attn_v Q3_K (Q4_K where ≥ 4 query heads
    // share a KV head). Everything else the mix's base type.
    auto use_more_bits = [](int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; };
    auto is_attn_v = [](const std::string& name) {
      return name.find("attn_v.weight") != std::string::npos || name.find("attn_qkv.weight") != std::string::npos;
    };
    int64_t n_attn_v = 0, n_ffn_down = 0, i_attn_v = 0, i_ffn_down = 0;
    for (const Tensor& t : ts) {
      n_attn_v += is_attn_v(t.gguf_name);
      n_ffn_down += t.gguf_name.find("ffn_down") != std::string::npos;
    }
    int64_t n_k_fallback = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      const Tensor& t = ts[i];
      if (t.gguf_name.empty()) continue;
      // Norms stay F32, as llama-quantize leaves 1-D tensors.
      gb::DType tdt = t.shape.size() == 1 || t.keep_f32 ? gb::DType::kF32 : dt;
      const int64_t cols = t.shape.back(), rows = static_cast<int64_t>(t.values.size()) / cols;
      if (k_m && tdt == dt) {
        const std::string& name = t.gguf_name;
        if (name == "token_embd.weight" || name == "output.weight") {
          tdt = gb::DType::kQ6_K;
        } else if (is_attn_v(name)) {
          const int64_t iv = i_attn_v++;
          if (q3_k_m) tdt = iv < 2 ? gb::DType::kQ5_K : gb::DType::kQ4_K;
          else if (use_more_bits(iv, n_attn_v)) tdt = gb::DType::kQ6_K;
        } else if (name.find("ffn_down") != std::string::npos) {
          const int64_t il = i_ffn_down++;
          if (q3_k_m) tdt = il < n_ffn_down / 16 ? gb::DType::kQ5_K : gb::DType::kQ4_K;
          else if (use_more_bits(il, n_ffn_down)) tdt = gb::DType::kQ6_K;
        } else if (q3_k_m && name.find("attn_output.weight") != std::string::npos) {
          tdt = gb::DType::kQ4_K;
        }
      } else if (dt == gb::DType::kQ2_K && tdt == dt) {
        const std::string& name = t.gguf_name;
        if (name == "token_embd.weight" || name == "output.weight") tdt = gb::DType::kQ6_K;
        else if (is_attn_v(name)) tdt = s.heads / s.kv_heads >= 4 ? gb::DType::kQ4_K : gb::DType::kQ3_K;
        else if (name.find("ffn_down") != std::string::npos || name.find("attn_output.weight") != std::string::npos)
          tdt = gb::DType::kQ3_K;
      } else if (dt == gb::DType::kIQ4_XS && tdt == dt) {
        const std::string& name = t.gguf_name;
        if (name == "token_embd.weight" || name == "output.weight") tdt = gb::DType::kQ6_K;
        else if (is_attn_v(name) && s.heads / s.kv_heads >= 4) tdt = gb::DType::kQ5_K;
        else if (name.find("ffn_down") != std::string::npos && i_ffn_down++ < n_ffn_down / 8) tdt = gb::DType::kQ5_K;
      }
      // Super-blocks need rows of 256k elements; llama.cpp then falls back as here: Q3_K to Q4_0,
      // Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, IQ4_XS to IQ4_NL, Q2_K to Q4_0.
      if (gb::dtype_info(tdt).block_elems == 256 && cols % 256 != 0) {
        tdt = tdt == gb::DType::kQ3_K || tdt == gb::DType::kQ2_K ? gb::DType::kQ4_0
              : tdt == gb::DType::kQ4_K                          ? gb::DType::kQ5_0
              : tdt == gb::DType::kQ5_K                          ? gb::DType::kQ5_1
              : tdt == gb::DType::kIQ4_XS                        ? gb::DType::kIQ4_NL
                                                                 : gb::DType::kQ8_0;
        ++n_k_fallback;
      }
      const int64_t rb = gb::row_bytes(tdt, cols);
      bufs[i].resize(rows * rb);
      std::vector<float> shifted;
      const float* vals = t.values.data();
      if (t.gguf_add != 0.0f) {
        shifted = t.values;
        for (auto& v : shifted) v += t.gguf_add;
        vals = shifted.data();
      }
      for (int64_t r = 0; r < rows; ++r) (void)gb::convert_row(vals + r * cols, cols, tdt, bufs[i].data() + r * rb);
      g.add_tensor(t.gguf_name, tdt, t.gguf_shape.empty() ? t.shape : t.gguf_shape, bufs[i].data(), bufs[i].size());
    }
    const std::string path = (fs::path(out) / "gguf" / ("model-" + type + ".gguf")).string();
    const auto st = g.write(path);
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    std::printf("wrote %s\n", path.c_str());
    if (n_k_fallback > 0)
      std::printf("  %lld tensors with rows not a multiple of 256 written as q4_0 / q5_0 / q5_1 / q8_0\n",
                  static_cast<long long>(n_k_fallback));
  }
  return 0;
}

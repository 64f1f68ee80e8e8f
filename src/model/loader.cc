// load_model: Hugging Face directories and GGUF files → ModelConfig + ModelWeights, with every
// tensor's presence, shape and dtype checked before the model can run.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/fp16.h"
#include "core/mapped_file.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/model.h"

namespace gb {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The tensors of a model by name, whichever file (or shard) holds them.
struct TensorSet {
  std::map<std::string, TensorView> tensors;
  std::string where;          // for messages: the file or directory
  bool quantized_ok = false;  // GGUF may carry block-quantized matrices; safetensors may not

  const TensorView* find(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

// Tensor names of the two formats for the same role.
struct Names {
  bool gguf;
  std::string layer(int l, const char* hf, const char* gg) const {
    return gguf ? "blk." + std::to_string(l) + "." + gg : "model.layers." + std::to_string(l) + "." + hf;
  }
  std::string embd() const { return gguf ? "token_embd.weight" : "model.embed_tokens.weight"; }
  std::string out_norm() const { return gguf ? "output_norm.weight" : "model.norm.weight"; }
  std::string output() const { return gguf ? "output.weight" : "lm_head.weight"; }
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Binder {
 public:
  Binder(const TensorSet& ts, std::vector<std::vector<float>>* store) : ts_(ts), store_(store) {}

  Result<const TensorView*> get(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView* t = ts_.find(name);
    if (t == nullptr) return Status::error(ts_.where + ": tensor '" + name + "' is missing");
    if (t->shape != shape) {
      return Status::error(ts_.where + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " +
                           shape_str(shape));
    }
    return t;
  }

  Result<ops::Weight> matrix(const std::string& name, int64_t rows, int64_t cols) {
    GB_ASSIGN_OR_RETURN(const TensorView* t, get(name, {rows, cols}));
    const bool plain = t->dtype == DType::kF32 || t->dtype == DType::kF16 || t->dtype == DType::kBF16;
    if (!ops::matmul_supported(t->dtype) || (!plain && !ts_.quantized_ok)) {
      return Status::error(
          ts_.where + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t->dtype)) +
          ", which is not supported for weight matrices (f32, f16, bf16" +
          (ts_.quantized_ok ? ", q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs)" : ")"));
    }
    return ops::Weight{t->data, t->dtype, rows, cols};
  }

  // 1-D tensors (norm weights, biases) become f32 copies: tiny, and the loop then never converts.
  Result<const float*> vector(const std::string& name, int64_t n) {
    GB_ASSIGN_OR_RETURN(const TensorView* t, get(name, {n}));
    return vector_any_shape(name, t, n);
  }

  Result<const float*> vector_any_shape(const std::string& name, const TensorView* t, int64_t n) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) {
      switch (t->dtype) {
        case DType::kF32: std::memcpy(&v[i], t->data + 4 * i, 4); break;
        case DType::kF16:
        case DType::kBF16: {
          uint16_t h;
          std::memcpy(&h, t->data + 2 * i, 2);
          v[i] = t->dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
          break;
        }
        default:
          return Status::error(ts_.where + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t->dtype)) +
                               ", expected f32, f16 or bf16");
      }
    }
    store_->push_back(std::move(v));
    return store_->back().data();
  }

  // A small tensor of any of `shapes` (e.g. HF's conv1d [C, 1, K] or GGUF's squeezed [C, K]) as
  // an f32 copy of numel values that the caller may transform in place.
  Result<float*> copy_f32(const std::string& name, const std::vector<std::vector<int64_t>>& shapes, int64_t numel) {
    const TensorView* t = ts_.find(name);
    if (t == nullptr) return Status::error(ts_.where + ": tensor '" + name + "' is missing");
    bool ok = false;
    std::string expected;
    for (const auto& s : shapes) {
      ok = ok || t->shape == s;
      expected += (expected.empty() ? "" : " or ") + shape_str(s);
    }
    if (!ok) {
      return Status::error(ts_.where + ": tensor '" + name + "' has shape " + shape_str(t->shape) + ", expected " +
                           expected);
    }
    GB_ASSIGN_OR_RETURN(const float* v, vector_any_shape(name, t, numel));
    return const_cast<float*>(v);
  }

  Result<const float*> optional_vector(const std::string& name, int64_t n, bool wanted) {
    if (!wanted) return static_cast<const float*>(nullptr);
    return vector(name, n);
  }

 private:
  const TensorSet& ts_;
  std::vector<std::vector<float>>* store_;
};

Status bind_weights(const ModelConfig& c, const TensorSet& ts, bool gguf, ModelWeights* w,
                    std::vector<std::vector<float>>* store) {
  Binder b(ts, store);
  const Names n{gguf};
  GB_ASSIGN_OR_RETURN(w->token_embd, b.matrix(n.embd(), c.vocab, c.n_embd));
  GB_ASSIGN_OR_RETURN(w->output_norm, b.vector(n.out_norm(), c.n_embd));
  if (c.tied_embeddings) {
    w->output = w->token_embd;
  } else {
    GB_ASSIGN_OR_RETURN(w->output, b.matrix(n.output(), c.vocab, c.n_embd));
  }
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  w->layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w->layers[l];
    GB_ASSIGN_OR_RETURN(L.attn_norm, b.vector(n.layer(l, "input_layernorm.weight", "attn_norm.weight"), c.n_embd));
    GB_ASSIGN_OR_RETURN(L.wq, b.matrix(n.layer(l, "self_attn.q_proj.weight", "attn_q.weight"), qd, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.wk, b.matrix(n.layer(l, "self_attn.k_proj.weight", "attn_k.weight"), kvd, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.wv, b.matrix(n.layer(l, "self_attn.v_proj.weight", "attn_v.weight"), kvd, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.wo, b.matrix(n.layer(l, "self_attn.o_proj.weight", "attn_output.weight"), c.n_embd, qd));
    GB_ASSIGN_OR_RETURN(L.bq, b.optional_vector(n.layer(l, "self_attn.q_proj.bias", "attn_q.bias"), qd, c.qkv_bias));
    GB_ASSIGN_OR_RETURN(L.bk, b.optional_vector(n.layer(l, "self_attn.k_proj.bias", "attn_k.bias"), kvd, c.qkv_bias));
    GB_ASSIGN_OR_RETURN(L.bv, b.optional_vector(n.layer(l, "self_attn.v_proj.bias", "attn_v.bias"), kvd, c.qkv_bias));
    GB_ASSIGN_OR_RETURN(L.bo,
                        b.optional_vector(n.layer(l, "self_attn.o_proj.bias", "attn_output.bias"), c.n_embd, c.o_bias));
    GB_ASSIGN_OR_RETURN(L.q_norm, b.optional_vector(n.layer(l, "self_attn.q_norm.weight", "attn_q_norm.weight"),
                                                    c.head_dim, c.qk_norm));
    GB_ASSIGN_OR_RETURN(L.k_norm, b.optional_vector(n.layer(l, "self_attn.k_norm.weight", "attn_k_norm.weight"),
                                                    c.head_dim, c.qk_norm));
    GB_ASSIGN_OR_RETURN(L.ffn_norm,
                        b.vector(n.layer(l, "post_attention_layernorm.weight", "ffn_norm.weight"), c.n_embd));
    GB_ASSIGN_OR_RETURN(L.w_gate, b.matrix(n.layer(l, "mlp.gate_proj.weight", "ffn_gate.weight"), c.n_ff, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.w_up, b.matrix(n.layer(l, "mlp.up_proj.weight", "ffn_up.weight"), c.n_ff, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.w_down, b.matrix(n.layer(l, "mlp.down_proj.weight", "ffn_down.weight"), c.n_embd, c.n_ff));
  }
  return Status::ok();
}

// Qwen3.5 (text part): Gated DeltaNet layers and gated full-attention layers as layer_kinds says.
// Hugging Face norms compute x̂·(1 + w) and are stored as w: 1 is added here, so the loop runs one
// RMSNorm for both formats (GGUF stores 1 + w already); the delta net's own norm is x̂·w in both.
// A_log becomes −exp(A_log) as in GGUF's ssm_a. The vision tower and MTP layers are not loaded.
Status bind_qwen35_weights(const ModelConfig& c, const TensorSet& ts, bool gguf, ModelWeights* w,
                           std::vector<std::vector<float>>* store) {
  Binder b(ts, store);
  const std::string hp =
      ts.find("model.language_model.embed_tokens.weight") != nullptr ? "model.language_model." : "model.";
  auto top = [&](const char* hf, const char* gg) { return gguf ? std::string(gg) : hp + hf; };
  auto lname = [&](int l, const char* hf, const char* gg) {
    return gguf ? "blk." + std::to_string(l) + "." + gg : hp + "layers." + std::to_string(l) + "." + hf;
  };
  auto norm = [&](const std::string& name, int64_t n) -> Result<const float*> {
    GB_ASSIGN_OR_RETURN(float* v, b.copy_f32(name, {{n}}, n));
    if (!gguf) {
      for (int64_t i = 0; i < n; ++i) v[i] += 1.0f;
    }
    return static_cast<const float*>(v);
  };
  GB_ASSIGN_OR_RETURN(w->token_embd, b.matrix(top("embed_tokens.weight", "token_embd.weight"), c.vocab, c.n_embd));
  GB_ASSIGN_OR_RETURN(w->output_norm, norm(top("norm.weight", "output_norm.weight"), c.n_embd));
  if (c.tied_embeddings) {
    w->output = w->token_embd;
  } else {
    GB_ASSIGN_OR_RETURN(w->output, b.matrix(gguf ? "output.weight" : "lm_head.weight", c.vocab, c.n_embd));
  }
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
  const int64_t conv = c.lin_conv_dim(), vd = c.lin_value_dim(), nv = c.lin_v_heads, K = c.lin_conv_kernel;
  w->layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w->layers[l];
    GB_ASSIGN_OR_RETURN(L.attn_norm, norm(lname(l, "input_layernorm.weight", "attn_norm.weight"), c.n_embd));
    GB_ASSIGN_OR_RETURN(L.ffn_norm,
                        norm(lname(l, "post_attention_layernorm.weight", "post_attention_norm.weight"), c.n_embd));
    GB_ASSIGN_OR_RETURN(L.w_gate, b.matrix(lname(l, "mlp.gate_proj.weight", "ffn_gate.weight"), c.n_ff, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.w_up, b.matrix(lname(l, "mlp.up_proj.weight", "ffn_up.weight"), c.n_ff, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.w_down, b.matrix(lname(l, "mlp.down_proj.weight", "ffn_down.weight"), c.n_embd, c.n_ff));
    if (c.layer_kinds[l] == LayerKind::kAttention) {
      const int64_t q_rows = c.attn_output_gate ? 2 * qd : qd;
      GB_ASSIGN_OR_RETURN(L.wq, b.matrix(lname(l, "self_attn.q_proj.weight", "attn_q.weight"), q_rows, c.n_embd));
      GB_ASSIGN_OR_RETURN(L.wk, b.matrix(lname(l, "self_attn.k_proj.weight", "attn_k.weight"), kvd, c.n_embd));
      GB_ASSIGN_OR_RETURN(L.wv, b.matrix(lname(l, "self_attn.v_proj.weight", "attn_v.weight"), kvd, c.n_embd));
      GB_ASSIGN_OR_RETURN(L.wo, b.matrix(lname(l, "self_attn.o_proj.weight", "attn_output.weight"), c.n_embd, qd));
      GB_ASSIGN_OR_RETURN(L.q_norm, norm(lname(l, "self_attn.q_norm.weight", "attn_q_norm.weight"), hd));
      GB_ASSIGN_OR_RETURN(L.k_norm, norm(lname(l, "self_attn.k_norm.weight", "attn_k_norm.weight"), hd));
      continue;
    }
    GB_ASSIGN_OR_RETURN(L.lin_qkv,
                        b.matrix(lname(l, "linear_attn.in_proj_qkv.weight", "attn_qkv.weight"), conv, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.lin_z, b.matrix(lname(l, "linear_attn.in_proj_z.weight", "attn_gate.weight"), vd, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.lin_b, b.matrix(lname(l, "linear_attn.in_proj_b.weight", "ssm_beta.weight"), nv, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.lin_a, b.matrix(lname(l, "linear_attn.in_proj_a.weight", "ssm_alpha.weight"), nv, c.n_embd));
    GB_ASSIGN_OR_RETURN(L.lin_out, b.matrix(lname(l, "linear_attn.out_proj.weight", "ssm_out.weight"), c.n_embd, vd));
    GB_ASSIGN_OR_RETURN(float* cw, b.copy_f32(lname(l, "linear_attn.conv1d.weight", "ssm_conv1d.weight"),
                                              {{conv, 1, K}, {conv, K}}, conv * K));
    L.lin_conv = cw;
    GB_ASSIGN_OR_RETURN(L.lin_dt_bias, b.vector(lname(l, "linear_attn.dt_bias", "ssm_dt.bias"), nv));
    GB_ASSIGN_OR_RETURN(float* a, b.copy_f32(lname(l, "linear_attn.A_log", "ssm_a"), {{nv}}, nv));
    if (!gguf) {
      for (int64_t h = 0; h < nv; ++h) a[h] = -std::exp(a[h]);
    }
    L.lin_a_neg = a;
    GB_ASSIGN_OR_RETURN(L.lin_norm, b.vector(lname(l, "linear_attn.norm.weight", "ssm_norm.weight"), c.lin_v_dim));
  }
  int64_t n_visual = 0, n_mtp = 0;
  for (const auto& [name, t] : ts.tensors) {
    n_visual += name.starts_with("model.visual.") || name.starts_with("visual.") || name.starts_with("v.");
    n_mtp += name.starts_with("mtp.") || name.find(".mtp.") != std::string::npos;
  }
  if (n_visual + n_mtp > 0) {
    std::fprintf(stderr, "glassbox: %s: text model only; skipping %lld vision tower and %lld MTP tensors\n",
                 ts.where.c_str(), static_cast<long long>(n_visual), static_cast<long long>(n_mtp));
  }
  return Status::ok();
}

Result<json> read_json(const std::string& path) {
  GB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::error(path + ": not valid JSON");
  return j;
}

Status add_safetensors(const std::string& path, TensorSet* ts, std::vector<std::shared_ptr<MappedFile>>* files) {
  GB_ASSIGN_OR_RETURN(SafetensorsFile f, read_safetensors(path));
  for (auto& t : f.tensors) {
    if (!files->empty() && files->back() == t.file) {
    } else if (t.file) {
      files->push_back(t.file);
    }
    std::string name = t.name;
    ts->tensors[name] = std::move(t);
  }
  return Status::ok();
}

struct Loaded {
  ModelConfig config;
  TensorSet tensors;
  std::vector<std::shared_ptr<MappedFile>> files;
  bool gguf = false;
};

Status load_hf(const std::string& dir, Loaded* out) {
  const std::string config_path = dir + "/config.json";
  if (!fs::exists(config_path)) return Status::error(dir + ": no config.json (not a Hugging Face model directory)");
  GB_ASSIGN_OR_RETURN(json config, read_json(config_path));
  json gen;
  const bool has_gen = fs::exists(dir + "/generation_config.json");
  if (has_gen) {
    GB_ASSIGN_OR_RETURN(gen, read_json(dir + "/generation_config.json"));
  }
  auto parsed = parse_hf_config(config, has_gen ? &gen : nullptr);
  if (!parsed.is_ok()) return Status::error(dir + "/" + parsed.message());
  out->config = std::move(parsed).value();

  out->tensors.where = dir;
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(single)) {
    out->tensors.where = single;
    GB_RETURN_IF_ERROR(add_safetensors(single, &out->tensors, &out->files));
  } else if (fs::exists(index)) {
    GB_ASSIGN_OR_RETURN(json idx, read_json(index));
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object()) {
      return Status::error(index + ": no 'weight_map' object");
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : idx["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return Status::error(index + ": weight_map entry for '" + name + "' is not a file name in the directory");
      }
      shards.insert(file.get<std::string>());
    }
    for (const auto& s : shards) GB_RETURN_IF_ERROR(add_safetensors(dir + "/" + s, &out->tensors, &out->files));
    for (const auto& [name, file] : idx["weight_map"].items()) {
      if (out->tensors.find(name) == nullptr) {
        return Status::error(dir + "/" + file.get<std::string>() + ": tensor '" + name +
                             "' listed in model.safetensors.index.json is missing");
      }
    }
  } else {
    return Status::error(dir + ": neither model.safetensors nor model.safetensors.index.json is present");
  }
  ModelConfig& c = out->config;
  if (!c.tied_embeddings_known) c.tied_embeddings = out->tensors.find("lm_head.weight") == nullptr;
  return Status::ok();
}

Status load_gguf(const std::string& path, Loaded* out) {
  GB_ASSIGN_OR_RETURN(GgufFile g, read_gguf(path));
  out->gguf = true;
  out->files.push_back(g.file);
  out->tensors.where = path;
  out->tensors.quantized_ok = true;
  for (auto& t : g.tensors) {
    std::string name = t.name;
    out->tensors.tensors[name] = std::move(t);
  }
  const TensorView* embd = out->tensors.find("token_embd.weight");
  if (embd == nullptr) return Status::error(path + ": tensor 'token_embd.weight' is missing");
  if (embd->shape.size() != 2) return Status::error(path + ": tensor 'token_embd.weight' is not a matrix");
  // llama3 rope scaling travels as a tensor of per-frequency divisors, not as metadata.
  std::vector<float> rope_freqs;
  const TensorView* rf = out->tensors.find("rope_freqs.weight");
  if (rf != nullptr) {
    if (rf->dtype != DType::kF32 || rf->shape.size() != 1 || rf->shape[0] == 0) {
      return Status::error(path + ": tensor 'rope_freqs.weight' must be a non-empty 1-D f32 tensor, found " +
                           std::string(dtype_name(rf->dtype)) + " " + rf->shape_str());
    }
    rope_freqs.resize(rf->shape[0]);
    std::memcpy(rope_freqs.data(), rf->data, rope_freqs.size() * 4);
  }
  auto parsed = parse_gguf_config(g.metadata, embd->shape[0], rf ? &rope_freqs : nullptr);
  if (!parsed.is_ok()) return parsed.status().with_context(path);
  out->config = std::move(parsed).value();
  ModelConfig& c = out->config;
  c.tied_embeddings = out->tensors.find("output.weight") == nullptr;
  c.qkv_bias = c.arch == Arch::kQwen2 || out->tensors.find("blk.0.attn_q.bias") != nullptr;
  c.o_bias = out->tensors.find("blk.0.attn_output.bias") != nullptr;
  return Status::ok();
}

// Whether path starts with the GGUF magic; an error when it is not a regular file (a FIFO would
// block the read forever).
Result<bool> is_gguf_file(const std::string& path) {
  struct stat st {};
  GB_ASSIGN_OR_RETURN(const int fd, open_regular(path, &st));
  char magic[4] = {};
  const ssize_t n = ::read(fd, magic, 4);
  ::close(fd);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

// The file bytes of a packed matrix are read rarely from now on (a tied embedding's rows, a
// variant's hash check, kernels without a packed path): their in-memory copy goes back and any
// reads come from the page cache, so a packed model holds its matrices once (also while loading:
// each is released as soon as it is packed).
void release_source(const ops::Weight& m, const std::vector<std::shared_ptr<MappedFile>>& files) {
  const size_t n = static_cast<size_t>(m.rows * row_bytes(m.dtype, m.cols));
  for (const auto& f : files) {
    if (m.data >= f->data() && m.data + n <= f->data() + f->size()) {
      f->release(m.data, n);
      return;
    }
  }
}

// Load-time conversions of every matrix (embedding included): Q4_1 / Q5_1 get their blocks'
// offsets copied out (ops::with_block_offsets, which matmul reads) and, with `plain_to_q8`, every
// f32/f16/bf16 matrix whose rows are whole Q8_0 blocks is rounded to Q8_0 as llama-quantize does
// (half the bytes of bf16 per decode step).
Status convert_matrices(const ModelConfig& c, bool plain_to_q8, ModelWeights* w, std::vector<ops::OwnedWeight>* store) {
  auto convert = [&](ops::Weight* m) -> Status {
    const bool plain = m->dtype == DType::kF32 || m->dtype == DType::kF16 || m->dtype == DType::kBF16;
    const bool offsets = m->dtype == DType::kQ4_1 || m->dtype == DType::kQ5_1;
    if (!offsets && !(plain_to_q8 && plain && m->cols % 32 == 0)) return Status::ok();
    GB_ASSIGN_OR_RETURN(ops::OwnedWeight o, offsets ? ops::with_block_offsets(*m) : ops::convert_to_q8(*m));
    store->push_back(std::move(o));
    *m = store->back().weight;  // points into bytes, which moving the vector keeps in place
    return Status::ok();
  };
  GB_RETURN_IF_ERROR(convert(&w->token_embd));
  if (c.tied_embeddings) {
    w->output = w->token_embd;
  } else {
    GB_RETURN_IF_ERROR(convert(&w->output));
  }
  for (LayerWeights& L : w->layers) {
    for (ops::Weight* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.lin_qkv, &L.lin_z, &L.lin_b,
                           &L.lin_a, &L.lin_out}) {
      if (m->data != nullptr) GB_RETURN_IF_ERROR(convert(m));
    }
  }
  return Status::ok();
}

// Every matrix the layer loop multiplies by, repacked for matmul where it has a layout for it
// (ops::pack_weight). The embedding table keeps only its rows (the tied lm_head, a copy of its
// view, gets the packed bytes).
// All of them in one huge-page buffer (decode streams it); without the memory the kernels read
// the row-major bytes. Each matrix's source bytes are released once it is packed.
std::unique_ptr<HugePages> pack_matrices(ModelWeights* w, const std::vector<std::shared_ptr<MappedFile>>& files) {
  std::vector<ops::Weight*> todo;
  auto consider = [&](ops::Weight* m) {
    if (m->data != nullptr && ops::packable(*m)) todo.push_back(m);
  };
  consider(&w->output);
  for (LayerWeights& L : w->layers) {
    for (ops::Weight* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.lin_qkv, &L.lin_z, &L.lin_b,
                           &L.lin_a, &L.lin_out})
      consider(m);
  }
  auto bytes = [](const ops::Weight& m) {
    return static_cast<size_t>((m.rows * row_bytes(m.dtype, m.cols) + 63) / 64 * 64);
  };
  size_t total = 0;
  for (const ops::Weight* m : todo) total += bytes(*m);
  std::unique_ptr<HugePages> mem = total > 0 ? HugePages::allocate(total) : nullptr;
  if (mem == nullptr) return nullptr;
  size_t off = 0;
  for (ops::Weight* m : todo) {
    ops::pack_weight(*m, mem->data() + off);
    m->packed = mem->data() + off;
    off += bytes(*m);
    release_source(*m, files);
  }
  mem->make_read_only();
  return mem;
}

}  // namespace

Model::Model(ModelConfig config, const LoadOptions& options)
    : config_(std::move(config)),
      own_pool_(options.pool ? nullptr : std::make_unique<ThreadPool>(options.n_threads)),
      pool_(options.pool ? options.pool : own_pool_.get()),
      acts_(config_, options.max_batch_tokens, pool_->size()) {}

Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& options) {
  if (options.max_batch_tokens <= 0) return Status::error("load_model: max_batch_tokens must be positive");
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::error(path + ": no such file or directory");
  Loaded loaded;
  std::string format;
  const bool directory = fs::is_directory(path, ec);
  bool gguf = false;
  if (!directory) {
    GB_ASSIGN_OR_RETURN(gguf, is_gguf_file(path));
  }
  if (directory) {
    format = "hf";
    GB_RETURN_IF_ERROR(load_hf(path, &loaded));
  } else if (gguf) {
    format = "gguf";
    GB_RETURN_IF_ERROR(load_gguf(path, &loaded));
  } else if (path.size() > 12 && path.ends_with(".safetensors")) {
    format = "hf";
    GB_RETURN_IF_ERROR(load_hf(fs::path(path).parent_path().string(), &loaded));
  } else {
    return Status::error(path + ": not a GGUF file, a .safetensors file or a Hugging Face model directory");
  }
  ModelWeights weights;
  std::vector<std::vector<float>> store;
  if (loaded.config.arch == Arch::kQwen35) {
    GB_RETURN_IF_ERROR(bind_qwen35_weights(loaded.config, loaded.tensors, loaded.gguf, &weights, &store));
  } else {
    GB_RETURN_IF_ERROR(bind_weights(loaded.config, loaded.tensors, loaded.gguf, &weights, &store));
  }
  const DType file_dtype = representative_dtype(weights);
  std::vector<ops::OwnedWeight> converted;
  GB_RETURN_IF_ERROR(convert_matrices(loaded.config, options.convert_to_q8, &weights, &converted));
  std::unique_ptr<HugePages> packed = options.pack_weights ? pack_matrices(&weights, loaded.files) : nullptr;
  std::unique_ptr<Model> m(new Model(std::move(loaded.config), options));
  m->weights_ = std::move(weights);
  m->f32_store_ = std::move(store);
  m->owned_weights_ = std::move(converted);
  m->packed_ = std::move(packed);
  m->files_ = std::move(loaded.files);
  m->format_ = format;
  m->file_dtype_ = file_dtype;
  return m;
}

}  // namespace gb

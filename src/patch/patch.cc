// Patch types, names, SHA-256, applying edits to tensor bytes and writing patched checkpoints.
#include "patch/patch.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/fp16.h"
#include "patch/patch_internal.h"

namespace gb::patch {

namespace fs = std::filesystem;

const char* edit_kind_name(EditKind k) {
  switch (k) {
    case EditKind::kLowRank: return "low_rank";
    case EditKind::kColumns: return "columns";
    case EditKind::kRows: return "rows";
    case EditKind::kSparse: return "sparse";
    case EditKind::kFull: return "full";
  }
  return "?";
}

std::string identity_sha256(const Patch& p) {
  if (!p.manifest_sha256.empty() || p.edits.empty()) return p.manifest_sha256;
  return p.edits.front().sha256;
}

const char* patch_source_name(PatchSource s) {
  switch (s) {
    case PatchSource::kArtifact: return "patch";
    case PatchSource::kPeft: return "peft";
    case PatchSource::kGgufLora: return "gguf-lora";
    case PatchSource::kCheckpoint: return "checkpoint";
  }
  return "?";
}

int64_t Edit::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Edit::stored_bytes() const {
  if (kind == EditKind::kLowRank) {
    return static_cast<int64_t>(a.size() + b.size()) * dtype_info(factor_dtype).block_bytes;
  }
  return static_cast<int64_t>(indices.size()) * 8 + static_cast<int64_t>(values.size());
}

const Edit* Patch::find(const std::string& tensor) const {
  for (const Edit& e : edits) {
    if (e.tensor == tensor) return &e;
  }
  return nullptr;
}

int64_t Patch::stored_bytes() const {
  int64_t n = 0;
  for (const Edit& e : edits) n += e.stored_bytes();
  return n;
}

// ---- names ----

namespace {

struct NamePair {
  const char* hf;    // after "layers.N."
  const char* gguf;  // after "blk.N."
  Proj proj;
};
constexpr NamePair kLayerNames[] = {
    {"self_attn.q_proj.weight", "attn_q.weight", Proj::kQ},
    {"self_attn.k_proj.weight", "attn_k.weight", Proj::kK},
    {"self_attn.v_proj.weight", "attn_v.weight", Proj::kV},
    {"self_attn.o_proj.weight", "attn_output.weight", Proj::kO},
    {"mlp.gate_proj.weight", "ffn_gate.weight", Proj::kGate},
    {"mlp.up_proj.weight", "ffn_up.weight", Proj::kUp},
    {"mlp.down_proj.weight", "ffn_down.weight", Proj::kDown},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", Proj::kLinQkv},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", Proj::kLinZ},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", Proj::kLinB},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", Proj::kLinA},
    {"linear_attn.out_proj.weight", "ssm_out.weight", Proj::kLinOut},
};

// "N.rest" -> N and rest; false unless N is a small decimal number.
bool split_layer(const std::string& s, int* layer, std::string* rest) {
  size_t i = 0;
  int n = 0;
  while (i < s.size() && i < 6 && s[i] >= '0' && s[i] <= '9') n = n * 10 + (s[i++] - '0');
  if (i == 0 || i >= s.size() || s[i] != '.') return false;
  *layer = n;
  *rest = s.substr(i + 1);
  return true;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string hf_layer_prefix(const std::string& name) {
  if (name.starts_with("model.language_model.")) return "model.language_model.";
  if (name.starts_with("model.")) return "model.";
  return "";
}

std::string hf_name_from_gguf(const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (!g.starts_with("blk.")) return "";
  int layer;
  std::string rest;
  if (!split_layer(g.substr(4), &layer, &rest)) return "";
  for (const auto& p : kLayerNames) {
    if (rest == p.gguf) return "model.layers." + std::to_string(layer) + "." + p.hf;
  }
  return "";
}

std::string gguf_name_from_hf(const std::string& h) {
  if (h == "model.embed_tokens.weight" || h == "model.language_model.embed_tokens.weight") return "token_embd.weight";
  if (h == "lm_head.weight") return "output.weight";
  const std::string prefix = hf_layer_prefix(h);
  if (prefix.empty() || !h.substr(prefix.size()).starts_with("layers.")) return "";
  int layer;
  std::string rest;
  if (!split_layer(h.substr(prefix.size() + 7), &layer, &rest)) return "";
  for (const auto& p : kLayerNames) {
    if (rest == p.hf) return "blk." + std::to_string(layer) + "." + p.gguf;
  }
  return "";
}

Result<Target> target_of(const std::string& tensor) {
  const std::string g = tensor.starts_with("blk.") || tensor == "token_embd.weight" || tensor == "output.weight"
                            ? tensor
                            : gguf_name_from_hf(tensor);
  if (g == "token_embd.weight") return Target{-1, Proj::kEmbed};
  if (g == "output.weight") return Target{-1, Proj::kOutput};
  int layer;
  std::string rest;
  if (g.starts_with("blk.") && split_layer(g.substr(4), &layer, &rest)) {
    for (const auto& p : kLayerNames) {
      if (rest == p.gguf) return Target{layer, p.proj};
    }
  }
  return Status::error("tensor '" + tensor + "' is not a weight matrix Glassbox can patch while serving");
}

// ---- SHA-256 ----

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }
void Sha256::update(const void* data, size_t n) { EVP_DigestUpdate(ctx_, data, n); }
std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_, digest, &len);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

Result<std::string> sha256_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 0) return sha256_hex("", 0);
  GB_ASSIGN_OR_RETURN(auto m, MappedFile::open(path));
  return sha256_hex(m->data(), m->size());
}

// ---- applying edits ----

namespace {

double load_elem(DType t, const uint8_t* p) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return t == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    default: return 0;
  }
}

void store_elem(DType t, double v, uint8_t* p) {
  const float f = static_cast<float>(v);
  if (t == DType::kF32) {
    std::memcpy(p, &f, 4);
  } else {
    const uint16_t h = t == DType::kF16 ? f32_to_f16(f) : f32_to_bf16(f);
    std::memcpy(p, &h, 2);
  }
}

}  // namespace

Status apply_edit(const Edit& e, uint8_t* data, size_t nbytes) {
  const int64_t es = dtype_info(e.dtype).block_bytes;
  if (dtype_info(e.dtype).block_elems != 1) {
    return Status::error(e.tensor + ": cannot patch a block-quantized tensor (" + std::string(dtype_name(e.dtype)) +
                         ")");
  }
  if (static_cast<int64_t>(nbytes) != e.numel() * es) {
    return Status::error(e.tensor + ": the base tensor has " + std::to_string(nbytes) + " bytes, the edit expects " +
                         std::to_string(e.numel() * es));
  }
  const int64_t rows = e.rows(), cols = e.cols(), k = static_cast<int64_t>(e.indices.size());
  // The loaders check all of this; an Edit built elsewhere gets an error, not a wild write.
  const bool matrix_kind = e.kind == EditKind::kColumns || e.kind == EditKind::kRows || e.kind == EditKind::kLowRank;
  if (matrix_kind && e.shape.size() != 2)
    return Status::error(e.tensor + ": a " + edit_kind_name(e.kind) + " edit needs a 2-D tensor");
  int64_t want_values = 0, limit = 0;
  switch (e.kind) {
    case EditKind::kFull: want_values = e.numel() * es; break;
    case EditKind::kSparse: want_values = k * es, limit = e.numel(); break;
    case EditKind::kRows: want_values = k * cols * es, limit = rows; break;
    case EditKind::kColumns: want_values = rows * k * es, limit = cols; break;
    case EditKind::kLowRank:
      if (e.rank <= 0 || static_cast<int64_t>(e.a.size()) != e.rank * cols ||
          static_cast<int64_t>(e.b.size()) != rows * e.rank) {
        return Status::error(e.tensor + ": low-rank factors do not match rank " + std::to_string(e.rank) +
                             " and shape " + shape_string(e.shape));
      }
      break;
  }
  if (e.kind != EditKind::kLowRank && static_cast<int64_t>(e.values.size()) != want_values) {
    return Status::error(e.tensor + ": the edit has " + std::to_string(e.values.size()) +
                         " bytes of values, expected " + std::to_string(want_values));
  }
  for (int64_t i = 0; e.kind != EditKind::kFull && e.kind != EditKind::kLowRank && i < k; ++i) {
    if (e.indices[i] < 0 || e.indices[i] >= limit) {
      return Status::error(e.tensor + ": index " + std::to_string(e.indices[i]) + " is out of range");
    }
  }
  switch (e.kind) {
    case EditKind::kFull: std::memcpy(data, e.values.data(), nbytes); break;
    case EditKind::kSparse:
      for (int64_t i = 0; i < k; ++i) std::memcpy(data + e.indices[i] * es, e.values.data() + i * es, es);
      break;
    case EditKind::kRows:
      for (int64_t i = 0; i < k; ++i) {
        std::memcpy(data + e.indices[i] * cols * es, e.values.data() + i * cols * es, cols * es);
      }
      break;
    case EditKind::kColumns:
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < k; ++i) {
          std::memcpy(data + (r * cols + e.indices[i]) * es, e.values.data() + (r * k + i) * es, es);
        }
      }
      break;
    case EditKind::kLowRank: {
      if (e.dtype != DType::kF32 && e.dtype != DType::kF16 && e.dtype != DType::kBF16) {
        return Status::error(e.tensor + ": a low-rank delta needs an f32, f16 or bf16 tensor, found " +
                             std::string(dtype_name(e.dtype)));
      }
      std::vector<double> row(cols);
      for (int64_t r = 0; r < rows; ++r) {
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t j = 0; j < e.rank; ++j) {
          const double bj = e.b[r * e.rank + j];
          const float* aj = e.a.data() + j * cols;
          for (int64_t c = 0; c < cols; ++c) row[c] += bj * aj[c];
        }
        uint8_t* w = data + r * cols * es;
        for (int64_t c = 0; c < cols; ++c) {
          store_elem(e.dtype, load_elem(e.dtype, w + c * es) + static_cast<double>(e.scale) * row[c], w + c * es);
        }
      }
      break;
    }
  }
  return Status::ok();
}

// ---- checkpoints ----

Result<Checkpoint> open_checkpoint(const std::string& dir) {
  Checkpoint ck;
  ck.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::error(dir + ": not a directory (expected a Hugging Face checkpoint)");
  std::vector<std::string> names;
  if (fs::exists(dir + "/model.safetensors", ec)) {
    names.push_back("model.safetensors");
  } else if (fs::exists(dir + "/model.safetensors.index.json", ec)) {
    const std::string index = dir + "/model.safetensors.index.json";
    GB_ASSIGN_OR_RETURN(std::string text, read_file(index));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return Status::error(index + ": not JSON with a 'weight_map' object");
    }
    std::set<std::string> shards;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos ||
          file.get<std::string>().empty()) {
        return Status::error(index + ": weight_map entry for '" + tensor + "' is not a file name in the directory");
      }
      shards.insert(file.get<std::string>());
    }
    names.assign(shards.begin(), shards.end());
  } else {
    return Status::error(dir + ": neither model.safetensors nor model.safetensors.index.json is present");
  }
  ck.files.reserve(names.size());
  for (const auto& n : names) {
    CheckpointFile f;
    f.name = n;
    GB_ASSIGN_OR_RETURN(f.map, MappedFile::open(dir + "/" + n));
    GB_ASSIGN_OR_RETURN(f.st, parse_safetensors(f.map));
    uint64_t hl;
    std::memcpy(&hl, f.map->data(), 8);
    f.header_end = 8 + hl;
    ck.files.push_back(std::move(f));
  }
  for (size_t i = 0; i < ck.files.size(); ++i) {
    for (const TensorView& t : ck.files[i].st.tensors) {
      if (!ck.tensors.emplace(t.name, std::make_pair(i, &t)).second) {
        return Status::error(dir + ": tensor '" + t.name + "' appears in more than one file");
      }
    }
  }
  return ck;
}

std::vector<std::string> other_files(const Checkpoint& ck) {
  std::set<std::string> st;
  for (const auto& f : ck.files) st.insert(f.name);
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(ck.dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string n = entry.path().filename().string();
    if (!st.count(n)) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// One tensor's bytes with its edit applied.
Status emit_tensor(const TensorView& t, const Edit* e, const Sink& sink) {
  if (e == nullptr) return sink(t.data, t.nbytes);
  if (e->dtype != t.dtype || e->shape != t.shape) {
    return Status::error("tensor '" + t.name + "' is " + std::string(dtype_name(t.dtype)) + " " + t.shape_str() +
                         " in the base, but the patch edits it as " + std::string(dtype_name(e->dtype)) + " " +
                         shape_string(e->shape));
  }
  std::vector<uint8_t> buf(t.data, t.data + t.nbytes);
  GB_RETURN_IF_ERROR(apply_edit(*e, buf.data(), buf.size()));
  return sink(buf.data(), buf.size());
}

}  // namespace

Status emit_file(const CheckpointFile& f, const std::string& header, const std::map<std::string, const Edit*>& edits,
                 const Sink& sink) {
  const uint8_t* base = f.map->data();
  auto edit_of = [&](const std::string& name) -> const Edit* {
    auto it = edits.find(name);
    return it == edits.end() ? nullptr : it->second;
  };
  if (header.empty()) {
    // The base layout: every byte as in the base file except the edited tensors'.
    std::vector<const TensorView*> order;
    for (const TensorView& t : f.st.tensors) {
      if (edit_of(t.name) != nullptr) order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
    const uint8_t* at = base;
    for (const TensorView* t : order) {
      GB_RETURN_IF_ERROR(sink(at, static_cast<size_t>(t->data - at)));
      GB_RETURN_IF_ERROR(emit_tensor(*t, edit_of(t->name), sink));
      at = t->data + t->nbytes;
    }
    return sink(at, static_cast<size_t>(base + f.map->size() - at));
  }
  // A header of the edited file: its layout, the base's tensors (same names, dtypes and shapes).
  nlohmann::json h = nlohmann::json::parse(header, nullptr, false);
  if (h.is_discarded() || !h.is_object()) return Status::error(f.name + ": the patch's header is not a JSON object");
  struct Slot {
    uint64_t begin, end;
    const TensorView* t;
  };
  std::vector<Slot> slots;
  std::map<std::string, const TensorView*> by_name;
  for (const TensorView& t : f.st.tensors) by_name[t.name] = &t;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    auto it = by_name.find(name);
    if (it == by_name.end())
      return Status::error(f.name + ": the patch's header names tensor '" + name +
                           "', which the base file does not have");
    if (!v.is_object() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2 || !v["data_offsets"][0].is_number_unsigned() ||
        !v["data_offsets"][1].is_number_unsigned()) {
      return Status::error(f.name + ": the patch's header entry for '" + name + "' has no valid data_offsets");
    }
    const uint64_t b = v["data_offsets"][0].get<uint64_t>(), e = v["data_offsets"][1].get<uint64_t>();
    if (e < b || e - b != it->second->nbytes) {
      return Status::error(f.name + ": the patch's header gives '" + name + "' " + std::to_string(e - b) +
                           " bytes, the base tensor has " + std::to_string(it->second->nbytes));
    }
    slots.push_back({b, e, it->second});
  }
  if (slots.size() != f.st.tensors.size()) {
    return Status::error(f.name + ": the patch's header does not list every tensor of the base file");
  }
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.begin < b.begin; });
  const uint64_t hl = header.size();
  GB_RETURN_IF_ERROR(sink(reinterpret_cast<const uint8_t*>(&hl), 8));
  GB_RETURN_IF_ERROR(sink(reinterpret_cast<const uint8_t*>(header.data()), header.size()));
  uint64_t at = 0;
  static const uint8_t kZeros[64] = {};
  for (const Slot& s : slots) {
    if (s.begin < at) return Status::error(f.name + ": the patch's header has overlapping tensors");
    for (; at < s.begin; at += std::min<uint64_t>(64, s.begin - at)) {
      GB_RETURN_IF_ERROR(sink(kZeros, std::min<uint64_t>(64, s.begin - at)));
    }
    GB_RETURN_IF_ERROR(emit_tensor(*s.t, edit_of(s.t->name), sink));
    at = s.end;
  }
  return Status::ok();
}

// ---- apply / verify ----

namespace {

Status copy_file(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return Status::error("cannot copy " + from + " to " + to + ": " + ec.message());
  return Status::ok();
}

Status prepare_out_dir(const std::string& out_dir, const std::string& base_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    if (!fs::is_directory(out_dir, ec)) return Status::error(out_dir + ": exists and is not a directory");
    if (!fs::is_empty(out_dir, ec)) return Status::error(out_dir + ": exists and is not empty (refusing to overwrite)");
    if (fs::equivalent(out_dir, base_dir, ec)) return Status::error(out_dir + ": is the base directory");
  }
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error("cannot create " + out_dir + ": " + ec.message());
  return Status::ok();
}

}  // namespace

Status verify_patch(const Patch& patch, const std::string& base_dir) {
  GB_ASSIGN_OR_RETURN(Checkpoint ck, open_checkpoint(base_dir));
  for (const auto& [name, want] : patch.base_tensors) {
    const TensorView* t = ck.find(name);
    if (t == nullptr) return Status::error(base_dir + ": the patch edits tensor '" + name + "', which the base lacks");
    const std::string got = sha256_hex(t->data, t->nbytes);
    if (got != want) {
      return Status::error(base_dir + ": base tensor '" + name + "' has SHA-256 " + got + ", the patch's manifest (" +
                           patch.path + "/manifest.json) expects " + want + " (a different base model?)");
    }
  }
  for (const Edit& e : patch.edits) {
    const TensorView* t = ck.find(e.tensor);
    if (t == nullptr)
      return Status::error(base_dir + ": the patch edits tensor '" + e.tensor + "', which the base lacks");
    // An adapter's delta takes the base tensor's dtype; an artifact says which dtype it stores.
    const bool dtype_ok = patch.source != PatchSource::kArtifact || t->dtype == e.dtype;
    if (!dtype_ok || t->shape != e.shape) {
      return Status::error(base_dir + ": tensor '" + e.tensor + "' is " + std::string(dtype_name(t->dtype)) + " " +
                           t->shape_str() + ", the patch expects " +
                           (patch.source == PatchSource::kArtifact ? std::string(dtype_name(e.dtype)) + " " : "") +
                           shape_string(e.shape));
    }
  }
  for (const OutputFile& f : patch.files) {
    bool found = false;
    for (const auto& cf : ck.files) found = found || cf.name == f.name;
    if (!found) return Status::error(base_dir + ": the patch rewrites " + f.name + ", which the base does not have");
  }
  return Status::ok();
}

Status apply_patch(const std::string& base_dir, const Patch& patch, const std::string& out_dir) {
  for (const Edit& e : patch.edits) {
    if (e.gguf_rope_permuted) {
      return Status::error(patch.path + ": the LoRA for '" + e.tensor +
                           "' is in llama.cpp's permuted q/k row order (a llama GGUF adapter); it applies to a GGUF "
                           "base, not to a Hugging Face checkpoint");
    }
  }
  GB_RETURN_IF_ERROR(verify_patch(patch, base_dir));
  GB_ASSIGN_OR_RETURN(Checkpoint ck, open_checkpoint(base_dir));
  GB_RETURN_IF_ERROR(prepare_out_dir(out_dir, base_dir));
  // An adapter's low-rank deltas are merged in the base tensor's dtype.
  std::vector<Edit> local(patch.edits);
  for (Edit& e : local) {
    if (patch.source != PatchSource::kArtifact) e.dtype = ck.find(e.tensor)->dtype;
  }
  std::map<std::string, const Edit*> edits;
  for (const Edit& e : local) edits[e.tensor] = &e;
  for (const CheckpointFile& f : ck.files) {
    const OutputFile* of = nullptr;
    for (const OutputFile& o : patch.files) {
      if (o.name == f.name) of = &o;
    }
    const std::string path = out_dir + "/" + f.name;
    std::FILE* out = std::fopen(path.c_str(), "wb");
    if (out == nullptr) return Status::error("cannot create " + path + ": " + std::strerror(errno));
    Sha256 hash;
    Status st = emit_file(f, of ? of->header : std::string(), edits, [&](const uint8_t* p, size_t n) -> Status {
      hash.update(p, n);
      if (n > 0 && std::fwrite(p, 1, n, out) != n)
        return Status::error("cannot write " + path + ": " + std::strerror(errno));
      return Status::ok();
    });
    if (std::fclose(out) != 0 && st.is_ok()) st = Status::error("cannot write " + path + ": " + std::strerror(errno));
    if (st.is_ok() && of != nullptr) {
      const std::string got = hash.hex();
      if (got != of->sha256) {
        st = Status::error(path + ": the patched file's SHA-256 is " + got + ", the manifest expects " + of->sha256);
      }
    }
    if (!st.is_ok()) {
      std::error_code ec;
      fs::remove(path, ec);
      return st;
    }
  }
  for (const std::string& n : other_files(ck)) GB_RETURN_IF_ERROR(copy_file(base_dir + "/" + n, out_dir + "/" + n));
  return Status::ok();
}

}  // namespace gb::patch

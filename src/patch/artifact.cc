// The patch artifact: manifest.json + one safetensors file per edit. Reading checks every field,
// hash, shape and index; `diff_checkpoints` writes one and checks it by applying it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/fp16.h"
#include "formats/json_nesting.h"
#include "patch/patch.h"
#include "patch/patch_internal.h"

namespace gb::patch {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "glassbox-patch";
constexpr int kFormatVersion = 1;

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A file name inside the patch directory: no directories, no "..", printable.
bool is_plain_file_name(const std::string& s) {
  if (s.empty() || s.size() > 200 || s == "." || s == "..") return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

bool parse_kind(const std::string& s, EditKind* k) {
  for (EditKind c : {EditKind::kLowRank, EditKind::kColumns, EditKind::kRows, EditKind::kSparse, EditKind::kFull}) {
    if (s == edit_kind_name(c)) {
      *k = c;
      return true;
    }
  }
  return false;
}

bool parse_dtype(const std::string& s, DType* t) {
  for (DType c : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kI32, DType::kI64}) {
    if (s == dtype_name(c)) {
      *t = c;
      return true;
    }
  }
  return false;
}

// Field readers that name the manifest and the field on error.
struct Fields {
  std::string where;
  Result<std::string> str(const json& j, const char* key, bool required = true) const {
    if (!j.contains(key) || j[key].is_null()) {
      if (required) return Status::error(where + ": missing \"" + key + "\"");
      return std::string();
    }
    if (!j[key].is_string()) return Status::error(where + ": \"" + key + "\" must be a string");
    return j[key].get<std::string>();
  }
  Result<int64_t> int64(const json& j, const char* key) const {
    if (!j.contains(key)) return Status::error(where + ": missing \"" + key + "\"");
    if (!j[key].is_number_integer()) return Status::error(where + ": \"" + key + "\" must be an integer");
    return j[key].get<int64_t>();
  }
};

// A factor tensor widened to f32.
Result<std::vector<float>> widen(const TensorView& t, const std::string& where) {
  std::vector<float> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::kF32: std::memcpy(&out[i], t.data + 4 * i, 4); break;
      case DType::kF16:
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
        break;
      }
      default:
        return Status::error(where + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                             ", expected f32, f16 or bf16");
    }
  }
  return out;
}

// Reads and checks one edit's safetensors file into e (kind, dtype and shape already set).
Status read_edit_file(const std::string& path, Edit* e) {
  GB_ASSIGN_OR_RETURN(SafetensorsFile st, read_safetensors(path));
  std::map<std::string, const TensorView*> t;
  for (const auto& v : st.tensors) t[v.name] = &v;
  auto need = [&](const char* name) -> Result<const TensorView*> {
    auto it = t.find(name);
    if (it == t.end())
      return Status::error(path + ": no tensor '" + std::string(name) + "' (a " + edit_kind_name(e->kind) +
                           " edit needs it)");
    return it->second;
  };
  const int64_t es = dtype_info(e->dtype).block_bytes;
  const int64_t rows = e->rows(), cols = e->cols();
  if (e->kind == EditKind::kLowRank) {
    GB_ASSIGN_OR_RETURN(const TensorView* A, need("lora_A"));
    GB_ASSIGN_OR_RETURN(const TensorView* B, need("lora_B"));
    if (A->shape.size() != 2 || B->shape.size() != 2 || A->shape[1] != cols || B->shape[0] != rows ||
        A->shape[0] != B->shape[1] || A->shape[0] <= 0 || A->shape[0] != e->rank) {
      return Status::error(path + ": lora_A " + A->shape_str() + " and lora_B " + B->shape_str() +
                           " do not make a rank-" + std::to_string(e->rank) + " delta of a " + shape_string(e->shape) +
                           " tensor (A [r, cols], B [rows, r])");
    }
    if (A->dtype != B->dtype) return Status::error(path + ": lora_A and lora_B have different dtypes");
    e->factor_dtype = A->dtype;
    GB_ASSIGN_OR_RETURN(e->a, widen(*A, path));
    GB_ASSIGN_OR_RETURN(e->b, widen(*B, path));
    return Status::ok();
  }
  GB_ASSIGN_OR_RETURN(const TensorView* V, need("values"));
  if (V->dtype != e->dtype) {
    return Status::error(path + ": values are " + std::string(dtype_name(V->dtype)) + ", the tensor is " +
                         std::string(dtype_name(e->dtype)) + " (values must be stored in the tensor's dtype)");
  }
  int64_t limit = 0;
  std::vector<int64_t> want;
  if (e->kind != EditKind::kFull) {
    GB_ASSIGN_OR_RETURN(const TensorView* I, need("indices"));
    if (I->dtype != DType::kI64 || I->shape.size() != 1) {
      return Status::error(path + ": indices must be a 1-D i64 tensor, found " + std::string(dtype_name(I->dtype)) +
                           " " + I->shape_str());
    }
    const int64_t k = I->shape[0];
    e->indices.resize(k);
    if (k > 0) std::memcpy(e->indices.data(), I->data, k * 8);
    limit = e->kind == EditKind::kColumns ? cols : e->kind == EditKind::kRows ? rows : e->numel();
    for (int64_t i = 0; i < k; ++i) {
      if (e->indices[i] < 0 || e->indices[i] >= limit || (i > 0 && e->indices[i] <= e->indices[i - 1])) {
        return Status::error(path + ": index " + std::to_string(i) + " (" + std::to_string(e->indices[i]) +
                             ") is out of range [0, " + std::to_string(limit) + ") or not increasing");
      }
    }
    want = e->kind == EditKind::kColumns ? std::vector<int64_t>{rows, k}
           : e->kind == EditKind::kRows  ? std::vector<int64_t>{k, cols}
                                         : std::vector<int64_t>{k};
    e->weights_changed = e->kind == EditKind::kColumns ? rows * k : e->kind == EditKind::kRows ? k * cols : k;
  } else {
    want = e->shape;
    e->weights_changed = e->numel();
  }
  if (V->shape != want) {
    return Status::error(path + ": values have shape " + V->shape_str() + ", a " + edit_kind_name(e->kind) +
                         " edit of this tensor needs " + shape_string(want));
  }
  e->values.assign(V->data, V->data + V->nbytes);
  (void)es;
  return Status::ok();
}

}  // namespace

Result<Patch> load_artifact(const std::string& dir) {
  const std::string mpath = dir + "/manifest.json";
  GB_ASSIGN_OR_RETURN(std::string text, read_file(mpath));
  json m = json::parse(text, nullptr, false);
  if (m.is_discarded()) return Status::error(mpath + ": not valid JSON");
  if (json_nesting_exceeds(m))
    return Status::error(mpath + ": nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
  if (!m.is_object()) return Status::error(mpath + ": must be a JSON object");
  Fields F{mpath};
  Patch p;
  p.source = PatchSource::kArtifact;
  p.path = dir;
  p.manifest_sha256 = sha256_hex(text.data(), text.size());
  GB_ASSIGN_OR_RETURN(std::string format, F.str(m, "format"));
  if (format != kFormat)
    return Status::error(mpath + ": \"format\" is \"" + format + "\", expected \"" + kFormat + "\"");
  GB_ASSIGN_OR_RETURN(int64_t fv, F.int64(m, "format_version"));
  if (fv != kFormatVersion) {
    return Status::error(mpath + ": format_version " + std::to_string(fv) + " is not supported (this build reads " +
                         std::to_string(kFormatVersion) + ")");
  }
  GB_ASSIGN_OR_RETURN(p.name, F.str(m, "name"));
  GB_ASSIGN_OR_RETURN(p.version, F.str(m, "version"));
  GB_ASSIGN_OR_RETURN(p.description, F.str(m, "description", false));
  if (p.name.empty()) return Status::error(mpath + ": \"name\" is empty");
  if (!m.contains("base_model") || !m["base_model"].is_object()) {
    return Status::error(mpath + ": missing \"base_model\" object ({\"name\", \"tensors\"})");
  }
  const json& bm = m["base_model"];
  GB_ASSIGN_OR_RETURN(p.base_model, F.str(bm, "name", false));
  if (!bm.contains("tensors") || !bm["tensors"].is_object()) {
    return Status::error(mpath + ": \"base_model\" has no \"tensors\" object (tensor name -> SHA-256)");
  }
  for (const auto& [name, h] : bm["tensors"].items()) {
    if (!h.is_string() || !is_sha256(h.get<std::string>())) {
      return Status::error(mpath + ": base_model.tensors[\"" + name +
                           "\"] is not a SHA-256 (64 lower-case hex digits)");
    }
    p.base_tensors[name] = h.get<std::string>();
  }
  if (m.contains("files")) {
    if (!m["files"].is_array()) return Status::error(mpath + ": \"files\" must be an array");
    for (const json& f : m["files"]) {
      if (!f.is_object()) return Status::error(mpath + ": each of \"files\" must be an object");
      OutputFile o;
      GB_ASSIGN_OR_RETURN(o.name, F.str(f, "name"));
      GB_ASSIGN_OR_RETURN(o.sha256, F.str(f, "sha256"));
      GB_ASSIGN_OR_RETURN(o.header_file, F.str(f, "header", false));
      if (!is_plain_file_name(o.name) || !is_sha256(o.sha256)) {
        return Status::error(mpath + ": files entry '" + o.name + "' needs a plain file name and a SHA-256");
      }
      if (!o.header_file.empty()) {
        if (!is_plain_file_name(o.header_file)) {
          return Status::error(mpath + ": header '" + o.header_file + "' is not a file name in the patch directory");
        }
        GB_ASSIGN_OR_RETURN(o.header, read_file(dir + "/" + o.header_file));
      }
      p.files.push_back(std::move(o));
    }
  }
  if (m.contains("golden")) {
    const json& g = m["golden"];
    if (!g.is_array() || g.size() > 16) return Status::error(mpath + ": \"golden\" must be an array of at most 16");
    auto ids = [&](const json& v, size_t most, std::vector<int32_t>* out) {
      if (!v.is_array() || v.empty() || v.size() > most) return false;
      for (const json& t : v) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) return false;
        out->push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      return true;
    };
    for (size_t i = 0; i < g.size(); ++i) {
      GoldenPrompt gp;
      if (!g[i].is_object() || !ids(g[i].value("prompt", json()), 4096, &gp.prompt) ||
          !ids(g[i].value("greedy", json()), 256, &gp.greedy))
        return Status::error(mpath + ": golden[" + std::to_string(i) +
                             "] must be {\"prompt\": 1-4096 token ids, \"greedy\": 1-256 token ids}");
      p.golden.push_back(std::move(gp));
    }
  }
  if (!m.contains("edits") || !m["edits"].is_array()) return Status::error(mpath + ": missing \"edits\" array");
  for (size_t i = 0; i < m["edits"].size(); ++i) {
    const json& j = m["edits"][i];
    Fields E{mpath + ": edits[" + std::to_string(i) + "]"};
    if (!j.is_object()) return Status::error(E.where + " must be an object");
    Edit e;
    GB_ASSIGN_OR_RETURN(e.tensor, E.str(j, "tensor"));
    GB_ASSIGN_OR_RETURN(std::string kind, E.str(j, "kind"));
    if (!parse_kind(kind, &e.kind)) {
      return Status::error(E.where + ": kind \"" + kind + "\" is not one of low_rank, columns, rows, sparse, full");
    }
    GB_ASSIGN_OR_RETURN(e.file, E.str(j, "file"));
    GB_ASSIGN_OR_RETURN(e.sha256, E.str(j, "sha256"));
    GB_ASSIGN_OR_RETURN(std::string dt, E.str(j, "dtype"));
    if (!parse_dtype(dt, &e.dtype)) return Status::error(E.where + ": dtype \"" + dt + "\" is not supported");
    if (!j.contains("shape") || !j["shape"].is_array() || j["shape"].empty() || j["shape"].size() > 8) {
      return Status::error(E.where + ": \"shape\" must be an array of 1 to 8 dimensions");
    }
    int64_t numel = 1;
    for (const json& d : j["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > (int64_t{1} << 40) / numel) {
        return Status::error(E.where + ": \"shape\" has a dimension that is not a positive integer (or too large)");
      }
      e.shape.push_back(d.get<int64_t>());
      numel *= d.get<int64_t>();
    }
    const bool matrix_kind = e.kind == EditKind::kColumns || e.kind == EditKind::kRows || e.kind == EditKind::kLowRank;
    if (matrix_kind && e.shape.size() != 2) {
      return Status::error(E.where + ": a " + kind + " edit needs a 2-D tensor, the shape has " +
                           std::to_string(e.shape.size()) + " dimensions");
    }
    if (e.kind == EditKind::kLowRank) {
      GB_ASSIGN_OR_RETURN(e.rank, E.int64(j, "rank"));
      if (!j.contains("scale") || !j["scale"].is_number())
        return Status::error(E.where + ": low_rank needs a number \"scale\"");
      e.scale = j["scale"].get<float>();
      if (!std::isfinite(e.scale)) return Status::error(E.where + ": \"scale\" is not finite");
      if (e.dtype != DType::kF32 && e.dtype != DType::kF16 && e.dtype != DType::kBF16) {
        return Status::error(E.where + ": a low_rank edit needs an f32, f16 or bf16 tensor");
      }
    }
    if (!is_plain_file_name(e.file)) {
      return Status::error(E.where + ": file '" + e.file + "' is not a file name in the patch directory");
    }
    if (!is_sha256(e.sha256)) return Status::error(E.where + ": sha256 is not 64 lower-case hex digits");
    if (p.find(e.tensor) != nullptr) return Status::error(E.where + ": tensor '" + e.tensor + "' is edited twice");
    if (!p.base_tensors.count(e.tensor)) {
      return Status::error(E.where + ": tensor '" + e.tensor + "' has no SHA-256 in base_model.tensors");
    }
    const std::string fpath = dir + "/" + e.file;
    GB_ASSIGN_OR_RETURN(std::string got, sha256_file(fpath));
    if (got != e.sha256) {
      return Status::error(fpath + ": SHA-256 is " + got + ", the manifest says " + e.sha256 +
                           " (the file was changed or damaged)");
    }
    GB_RETURN_IF_ERROR(read_edit_file(fpath, &e));
    p.edits.push_back(std::move(e));
  }
  return p;
}

namespace {

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  if (!out) return Status::error("cannot write " + path);
  return Status::ok();
}

// The changed elements of two same-shape tensors, stored in the kind with the fewest bytes.
// The first pass only counts (changed elements, rows, columns), so a tensor that changed
// everywhere never builds an index list.
Edit make_edit(const TensorView& base, const TensorView& edited) {
  Edit e;
  e.tensor = base.name;
  e.dtype = base.dtype;
  e.shape = base.shape;
  const int64_t es = dtype_info(base.dtype).block_bytes;
  const int64_t n = base.numel();
  const bool matrix = base.shape.size() == 2;
  const int64_t rows = matrix ? base.shape[0] : 1, cols = matrix ? base.shape[1] : n;
  auto differs = [&](int64_t i) { return std::memcmp(base.data + i * es, edited.data + i * es, es) != 0; };
  std::vector<char> row_changed(rows, 0), col_changed(cols, 0);
  int64_t n_changed = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t off = r * cols * es;
    if (std::memcmp(base.data + off, edited.data + off, cols * es) == 0) continue;
    row_changed[r] = 1;
    for (int64_t c = 0; c < cols; ++c) {
      if (differs(r * cols + c)) {
        ++n_changed;
        col_changed[c] = 1;
      }
    }
  }
  e.weights_changed = n_changed;
  const int64_t kr = std::count(row_changed.begin(), row_changed.end(), 1);
  const int64_t kc = std::count(col_changed.begin(), col_changed.end(), 1);
  const int64_t full = n * es, sparse = n_changed * (8 + es);
  const int64_t by_cols = matrix ? kc * (8 + rows * es) : INT64_MAX,
                by_rows = matrix ? kr * (8 + cols * es) : INT64_MAX;
  const int64_t best = std::min({full, sparse, by_cols, by_rows});
  if (by_cols == best) {
    e.kind = EditKind::kColumns;
    for (int64_t c = 0; c < cols; ++c) {
      if (col_changed[c]) e.indices.push_back(c);
    }
    e.values.resize(rows * kc * es);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < kc; ++i) {
        std::memcpy(e.values.data() + (r * kc + i) * es, edited.data + (r * cols + e.indices[i]) * es, es);
      }
    }
  } else if (by_rows == best) {
    e.kind = EditKind::kRows;
    for (int64_t r = 0; r < rows; ++r) {
      if (row_changed[r]) {
        e.indices.push_back(r);
        e.values.insert(e.values.end(), edited.data + r * cols * es, edited.data + (r + 1) * cols * es);
      }
    }
  } else if (sparse == best) {
    e.kind = EditKind::kSparse;
    e.indices.reserve(n_changed);
    e.values.reserve(n_changed * es);
    for (int64_t r = 0; r < rows; ++r) {
      if (!row_changed[r]) continue;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        if (!differs(i)) continue;
        e.indices.push_back(i);
        e.values.insert(e.values.end(), edited.data + i * es, edited.data + (i + 1) * es);
      }
    }
  } else {
    e.kind = EditKind::kFull;
    e.values.assign(edited.data, edited.data + edited.nbytes);
  }
  return e;
}

Status write_edit_file(const std::string& path, const Edit& e) {
  std::vector<SafetensorsEntry> entries;
  const int64_t k = static_cast<int64_t>(e.indices.size());
  std::vector<int64_t> vshape;
  switch (e.kind) {
    case EditKind::kColumns: vshape = {e.rows(), k}; break;
    case EditKind::kRows: vshape = {k, e.cols()}; break;
    case EditKind::kSparse: vshape = {k}; break;
    case EditKind::kFull: vshape = e.shape; break;
    case EditKind::kLowRank: return Status::error("write_edit_file: low_rank edits are not written by diff");
  }
  if (e.kind != EditKind::kFull) entries.push_back({"indices", DType::kI64, {k}, e.indices.data()});
  entries.push_back({"values", e.dtype, vshape, e.values.data()});
  return write_safetensors(path, entries,
                           {{"format", kFormat}, {"kind", edit_kind_name(e.kind)}, {"tensor", e.tensor}});
}

}  // namespace

namespace {

// Two checkpoints a patch can describe: the same files, tensor names, shards, dtypes and shapes.
Status check_same_layout(const Checkpoint& base, const Checkpoint& edited, const std::string& edited_dir) {
  if (base.files.size() != edited.files.size()) {
    return Status::error(edited_dir + ": has " + std::to_string(edited.files.size()) + " safetensors files, the base " +
                         std::to_string(base.files.size()) + " (a patch cannot change how a checkpoint is sharded)");
  }
  for (size_t i = 0; i < base.files.size(); ++i) {
    if (base.files[i].name != edited.files[i].name) {
      return Status::error(edited_dir + ": file " + edited.files[i].name + " where the base has " + base.files[i].name);
    }
  }
  for (const auto& [name, where] : base.tensors) {
    const TensorView* e = edited.find(name);
    const TensorView* b = where.second;
    if (e == nullptr) return Status::error(edited_dir + ": tensor '" + name + "' of the base is missing");
    if (e->dtype != b->dtype || e->shape != b->shape) {
      return Status::error(edited_dir + ": tensor '" + name + "' is " + std::string(dtype_name(e->dtype)) + " " +
                           e->shape_str() + ", in the base " + std::string(dtype_name(b->dtype)) + " " +
                           b->shape_str() + " (a patch edits values, not shapes or dtypes)");
    }
    if (edited.tensors.at(name).first != where.first) {
      return Status::error(edited_dir + ": tensor '" + name + "' is in another shard than in the base");
    }
  }
  for (const auto& [name, where] : edited.tensors) {
    if (base.find(name) == nullptr) {
      return Status::error(edited_dir + ": tensor '" + name + "' is not in the base (a patch cannot add tensors)");
    }
  }
  return Status::ok();
}

// The edits of every changed tensor, in file order, each with the base tensor's hash pinned.
std::vector<Edit> changed_tensors(const Checkpoint& base, const Checkpoint& edited,
                                  std::map<std::string, std::string>* base_hashes) {
  std::vector<Edit> edits;
  for (const CheckpointFile& bf : base.files) {
    for (const TensorView& bt : bf.st.tensors) {
      const TensorView* et = edited.find(bt.name);
      if (std::memcmp(bt.data, et->data, bt.nbytes) == 0) continue;
      edits.push_back(make_edit(bt, *et));
      (*base_hashes)[bt.name] = sha256_hex(bt.data, bt.nbytes);
    }
  }
  return edits;
}

}  // namespace

Result<Patch> diff_to_patch(const std::string& base_dir, const std::string& edited_dir) {
  GB_ASSIGN_OR_RETURN(Checkpoint base, open_checkpoint(base_dir));
  GB_ASSIGN_OR_RETURN(Checkpoint edited, open_checkpoint(edited_dir));
  GB_RETURN_IF_ERROR(check_same_layout(base, edited, edited_dir));
  Patch p;
  p.source = PatchSource::kCheckpoint;
  p.path = edited_dir;
  p.name = fs::path(edited_dir).filename().string();
  p.base_model = fs::path(base_dir).filename().string();
  p.edits = changed_tensors(base, edited, &p.base_tensors);
  if (p.edits.empty()) return Status::error(edited_dir + ": no tensor differs from the base " + base_dir);
  // The identity of an edited checkpoint: the hash of its safetensors files' hashes, in order.
  Sha256 id;
  for (const CheckpointFile& ef : edited.files) {
    OutputFile f{ef.name, sha256_hex(ef.map->data(), ef.map->size()), "", ""};
    id.update(reinterpret_cast<const uint8_t*>(f.sha256.data()), f.sha256.size());
    p.files.push_back(std::move(f));
  }
  p.manifest_sha256 = p.files.size() == 1 ? p.files[0].sha256 : id.hex();
  for (Edit& e : p.edits) e.file = edited_dir;
  return p;
}

Result<DiffStats> diff_checkpoints(const std::string& base_dir, const std::string& edited_dir,
                                   const std::string& out_dir, const DiffOptions& options) {
  GB_ASSIGN_OR_RETURN(Checkpoint base, open_checkpoint(base_dir));
  GB_ASSIGN_OR_RETURN(Checkpoint edited, open_checkpoint(edited_dir));
  GB_RETURN_IF_ERROR(check_same_layout(base, edited, edited_dir));
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec))) {
    return Status::error(out_dir + ": exists and is not an empty directory (refusing to overwrite)");
  }
  fs::create_directories(out_dir, ec);
  if (ec) return Status::error("cannot create " + out_dir + ": " + ec.message());

  DiffStats stats;
  json manifest = {{"format", kFormat},
                   {"format_version", kFormatVersion},
                   {"name", options.name.empty() ? fs::path(edited_dir).filename().string() : options.name},
                   {"version", options.version},
                   {"description", options.description}};
  if (manifest["name"].get<std::string>().empty()) manifest["name"] = "patch";
  json base_tensors = json::object(), edits = json::array(), files = json::array();
  std::map<std::string, std::string> base_hashes;
  std::vector<Edit> changed = changed_tensors(base, edited, &base_hashes);
  for (const CheckpointFile& bf : base.files) stats.tensors_compared += static_cast<int64_t>(bf.st.tensors.size());
  int n_edit = 0;
  for (Edit& e : changed) {
    char fname[32];
    std::snprintf(fname, sizeof fname, "edit-%04d.safetensors", n_edit++);
    e.file = fname;
    GB_RETURN_IF_ERROR(write_edit_file(out_dir + "/" + e.file, e));
    GB_ASSIGN_OR_RETURN(e.sha256, sha256_file(out_dir + "/" + e.file));
    ++stats.tensors_changed;
    stats.weights_changed += e.weights_changed;
    stats.bytes_stored += e.stored_bytes();
    base_tensors[e.tensor] = base_hashes.at(e.tensor);
    edits.push_back({{"tensor", e.tensor},
                     {"kind", edit_kind_name(e.kind)},
                     {"file", e.file},
                     {"sha256", e.sha256},
                     {"dtype", std::string(dtype_name(e.dtype))},
                     {"shape", e.shape},
                     {"count", e.kind == EditKind::kFull ? e.numel() : static_cast<int64_t>(e.indices.size())},
                     {"weights_changed", e.weights_changed}});
  }
  for (size_t fi = 0; fi < base.files.size(); ++fi) {
    const CheckpointFile& bf = base.files[fi];
    const CheckpointFile& ef = edited.files[fi];
    json f = {{"name", bf.name}, {"sha256", sha256_hex(ef.map->data(), ef.map->size())}, {"header", nullptr}};
    if (bf.header_end != ef.header_end || std::memcmp(bf.map->data(), ef.map->data(), bf.header_end) != 0) {
      const std::string hname = "header-" + std::to_string(fi) + ".json";
      GB_RETURN_IF_ERROR(write_text(out_dir + "/" + hname,
                                    std::string(reinterpret_cast<const char*>(ef.map->data()) + 8, ef.header_end - 8)));
      f["header"] = hname;
    }
    files.push_back(f);
  }
  manifest["base_model"] = {
      {"name", options.base_name.empty() ? fs::path(base_dir).filename().string() : options.base_name},
      {"tensors", base_tensors}};
  manifest["files"] = files;
  manifest["edits"] = edits;
  GB_RETURN_IF_ERROR(write_text(out_dir + "/manifest.json", manifest.dump(1) + "\n"));

  for (const std::string& n : other_files(base)) {
    const std::string e = edited_dir + "/" + n;
    auto a = read_file(base_dir + "/" + n);
    auto b = fs::exists(e, ec) ? read_file(e) : Result<std::string>(Status::error("missing"));
    if (!a.is_ok() || !b.is_ok() || *a != *b) stats.other_files_differing.push_back(n);
  }

  // Check: the artifact as written, applied to the base, gives every edited file's bytes.
  GB_ASSIGN_OR_RETURN(Patch p, load_artifact(out_dir));
  std::map<std::string, const Edit*> by_tensor;
  for (const Edit& e : p.edits) by_tensor[e.tensor] = &e;
  for (size_t fi = 0; fi < base.files.size(); ++fi) {
    Sha256 h;
    GB_RETURN_IF_ERROR(emit_file(base.files[fi], p.files[fi].header, by_tensor, [&](const uint8_t* d, size_t n) {
      h.update(d, n);
      return Status::ok();
    }));
    const std::string got = h.hex();
    if (got != p.files[fi].sha256) {
      return Status::error(out_dir + ": applying the patch to " + base_dir + "/" + base.files[fi].name +
                           " gives SHA-256 " + got + ", the edited file's is " + p.files[fi].sha256);
    }
  }
  return stats;
}

}  // namespace gb::patch

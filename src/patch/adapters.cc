// LoRA adapters as they come: PEFT directories (adapter_config.json + adapter_model.safetensors)
// and llama.cpp LoRA GGUFs, loaded as low_rank edits under Hugging Face tensor names.
//
// PEFT: keys "base_model.model.<module>.lora_A.weight" [r, in] and ".lora_B.weight" [out, r];
// scale = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora; rank_pattern / alpha_pattern
// override r and alpha per module (matched as PEFT does for plain keys: the module name equals the
// key or ends with "." + key). DoRA, biases, modules_to_save and embedding LoRAs are refused.
// GGUF: general.type = adapter, adapter.type = lora, adapter.lora.alpha; tensors
// "blk.N.<name>.weight.lora_a" (GGUF ne [in, r], i.e. [r, in]) and ".lora_b" ([out, r]); scale =
// alpha / r as llama.cpp's llama_adapter_lora_weight::get_scale (alpha 0 or absent: 1).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/fp16.h"
#include "formats/gguf.h"
#include "formats/json_nesting.h"
#include "patch/patch.h"
#include "patch/patch_internal.h"

namespace gb::patch {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A factor (f32 / f16 / bf16 / q8_0) widened to f32.
Result<std::vector<float>> factor_f32(const TensorView& t, const std::string& where) {
  const int64_t n = t.numel();
  std::vector<float> out(n);
  switch (t.dtype) {
    case DType::kF32: std::memcpy(out.data(), t.data, n * 4); break;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    case DType::kQ8_0:
      for (int64_t blk = 0; blk < n / 32; ++blk) {
        const uint8_t* p = t.data + blk * 34;
        uint16_t d;
        std::memcpy(&d, p, 2);
        const float scale = f16_to_f32(d);
        for (int i = 0; i < 32; ++i) out[blk * 32 + i] = scale * static_cast<int8_t>(p[2 + i]);
      }
      break;
    default:
      return Status::error(where + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                           ", expected f32, f16, bf16 or q8_0 for a LoRA factor");
  }
  return out;
}

// Checks A [r, in] and B [out, r] and fills the low-rank edit.
Status fill_low_rank(const std::string& where, const std::string& tensor, const TensorView& A, const TensorView& B,
                     Edit* e) {
  if (A.shape.size() != 2 || B.shape.size() != 2 || A.shape[0] != B.shape[1] || A.shape[0] <= 0 || A.shape[1] <= 0 ||
      B.shape[0] <= 0) {
    return Status::error(where + ": LoRA factors of '" + tensor + "' have shapes A " + A.shape_str() + " and B " +
                         B.shape_str() + "; expected A [r, in] and B [out, r] with the same r");
  }
  if (A.dtype != B.dtype) return Status::error(where + ": LoRA factors of '" + tensor + "' have different dtypes");
  e->tensor = tensor;
  e->kind = EditKind::kLowRank;
  e->shape = {B.shape[0], A.shape[1]};
  e->rank = A.shape[0];
  e->factor_dtype = A.dtype;
  GB_ASSIGN_OR_RETURN(e->a, factor_f32(A, where));
  GB_ASSIGN_OR_RETURN(e->b, factor_f32(B, where));
  for (float v : e->a) {
    if (!std::isfinite(v)) return Status::error(where + ": lora_A of '" + tensor + "' has a non-finite value");
  }
  for (float v : e->b) {
    if (!std::isfinite(v)) return Status::error(where + ": lora_B of '" + tensor + "' has a non-finite value");
  }
  return Status::ok();
}

bool module_matches(const std::string& module, const std::string& key) {
  return module == key || (module.size() > key.size() && module.ends_with("." + key));
}

}  // namespace

Result<Patch> load_peft_adapter(const std::string& dir) {
  const std::string cpath = dir + "/adapter_config.json";
  GB_ASSIGN_OR_RETURN(std::string text, read_file(cpath));
  json c = json::parse(text, nullptr, false);
  if (c.is_discarded()) return Status::error(cpath + ": not valid JSON");
  if (!c.is_object()) return Status::error(cpath + ": must be a JSON object");
  if (json_nesting_exceeds(c)) return Status::error(cpath + ": nested too deeply");
  auto str = [&](const char* k) { return c.contains(k) && c[k].is_string() ? c[k].get<std::string>() : std::string(); };
  auto flag = [&](const char* k) { return c.contains(k) && c[k].is_boolean() && c[k].get<bool>(); };
  const std::string type = str("peft_type");
  if (type != "LORA") {
    return Status::error(cpath + ": peft_type is \"" + type + "\"; only LORA adapters are supported");
  }
  if (!c.contains("r") || !c["r"].is_number_integer() || c["r"].get<int64_t>() <= 0) {
    return Status::error(cpath + ": \"r\" must be a positive integer");
  }
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number()) {
    return Status::error(cpath + ": \"lora_alpha\" must be a number");
  }
  const int64_t r = c["r"].get<int64_t>();
  const double alpha = c["lora_alpha"].get<double>();
  const bool rslora = flag("use_rslora");
  if (flag("use_dora")) return Status::error(cpath + ": use_dora is true; DoRA adapters are not supported");
  if (flag("fan_in_fan_out")) {
    return Status::error(cpath + ": fan_in_fan_out is true (GPT-2 Conv1D layout); not supported");
  }
  if (c.contains("bias") && !(c["bias"].is_string() && c["bias"].get<std::string>() == "none")) {
    return Status::error(cpath + ": bias must be \"none\" (trained biases are not supported)");
  }
  if (c.contains("modules_to_save") && !c["modules_to_save"].is_null() &&
      !(c["modules_to_save"].is_array() && c["modules_to_save"].empty())) {
    return Status::error(cpath + ": modules_to_save is set (whole saved modules are not supported)");
  }
  std::map<std::string, json> rank_pattern, alpha_pattern;
  for (const char* k : {"rank_pattern", "alpha_pattern"}) {
    if (!c.contains(k) || c[k].is_null()) continue;
    if (!c[k].is_object()) return Status::error(cpath + ": \"" + k + "\" must be an object");
    for (const auto& [key, v] : c[k].items()) {
      if (!v.is_number() || (std::string(k) == "rank_pattern" && !v.is_number_integer())) {
        return Status::error(cpath + ": " + k + "[\"" + key + "\"] must be a number");
      }
      (std::string(k) == "rank_pattern" ? rank_pattern : alpha_pattern)[key] = v;
    }
  }

  std::string wpath = dir + "/adapter_model.safetensors";
  std::error_code ec;
  if (!fs::exists(wpath, ec)) {
    return Status::error(dir + ": no adapter_model.safetensors" +
                         std::string(fs::exists(dir + "/adapter_model.bin", ec)
                                         ? " (adapter_model.bin is a pickle; convert it to safetensors)"
                                         : ""));
  }
  GB_ASSIGN_OR_RETURN(SafetensorsFile st, read_safetensors(wpath));
  GB_ASSIGN_OR_RETURN(std::string wsha, sha256_file(wpath));
  struct Pair {
    const TensorView* a = nullptr;
    const TensorView* b = nullptr;
  };
  std::map<std::string, Pair> modules;
  for (const TensorView& t : st.tensors) {
    std::string name = t.name;
    if (name.starts_with("base_model.model.")) name = name.substr(17);
    const bool is_a = name.ends_with(".lora_A.weight"), is_b = name.ends_with(".lora_B.weight");
    if (!is_a && !is_b) {
      return Status::error(wpath + ": tensor '" + t.name +
                           "' is not a LoRA factor (lora_A / lora_B); DoRA magnitudes, embedding LoRAs and saved "
                           "modules are not supported");
    }
    const std::string module = name.substr(0, name.size() - 14);
    (is_a ? modules[module].a : modules[module].b) = &t;
  }
  if (modules.empty()) return Status::error(wpath + ": no LoRA tensors");
  Patch p;
  p.source = PatchSource::kPeft;
  p.path = dir;
  p.name = fs::path(dir).filename().string();
  p.version = str("revision");
  p.base_model = str("base_model_name_or_path");
  for (const auto& [module, pair] : modules) {
    if (pair.a == nullptr || pair.b == nullptr) {
      return Status::error(wpath + ": module '" + module + "' has lora_" + (pair.a ? "A" : "B") + " but no lora_" +
                           (pair.a ? "B" : "A"));
    }
    Edit e;
    GB_RETURN_IF_ERROR(fill_low_rank(wpath, module + ".weight", *pair.a, *pair.b, &e));
    int64_t mr = r;
    double ma = alpha;
    for (const auto& [key, v] : rank_pattern) {
      if (module_matches(module, key)) mr = v.get<int64_t>();
    }
    for (const auto& [key, v] : alpha_pattern) {
      if (module_matches(module, key)) ma = v.get<double>();
    }
    if (mr != e.rank) {
      return Status::error(wpath + ": '" + module + "' has rank " + std::to_string(e.rank) +
                           ", adapter_config.json says " + std::to_string(mr));
    }
    e.scale = static_cast<float>(rslora ? ma / std::sqrt(static_cast<double>(mr)) : ma / static_cast<double>(mr));
    e.file = "adapter_model.safetensors";
    e.sha256 = wsha;
    p.edits.push_back(std::move(e));
  }
  return p;
}

Result<Patch> load_gguf_lora(const std::string& path) {
  GB_ASSIGN_OR_RETURN(GgufFile g, read_gguf(path));
  auto str = [&](const char* k) {
    const json* v = g.find(k);
    return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
  };
  if (str("general.type") != "adapter") {
    return Status::error(path + ": general.type is \"" + str("general.type") +
                         "\", not \"adapter\" (a model GGUF, not a LoRA adapter)");
  }
  if (str("adapter.type") != "lora") {
    return Status::error(path + ": adapter.type is \"" + str("adapter.type") + "\"; only \"lora\" is supported");
  }
  double alpha = 0;
  if (const json* a = g.find("adapter.lora.alpha"); a != nullptr) {
    if (!a->is_number()) return Status::error(path + ": adapter.lora.alpha must be a number");
    alpha = a->get<double>();
  }
  const std::string arch = str("general.architecture");
  GB_ASSIGN_OR_RETURN(std::string sha, sha256_file(path));
  struct Pair {
    const TensorView* a = nullptr;
    const TensorView* b = nullptr;
  };
  std::map<std::string, Pair> modules;
  for (const TensorView& t : g.tensors) {
    const bool is_a = t.name.ends_with(".lora_a"), is_b = t.name.ends_with(".lora_b");
    if (!is_a && !is_b)
      return Status::error(path + ": tensor '" + t.name + "' is not a LoRA factor (.lora_a / .lora_b)");
    const std::string base = t.name.substr(0, t.name.size() - 7);
    (is_a ? modules[base].a : modules[base].b) = &t;
  }
  if (modules.empty()) return Status::error(path + ": no LoRA tensors");
  Patch p;
  p.source = PatchSource::kGgufLora;
  p.path = path;
  p.name = str("general.name");
  if (p.name.empty()) p.name = fs::path(path).stem().string();
  p.version = str("general.version");
  p.base_model = arch;
  for (const auto& [gname, pair] : modules) {
    if (pair.a == nullptr || pair.b == nullptr) {
      return Status::error(path + ": '" + gname + "' has lora_" + (pair.a ? "a" : "b") + " but no lora_" +
                           (pair.a ? "b" : "a"));
    }
    const std::string hf = hf_name_from_gguf(gname);
    if (hf.empty()) return Status::error(path + ": '" + gname + "' is not a weight matrix Glassbox knows");
    Edit e;
    GB_RETURN_IF_ERROR(fill_low_rank(path, hf, *pair.a, *pair.b, &e));
    e.scale = alpha != 0 ? static_cast<float>(alpha / static_cast<double>(e.rank)) : 1.0f;
    const bool qk = gname.ends_with("attn_q.weight") || gname.ends_with("attn_k.weight");
    e.gguf_rope_permuted = qk && arch == "llama";
    e.file = fs::path(path).filename().string();
    e.sha256 = sha;
    p.edits.push_back(std::move(e));
  }
  return p;
}

Result<Patch> load_patch(const std::string& path, const std::string& base_dir) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::error(path + ": no such file or directory");
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path + "/manifest.json", ec)) return load_artifact(path);
    if (fs::exists(path + "/adapter_config.json", ec)) return load_peft_adapter(path);
    const bool checkpoint =
        fs::exists(path + "/model.safetensors", ec) || fs::exists(path + "/model.safetensors.index.json", ec);
    if (!checkpoint)
      return Status::error(path +
                           ": neither a patch (manifest.json), a PEFT adapter (adapter_config.json) nor an edited "
                           "checkpoint (model.safetensors)");
    if (base_dir.empty() || !fs::is_directory(base_dir, ec))
      return Status::error(path + ": an edited checkpoint is diffed against a Hugging Face base directory" +
                           (base_dir.empty() ? std::string() : ", and " + base_dir + " is not one") +
                           " (make a patch with `glassbox patch diff` to serve it beside a GGUF base)");
    return diff_to_patch(base_dir, path);
  }
  GB_ASSIGN_OR_RETURN(auto m, MappedFile::open(path));
  if (m->size() >= 4 && std::memcmp(m->data(), "GGUF", 4) == 0) return load_gguf_lora(path);
  return Status::error(path + ": not a patch directory, a PEFT adapter directory or a LoRA GGUF file");
}

}  // namespace gb::patch

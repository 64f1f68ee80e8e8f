// Parsing of Hugging Face config.json / generation_config.json and GGUF metadata into ModelConfig.
#include "model/config.h"

#include <cmath>
#include <numbers>

#include "formats/json_nesting.h"

namespace gb {

namespace {

using nlohmann::json;

// Reads an integer key; a missing key gives `fallback` (or an error when fallback < 0 means required).
Status get_int(const json& j, const std::string& key, int64_t fallback, bool required, int64_t* out,
               const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::error(where + ": required key '" + key + "' is missing");
    *out = fallback;
    return Status::ok();
  }
  if (!it->is_number_integer()) {
    return Status::error(where + ": '" + key + "' must be an integer, found " + it->dump());
  }
  *out = it->get<int64_t>();
  return Status::ok();
}

// The sizes a config may declare. They are checked as each key is read, before anything is sized
// by them (a 1e9-layer config would otherwise allocate per layer before validate() refused it),
// and again by validate() for configs built in code.
struct SizeBound {
  int64_t lo, hi;
};
constexpr SizeBound kLayersBound{1, 4096}, kEmbdBound{1, 1 << 20}, kHeadsBound{1, 4096}, kHeadDimBound{2, 4096},
    kFfBound{1, 1 << 22}, kVocabBound{1, 1 << 26};

Status out_of_bound(const std::string& where, const std::string& key, int64_t v, SizeBound b) {
  return Status::error(where + ": '" + key + "' = " + std::to_string(v) + " is out of range [" + std::to_string(b.lo) +
                       ", " + std::to_string(b.hi) + "]");
}

// get_int for a size: also refused when outside b (the error names the key).
Status get_size(const json& j, const std::string& key, int64_t fallback, bool required, SizeBound b, int64_t* out,
                const std::string& where) {
  GB_RETURN_IF_ERROR(get_int(j, key, fallback, required, out, where));
  if (*out < b.lo || *out > b.hi) return out_of_bound(where, key, *out, b);
  return Status::ok();
}

Status get_float(const json& j, const std::string& key, double fallback, double* out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = fallback;
    return Status::ok();
  }
  if (!it->is_number()) return Status::error(where + ": '" + key + "' must be a number, found " + it->dump());
  *out = it->get<double>();
  return Status::ok();
}

// eos_token_id may be one id or a list of ids.
Status get_ids(const json& j, const std::string& key, std::vector<int32_t>* out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::ok();
  auto one = [&](const json& v) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Status::error(where + ": '" + key + "' must be a token id or a list of ids, found " + it->dump());
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
    return Status::ok();
  };
  if (it->is_array()) {
    for (const auto& v : *it) GB_RETURN_IF_ERROR(one(v));
    return Status::ok();
  }
  return one(*it);
}

// llama3 rope scaling as per-frequency divisors, exactly as llama.cpp's converter writes them into
// rope_freqs.weight: high frequencies kept, low ones divided by factor, a smooth ramp between.
std::vector<float> llama3_divisors(double theta, int32_t dims, double factor, double low_freq_factor,
                                   double high_freq_factor, double original_max_pos) {
  std::vector<float> out;
  const double low_wavelen = original_max_pos / low_freq_factor;
  const double high_wavelen = original_max_pos / high_freq_factor;
  for (int32_t i = 0; i < dims / 2; ++i) {
    const double freq = 1.0 / std::pow(theta, 2.0 * i / dims);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(static_cast<float>(factor));
    } else {
      const double smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

Status check_range(const std::string& where, const char* what, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return Status::error(where + ": " + what + " = " + std::to_string(v) + " is out of range [" + std::to_string(lo) +
                         ", " + std::to_string(hi) + "]");
  }
  return Status::ok();
}

// The Qwen3.5 keys: layer_types (or full_attention_interval), the linear_* shape of the Gated
// DeltaNet layers, the gated full attention.
Status parse_qwen35_hf(const json& j, const std::string& where, ModelConfig* c) {
  if (auto it = j.find("num_experts"); it != j.end() && it->is_number_integer() && it->get<int64_t>() > 0) {
    return Status::error(where + ": Qwen3.5 mixture-of-experts models are not supported (num_experts = " + it->dump() +
                         ")");
  }
  c->qk_norm = true;
  c->attn_output_gate = true;
  if (auto it = j.find("attn_output_gate"); it != j.end() && it->is_boolean()) c->attn_output_gate = it->get<bool>();
  int64_t v = 0;
  GB_RETURN_IF_ERROR(get_int(j, "linear_num_key_heads", 0, true, &v, where));
  c->lin_k_heads = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_int(j, "linear_num_value_heads", 0, true, &v, where));
  c->lin_v_heads = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_int(j, "linear_key_head_dim", 0, true, &v, where));
  c->lin_k_dim = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_int(j, "linear_value_head_dim", 0, true, &v, where));
  c->lin_v_dim = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_int(j, "linear_conv_kernel_dim", 4, false, &v, where));
  c->lin_conv_kernel = static_cast<int32_t>(v);
  auto lt = j.find("layer_types");
  if (lt == j.end() || lt->is_null()) {
    int64_t interval = 4;
    GB_RETURN_IF_ERROR(get_int(j, "full_attention_interval", 4, false, &interval, where));
    if (interval <= 0) return Status::error(where + ": 'full_attention_interval' must be positive");
    for (int32_t il = 0; il < c->n_layers; ++il) {
      c->layer_kinds[il] = (il + 1) % interval == 0 ? LayerKind::kAttention : LayerKind::kLinearAttention;
    }
    return Status::ok();
  }
  if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c->n_layers) {
    return Status::error(where + ": 'layer_types' must be a list of " + std::to_string(c->n_layers) +
                         " entries (one per layer), found " + lt->dump().substr(0, 120));
  }
  for (int32_t il = 0; il < c->n_layers; ++il) {
    const json& e = (*lt)[il];
    const std::string s = e.is_string() ? e.get<std::string>() : e.dump();
    if (s == "linear_attention") {
      c->layer_kinds[il] = LayerKind::kLinearAttention;
    } else if (s == "full_attention") {
      c->layer_kinds[il] = LayerKind::kAttention;
    } else {
      return Status::error(where + ": layer_types[" + std::to_string(il) + "] = '" + s +
                           "' is not supported (linear_attention, full_attention)");
    }
  }
  return Status::ok();
}

}  // namespace

std::vector<double> ModelConfig::rope_inv_freq() const {
  std::vector<double> inv(rope_dims / 2);
  for (int32_t i = 0; i < rope_dims / 2; ++i) {
    inv[i] = std::pow(rope_theta, -2.0 * i / rope_dims);
    if (!rope_freq_divisors.empty()) inv[i] /= rope_freq_divisors[i];
  }
  return inv;
}

int32_t ModelConfig::n_layers_of(LayerKind k) const {
  int32_t n = 0;
  for (LayerKind l : layer_kinds) n += l == k;
  return n;
}

Status ModelConfig::validate() const {
  const std::string where = "model config (" + arch_name + ")";
  GB_RETURN_IF_ERROR(check_range(where, "layers", n_layers, kLayersBound.lo, kLayersBound.hi));
  GB_RETURN_IF_ERROR(check_range(where, "hidden size", n_embd, kEmbdBound.lo, kEmbdBound.hi));
  GB_RETURN_IF_ERROR(check_range(where, "attention heads", n_heads, kHeadsBound.lo, kHeadsBound.hi));
  GB_RETURN_IF_ERROR(check_range(where, "key/value heads", n_kv_heads, 1, n_heads));
  GB_RETURN_IF_ERROR(check_range(where, "head_dim", head_dim, kHeadDimBound.lo, kHeadDimBound.hi));
  GB_RETURN_IF_ERROR(check_range(where, "intermediate size", n_ff, kFfBound.lo, kFfBound.hi));
  GB_RETURN_IF_ERROR(check_range(where, "vocabulary size", vocab, kVocabBound.lo, kVocabBound.hi));
  GB_RETURN_IF_ERROR(check_range(where, "max positions", max_pos, 1, 1 << 26));
  GB_RETURN_IF_ERROR(check_range(where, "rotary dims", rope_dims, 2, head_dim));
  if (n_heads % n_kv_heads != 0) {
    return Status::error(where + ": " + std::to_string(n_heads) + " attention heads are not a multiple of " +
                         std::to_string(n_kv_heads) + " key/value heads");
  }
  if (rope_dims % 2 != 0) return Status::error(where + ": rotary dims must be even, got " + std::to_string(rope_dims));
  if (!rope_freq_divisors.empty() && static_cast<int32_t>(rope_freq_divisors.size()) != rope_dims / 2) {
    return Status::error(where + ": rope frequency factors have " + std::to_string(rope_freq_divisors.size()) +
                         " entries, expected rotary dims / 2 = " + std::to_string(rope_dims / 2));
  }
  for (float d : rope_freq_divisors) {
    if (!(d > 0.0f) || !std::isfinite(d)) return Status::error(where + ": rope frequency factors must be positive");
  }
  if (!(rms_eps > 0.0f) || !(rope_theta > 0.0))
    return Status::error(where + ": rms_norm_eps and rope_theta must be positive");
  if (static_cast<int32_t>(layer_kinds.size()) != n_layers)
    return Status::error(where + ": layer kinds do not match layers");
  if (hybrid()) {
    GB_RETURN_IF_ERROR(check_range(where, "linear attention key heads", lin_k_heads, 1, 4096));
    GB_RETURN_IF_ERROR(check_range(where, "linear attention value heads", lin_v_heads, 1, 4096));
    GB_RETURN_IF_ERROR(check_range(where, "linear attention key head dim", lin_k_dim, 1, 1024));
    GB_RETURN_IF_ERROR(check_range(where, "linear attention value head dim", lin_v_dim, 1, 1024));
    GB_RETURN_IF_ERROR(check_range(where, "linear attention conv kernel", lin_conv_kernel, 1, 64));
    if (lin_v_heads % lin_k_heads != 0) {
      return Status::error(where + ": " + std::to_string(lin_v_heads) +
                           " linear attention value heads are not a multiple of " + std::to_string(lin_k_heads) +
                           " key heads");
    }
  }
  for (int32_t id : eos_ids) GB_RETURN_IF_ERROR(check_range(where, "eos token id", id, 0, vocab - 1));
  if (bos_id >= vocab)
    return Status::error(where + ": bos token id " + std::to_string(bos_id) + " is outside the vocabulary");
  return Status::ok();
}

namespace {

// The multimodal Qwen3.5 checkpoint: its language model's keys live in text_config (top-level
// keys such as tie_word_embeddings / eos_token_id fill the gaps); the vision tower is not loaded.
Result<ModelConfig> parse_hf_text_config(const json& j, const json* gen, const std::string& a,
                                         const std::string& where) {
  auto tc = j.find("text_config");
  if (tc == j.end() || !tc->is_object()) {
    return Status::error(where + ": " + a + " needs a 'text_config' object with the language model's settings");
  }
  json merged = *tc;
  for (const auto& [k, v] : j.items()) {
    if (k != "text_config" && k != "vision_config" && !merged.contains(k)) merged[k] = v;
  }
  merged["architectures"] = json::array({"Qwen3_5ForCausalLM"});
  GB_ASSIGN_OR_RETURN(ModelConfig text, parse_hf_config(merged, gen));
  text.arch_name = a;
  return text;
}

Status set_hf_arch(const std::string& a, const std::string& where, ModelConfig* c) {
  if (a == "LlamaForCausalLM" || a == "MistralForCausalLM" || a == "llama" || a == "mistral") {
    c->arch = Arch::kLlama;
  } else if (a == "Qwen2ForCausalLM" || a == "qwen2") {
    c->arch = Arch::kQwen2;
  } else if (a == "Qwen3ForCausalLM" || a == "qwen3") {
    c->arch = Arch::kQwen3;
  } else if (a == "Qwen3_5ForCausalLM" || a == "qwen3_5_text") {
    c->arch = Arch::kQwen35;
  } else {
    return Status::error(where + ": unsupported architecture '" + a +
                         "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                         "Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration)");
  }
  return Status::ok();
}

// Layer count, widths, heads, vocabulary, context (capped at a sliding window) and the norm eps.
Status parse_hf_shape(const json& j, const std::string& where, ModelConfig* c) {
  int64_t v = 0;
  GB_RETURN_IF_ERROR(get_size(j, "num_hidden_layers", 0, true, kLayersBound, &v, where));
  c->n_layers = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_size(j, "hidden_size", 0, true, kEmbdBound, &v, where));
  c->n_embd = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_size(j, "intermediate_size", 0, true, kFfBound, &v, where));
  c->n_ff = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_size(j, "num_attention_heads", 0, true, kHeadsBound, &v, where));
  c->n_heads = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_size(j, "num_key_value_heads", c->n_heads, false, kHeadsBound, &v, where));
  c->n_kv_heads = static_cast<int32_t>(v);
  // head_dim sizes the rope tables (rotary dims / 2 entries).
  GB_RETURN_IF_ERROR(get_size(j, "head_dim", c->n_embd / c->n_heads, false, kHeadDimBound, &v, where));
  c->head_dim = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_size(j, "vocab_size", 0, true, kVocabBound, &v, where));
  c->vocab = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(get_int(j, "max_position_embeddings", 2048, false, &v, where));
  c->max_pos = static_cast<int32_t>(v);
  // Mistral's sliding window is not implemented; up to the window length attention is identical,
  // so the usable context is capped there instead of refusing the model.
  int64_t window = 0;
  GB_RETURN_IF_ERROR(get_int(j, "sliding_window", 0, false, &window, where));
  bool use_window = c->arch == Arch::kLlama;  // Qwen2/3 configs carry a window with use_sliding_window false
  if (auto it = j.find("use_sliding_window"); it != j.end() && it->is_boolean()) use_window = it->get<bool>();
  if (use_window && window > 0 && window < c->max_pos) c->max_pos = static_cast<int32_t>(window);

  double d = 0;
  GB_RETURN_IF_ERROR(get_float(j, "rms_norm_eps", 1e-6, &d, where));
  c->rms_eps = static_cast<float>(d);
  return Status::ok();
}

// rope_scaling (or rope_parameters) "llama3" / "linear" as per-frequency divisors.
Status parse_hf_rope_scaling(const json& rope, const std::string& where, ModelConfig* c) {
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (auto it = rope.find(key); it != rope.end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  const std::string rw = where + " rope_scaling";
  if (type == "llama3") {
    double factor, low, high, orig;
    GB_RETURN_IF_ERROR(get_float(rope, "factor", 8.0, &factor, rw));
    GB_RETURN_IF_ERROR(get_float(rope, "low_freq_factor", 1.0, &low, rw));
    GB_RETURN_IF_ERROR(get_float(rope, "high_freq_factor", 4.0, &high, rw));
    GB_RETURN_IF_ERROR(get_float(rope, "original_max_position_embeddings", 8192, &orig, rw));
    if (!(factor > 0) || !(low > 0) || !(high > low) || !(orig > 0)) {
      return Status::error(rw + ": llama3 scaling needs factor > 0 and high_freq_factor > low_freq_factor > 0");
    }
    c->rope_freq_divisors = llama3_divisors(c->rope_theta, c->rope_dims, factor, low, high, orig);
  } else if (type == "linear") {
    double factor;
    GB_RETURN_IF_ERROR(get_float(rope, "factor", 1.0, &factor, rw));
    if (!(factor > 0)) return Status::error(rw + ": linear scaling factor must be positive");
    c->rope_freq_divisors.assign(c->rope_dims / 2, static_cast<float>(factor));
  } else if (type != "default") {
    return Status::error(rw + ": rope scaling type '" + type + "' is not supported (default, linear, llama3)");
  }
  return Status::ok();
}

// rope_theta, the rotated dims (partial_rotary_factor) and scaling; transformers 5 moved these
// settings into "rope_parameters", older configs have them at the top.
Status parse_hf_rope(const json& j, const std::string& where, ModelConfig* c) {
  const json* rope = nullptr;
  if (auto it = j.find("rope_scaling"); it != j.end() && it->is_object()) rope = &*it;
  json rope_params;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) {
    rope_params = *it;
    if (rope == nullptr) rope = &rope_params;
  }
  GB_RETURN_IF_ERROR(get_float(j, "rope_theta", 10000.0, &c->rope_theta, where));
  if (!j.contains("rope_theta") && rope_params.is_object()) {
    GB_RETURN_IF_ERROR(get_float(rope_params, "rope_theta", 10000.0, &c->rope_theta, where + " rope_parameters"));
  }
  c->rope_dims = c->head_dim;
  const json* partial = nullptr;
  if (auto it = j.find("partial_rotary_factor"); it != j.end() && it->is_number()) {
    partial = &*it;
  } else if (auto pr = rope_params.is_object() ? rope_params.find("partial_rotary_factor") : rope_params.end();
             rope_params.is_object() && pr != rope_params.end() && pr->is_number()) {
    partial = &*pr;
  }
  if (partial != nullptr) {
    // Checked before the multiply: a factor like 1e300 would overflow the int conversion.
    const double f = partial->get<double>();
    if (!(f > 0.0 && f <= 1.0)) {
      return Status::error(where + ": 'partial_rotary_factor' must be in (0, 1], found " + partial->dump());
    }
    c->rope_dims = static_cast<int32_t>(c->head_dim * f);
  }
  // Qwen3.5's rope_parameters carry M-RoPE sections for image positions; with text-only
  // positions (all three equal) M-RoPE is plain RoPE, so the sections are not needed.
  c->rope_style = ops::RopeStyle::kNeox;
  if (rope != nullptr) GB_RETURN_IF_ERROR(parse_hf_rope_scaling(*rope, where, c));
  return Status::ok();
}

// Activation, biases, q/k norm and tied embeddings.
Status parse_hf_variant(const json& j, const std::string& where, ModelConfig* c) {
  if (auto it = j.find("hidden_act"); it != j.end() && it->is_string() && it->get<std::string>() != "silu") {
    return Status::error(where + ": hidden_act '" + it->get<std::string>() + "' is not supported (silu)");
  }
  if (auto it = j.find("mlp_bias"); it != j.end() && it->is_boolean() && it->get<bool>()) {
    return Status::error(where + ": mlp_bias = true is not supported");
  }
  bool attention_bias = false;
  if (auto it = j.find("attention_bias"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return Status::error(where + ": 'attention_bias' must be true or false");
    attention_bias = it->get<bool>();
  }
  c->qkv_bias = c->arch == Arch::kQwen2 || attention_bias;
  c->o_bias = c->arch != Arch::kQwen2 && attention_bias;
  c->qk_norm = c->arch == Arch::kQwen3;
  // Absent: decided by the loader from whether lm_head.weight exists.
  c->tied_embeddings = false;
  c->tied_embeddings_known = false;
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return Status::error(where + ": 'tie_word_embeddings' must be true or false");
    c->tied_embeddings = it->get<bool>();
    c->tied_embeddings_known = true;
  }
  return Status::ok();
}

// generation_config.json wins for generation settings; config.json is the fallback.
Status parse_hf_special_ids(const json& j, const json* gen, const std::string& where, ModelConfig* c) {
  std::vector<int32_t> bos;
  if (gen != nullptr && gen->is_object()) {
    GB_RETURN_IF_ERROR(get_ids(*gen, "eos_token_id", &c->eos_ids, "generation_config.json"));
    GB_RETURN_IF_ERROR(get_ids(*gen, "bos_token_id", &bos, "generation_config.json"));
  }
  if (c->eos_ids.empty()) GB_RETURN_IF_ERROR(get_ids(j, "eos_token_id", &c->eos_ids, where));
  if (bos.empty()) GB_RETURN_IF_ERROR(get_ids(j, "bos_token_id", &bos, where));
  c->bos_id = bos.empty() ? -1 : bos[0];
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_hf_config(const json& j, const json* gen) {
  const std::string where = "config.json";
  if (!j.is_object()) return Status::error(where + ": not a JSON object");
  // Error messages dump values and Qwen3.5's text_config is copied: both recurse per level.
  if (json_nesting_exceeds(j))
    return Status::error(where + ": nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
  if (gen != nullptr && json_nesting_exceeds(*gen)) {
    return Status::error("generation_config.json: nested deeper than " + std::to_string(kMaxJsonNesting) + " levels");
  }
  ModelConfig c;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    c.arch_name = (*it)[0].get<std::string>();
  } else if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) {
    c.arch_name = mt->get<std::string>();
  } else {
    return Status::error(where + ": neither 'architectures' nor 'model_type' names the architecture");
  }
  const std::string& a = c.arch_name;
  if (a == "Qwen3_5ForConditionalGeneration" || a == "qwen3_5") return parse_hf_text_config(j, gen, a, where);
  GB_RETURN_IF_ERROR(set_hf_arch(a, where, &c));
  GB_RETURN_IF_ERROR(parse_hf_shape(j, where, &c));
  GB_RETURN_IF_ERROR(parse_hf_rope(j, where, &c));
  GB_RETURN_IF_ERROR(parse_hf_variant(j, where, &c));
  GB_RETURN_IF_ERROR(parse_hf_special_ids(j, gen, where, &c));
  c.layer_kinds.assign(c.n_layers > 0 ? c.n_layers : 0, LayerKind::kAttention);
  if (c.arch == Arch::kQwen35) GB_RETURN_IF_ERROR(parse_qwen35_hf(j, where, &c));
  GB_RETURN_IF_ERROR(c.validate().with_context(where));
  return c;
}

namespace {

// "<arch>.<key>" lookups in GGUF metadata; errors name the whole key.
struct GgufKeys {
  const std::map<std::string, json>& md;
  const std::string& arch;
  const std::string& where;

  Status get_size(const std::string& key, int64_t fallback, bool required, SizeBound b, int64_t* out) const {
    GB_RETURN_IF_ERROR(get(key, fallback, required, out));
    if (*out < b.lo || *out > b.hi) return out_of_bound(where, arch + "." + key, *out, b);
    return Status::ok();
  }

  Status get(const std::string& key, int64_t fallback, bool required, int64_t* out) const {
    auto it = md.find(arch + "." + key);
    if (it == md.end()) {
      if (required) return Status::error(where + ": required key '" + arch + "." + key + "' is missing");
      *out = fallback;
      return Status::ok();
    }
    if (!it->second.is_number_integer()) {
      return Status::error(where + ": '" + arch + "." + key + "' must be one integer, found " +
                           it->second.dump().substr(0, 80));
    }
    *out = it->second.get<int64_t>();
    return Status::ok();
  }

  Status getf(const std::string& key, double fallback, double* out) const {
    auto it = md.find(arch + "." + key);
    if (it == md.end()) {
      *out = fallback;
      return Status::ok();
    }
    if (!it->second.is_number()) return Status::error(where + ": '" + arch + "." + key + "' must be a number");
    *out = it->second.get<double>();
    return Status::ok();
  }
};

Status set_gguf_arch(const std::string& a, const std::string& where, ModelConfig* c) {
  if (a == "llama") {
    c->arch = Arch::kLlama;
    c->rope_style = ops::RopeStyle::kPairs;  // the converter permuted q/k rows for GGML's pair rope
  } else if (a == "qwen2") {
    c->arch = Arch::kQwen2;
    c->rope_style = ops::RopeStyle::kNeox;
  } else if (a == "qwen3") {
    c->arch = Arch::kQwen3;
    c->rope_style = ops::RopeStyle::kNeox;
  } else if (a == "qwen35") {
    c->arch = Arch::kQwen35;
    c->rope_style = ops::RopeStyle::kNeox;
  } else {
    return Status::error(where + ": unsupported architecture '" + a + "' (supported: llama, qwen2, qwen3, qwen35)");
  }
  return Status::ok();
}

// Layer count, widths, heads (key and value lengths must agree), context, vocabulary, rotated dims.
Status parse_gguf_shape(const GgufKeys& k, int64_t vocab_rows, ModelConfig* c) {
  int64_t v = 0;
  GB_RETURN_IF_ERROR(k.get_size("block_count", 0, true, kLayersBound, &v));
  c->n_layers = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(k.get_size("embedding_length", 0, true, kEmbdBound, &v));
  c->n_embd = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(k.get_size("feed_forward_length", 0, true, kFfBound, &v));
  c->n_ff = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(k.get_size("attention.head_count", 0, true, kHeadsBound, &v));
  c->n_heads = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(k.get_size("attention.head_count_kv", c->n_heads, false, kHeadsBound, &v));
  c->n_kv_heads = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(k.get_size("attention.key_length", c->n_embd / c->n_heads, false, kHeadDimBound, &v));
  c->head_dim = static_cast<int32_t>(v);
  int64_t value_length = 0;
  GB_RETURN_IF_ERROR(k.get("attention.value_length", c->head_dim, false, &value_length));
  if (value_length != c->head_dim) {
    return Status::error(k.where + ": key_length " + std::to_string(c->head_dim) + " != value_length " +
                         std::to_string(value_length) + " is not supported");
  }
  GB_RETURN_IF_ERROR(k.get("context_length", 2048, false, &v));
  c->max_pos = static_cast<int32_t>(v);
  GB_RETURN_IF_ERROR(k.get_size("vocab_size", vocab_rows, false, kVocabBound, &v));
  c->vocab = static_cast<int32_t>(v);
  // Sizes the rope tables; validate() then bounds it by head_dim.
  GB_RETURN_IF_ERROR(k.get_size("rope.dimension_count", c->head_dim, false, kHeadDimBound, &v));
  c->rope_dims = static_cast<int32_t>(v);
  return Status::ok();
}

// rope.scaling.type "linear" as divisors; llama3 scaling arrives as the rope_freqs tensor instead.
Status parse_gguf_rope_scaling(const GgufKeys& k, const std::vector<float>* rope_freqs, ModelConfig* c) {
  if (auto it = k.md.find(k.arch + ".rope.scaling.type"); it != k.md.end() && it->second.is_string()) {
    const std::string type = it->second.get<std::string>();
    if (type == "linear") {
      double factor = 1.0;
      GB_RETURN_IF_ERROR(k.getf("rope.scaling.factor", 1.0, &factor));
      if (!(factor > 0)) return Status::error(k.where + ": rope.scaling.factor must be positive");
      c->rope_freq_divisors.assign(c->rope_dims / 2, static_cast<float>(factor));
    } else if (type != "none") {
      return Status::error(k.where + ": rope scaling type '" + type +
                           "' is not supported (none, linear; llama3 via rope_freqs)");
    }
  }
  if (rope_freqs != nullptr) c->rope_freq_divisors = *rope_freqs;
  return Status::ok();
}

// Appends the token id under `key` (when present and not already listed).
Status add_gguf_token_id(const std::map<std::string, json>& md, const char* key, const std::string& where,
                         std::vector<int32_t>* out) {
  auto it = md.find(key);
  if (it == md.end()) return Status::ok();
  if (!it->second.is_number_integer() || it->second.get<int64_t>() < 0) {
    return Status::error(where + ": '" + key + "' must be a token id");
  }
  const int32_t t = static_cast<int32_t>(it->second.get<int64_t>());
  for (int32_t e : *out) {
    if (e == t) return Status::ok();
  }
  out->push_back(t);
  return Status::ok();
}

// llama.cpp's qwen35 keys: ssm.state_size is the key head dim (and, in llama.cpp, the value
// head dim), ssm.group_count the key heads, ssm.time_step_rank the value heads,
// ssm.inner_size = value heads · value head dim. Layer il is full attention iff
// (il + 1) % full_attention_interval == 0.
Status parse_gguf_qwen35(const GgufKeys& k, ModelConfig* c) {
  c->attn_output_gate = true;
  c->lin_v_tiled = true;
  int64_t state = 0, groups = 0, rank = 0, inner = 0, kernel = 0, interval = 0;
  GB_RETURN_IF_ERROR(k.get("ssm.state_size", 0, true, &state));
  GB_RETURN_IF_ERROR(k.get("ssm.group_count", 0, true, &groups));
  GB_RETURN_IF_ERROR(k.get("ssm.time_step_rank", 0, true, &rank));
  GB_RETURN_IF_ERROR(k.get("ssm.inner_size", 0, true, &inner));
  GB_RETURN_IF_ERROR(k.get("ssm.conv_kernel", 4, false, &kernel));
  GB_RETURN_IF_ERROR(k.get("full_attention_interval", 4, false, &interval));
  if (rank <= 0 || inner % rank != 0 || interval <= 0) {
    return Status::error(k.where + ": qwen35.ssm.inner_size " + std::to_string(inner) +
                         " is not a multiple of ssm.time_step_rank " + std::to_string(rank) +
                         ", or full_attention_interval " + std::to_string(interval) + " is not positive");
  }
  c->lin_k_dim = static_cast<int32_t>(state);
  c->lin_k_heads = static_cast<int32_t>(groups);
  c->lin_v_heads = static_cast<int32_t>(rank);
  c->lin_v_dim = static_cast<int32_t>(inner / rank);
  c->lin_conv_kernel = static_cast<int32_t>(kernel);
  for (int32_t il = 0; il < c->n_layers; ++il) {
    c->layer_kinds[il] = (il + 1) % interval == 0 ? LayerKind::kAttention : LayerKind::kLinearAttention;
  }
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_gguf_config(const std::map<std::string, json>& md, int64_t vocab_rows,
                                      const std::vector<float>* rope_freqs) {
  const std::string where = "GGUF metadata";
  ModelConfig c;
  auto arch_it = md.find("general.architecture");
  if (arch_it == md.end() || !arch_it->second.is_string()) {
    return Status::error(where + ": 'general.architecture' is missing");
  }
  const std::string a = arch_it->second.get<std::string>();
  c.arch_name = a;
  GB_RETURN_IF_ERROR(set_gguf_arch(a, where, &c));
  const GgufKeys keys{md, a, where};
  GB_RETURN_IF_ERROR(parse_gguf_shape(keys, vocab_rows, &c));
  double d = 0;
  GB_RETURN_IF_ERROR(keys.getf("rope.freq_base", 10000.0, &c.rope_theta));
  GB_RETURN_IF_ERROR(keys.getf("attention.layer_norm_rms_epsilon", 1e-5, &d));
  c.rms_eps = static_cast<float>(d);
  GB_RETURN_IF_ERROR(parse_gguf_rope_scaling(keys, rope_freqs, &c));

  c.qkv_bias = false;  // decided by the loader from the tensors present (Qwen2 always has them)
  c.qk_norm = c.arch == Arch::kQwen3 || c.arch == Arch::kQwen35;
  GB_RETURN_IF_ERROR(add_gguf_token_id(md, "tokenizer.ggml.eos_token_id", where, &c.eos_ids));
  GB_RETURN_IF_ERROR(add_gguf_token_id(md, "tokenizer.ggml.eot_token_id", where, &c.eos_ids));
  std::vector<int32_t> bos;
  GB_RETURN_IF_ERROR(add_gguf_token_id(md, "tokenizer.ggml.bos_token_id", where, &bos));
  c.bos_id = bos.empty() ? -1 : bos[0];
  c.layer_kinds.assign(c.n_layers > 0 ? c.n_layers : 0, LayerKind::kAttention);
  if (c.arch == Arch::kQwen35) GB_RETURN_IF_ERROR(parse_gguf_qwen35(keys, &c));
  GB_RETURN_IF_ERROR(c.validate().with_context(where));
  return c;
}

}  // namespace gb

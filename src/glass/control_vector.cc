// Control-vector GGUF loading.
#include "glass/control_vector.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "formats/gguf.h"

namespace gb {

Result<ControlVector> load_control_vector(const std::string& path, const ModelConfig& c, std::string name) {
  GB_ASSIGN_OR_RETURN(GgufFile f, read_gguf(path));
  auto bad = [&](const std::string& m) { return Status::error("control vector " + path + ": " + m); };
  ControlVector cv;
  cv.name = std::move(name);
  cv.n_embd = c.n_embd;
  if (const auto* arch = f.find("general.architecture");
      arch != nullptr && arch->is_string() && arch->get<std::string>() != "controlvector") {
    return bad("general.architecture is '" + arch->get<std::string>() + "', not 'controlvector'");
  }
  if (const auto* hint = f.find("controlvector.model_hint"); hint != nullptr && hint->is_string()) {
    cv.model_hint = hint->get<std::string>();
  }
  for (const TensorView& t : f.tensors) {
    const std::string prefix = "direction.";
    if (t.name.rfind(prefix, 0) != 0) return bad("tensor '" + t.name + "' is not a direction.N tensor");
    const std::string num = t.name.substr(prefix.size());
    if (num.empty() || num.size() > 9 ||
        !std::all_of(num.begin(), num.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      return bad("tensor '" + t.name + "' has no layer number");
    }
    const int32_t layer = std::stoi(num);
    if (layer == 0) return bad("direction.0 is invalid: llama.cpp numbers steerable layers from 1 (output of block N)");
    if (t.dtype != DType::kF32)
      return bad(t.name + " is " + std::string(dtype_name(t.dtype)) + ", directions must be F32");
    if (t.numel() != c.n_embd || t.nbytes != static_cast<size_t>(c.n_embd) * 4) {
      return bad(t.name + " has " + std::to_string(t.numel()) + " values, the model's hidden size is " +
                 std::to_string(c.n_embd));
    }
    if (layer >= c.n_layers) {
      cv.ignored_layers.push_back(layer);
      continue;
    }
    std::vector<float> v(static_cast<size_t>(c.n_embd));
    std::memcpy(v.data(), t.data, t.nbytes);
    for (float x : v) {
      if (!std::isfinite(x)) return bad(t.name + " has a non-finite value");
    }
    for (const auto& d : cv.directions) {
      if (d.first == layer) return bad(t.name + " appears twice");
    }
    cv.directions.emplace_back(layer, std::move(v));
  }
  if (cv.directions.empty())
    return bad("no direction.N tensor for any of the model's " + std::to_string(c.n_layers) + " layers");
  std::sort(cv.directions.begin(), cv.directions.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(cv.ignored_layers.begin(), cv.ignored_layers.end());
  return cv;
}

std::vector<Intervention> control_vector_interventions(const ControlVector& cv, float strength,
                                                       const TokenSelector& tokens) {
  std::vector<Intervention> out;
  for (const auto& [layer, v] : cv.directions) {
    Intervention iv;
    iv.op = InterventionOp::kAdd;
    iv.point = HookPoint::kResidPost;
    iv.layer_first = iv.layer_last = layer;
    iv.strength = strength;
    iv.vector = v;
    iv.tokens = tokens;
    iv.label = "control_vector:" + cv.name;
    out.push_back(std::move(iv));
  }
  return out;
}

}  // namespace gb

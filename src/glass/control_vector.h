// Control vectors in the llama.cpp / repeng GGUF format (general.architecture = "controlvector",
// one F32 tensor "direction.N" of n_embd values per steered layer), turned into glass-box `add`
// interventions so each request can carry its own, at its own strength.
//
// Layer mapping (llama.cpp src/llama-adapter.cpp): the loader puts direction.N into slot N of a
// per-layer table whose slot 0 never exists, and the layer loop adds slot il to the output of
// block il (0-based il, the `l_out` tensor). So direction.N is added at resid_post of 0-based
// layer N (= Hugging Face model.layers[N] output, = hidden_states[N + 1]); direction.0 is invalid
// (llama.cpp rejects it) and the output of layer 0 cannot be steered. repeng exports
// direction.{i} for model.layers[i] (0-based), the same mapping. llama.cpp never applies a slot
// at or past n_layers (its cvector-generator writes direction.1 .. direction.n_layers); we ignore
// those too and list them in ignored_layers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "glass/spec.h"
#include "model/config.h"

namespace gb {

struct ControlVector {
  std::string name;
  std::string model_hint;  // controlvector.model_hint, when present
  int32_t n_embd = 0;
  std::vector<std::pair<int32_t, std::vector<float>>> directions;  // (0-based layer = N, [n_embd] f32), by layer
  std::vector<int32_t> ignored_layers;  // direction.N with N >= n_layers (never applied, as in llama.cpp)
};

// Reads a control-vector GGUF for model c. Errors name the file and tensor: not a GGUF, a tensor
// that is not direction.N, direction.0, a non-F32 or wrongly sized direction, a duplicate layer,
// non-finite values, no direction at all.
Result<ControlVector> load_control_vector(const std::string& path, const ModelConfig& c, std::string name);

// One `add` intervention per direction: x ← x + strength · direction.N at resid_post of layer N,
// labelled "control_vector:<name>". Several vectors add up (llama.cpp sums them the same way).
std::vector<Intervention> control_vector_interventions(const ControlVector& cv, float strength,
                                                       const TokenSelector& tokens = {});

}  // namespace gb

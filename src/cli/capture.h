// Hidden states of a prompt for the local tools (dump, scan's heat map): the prompt runs as one
// request through the engine step `serve` runs, and the glass box's captures copy out every
// chosen (point, layer) row at every token — the one observation path, no second forward pass.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "analysis/run.h"
#include "core/status.h"
#include "model/model.h"

namespace gb::cli {

using analysis::CapturedTensor;
using analysis::CapturedTensors;

// Runs ids through m once and returns, keyed by hook_key ("layers.3.resid_post", "logits"), the
// rows of every (point, layer) asked for (layer ignored for global points); with steer's
// interventions applied (null: none).
Result<CapturedTensors> capture_hidden_states(Model& m, const std::vector<int32_t>& ids,
                                              const std::vector<std::pair<HookPoint, int32_t>>& keys,
                                              std::shared_ptr<const GlassSpec> steer = nullptr);

}  // namespace gb::cli

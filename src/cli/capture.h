// Hidden states of a prompt for the local tools (dump, lens): the prompt runs as one request
// through the engine step `serve` runs, and the glass box's captures copy out every chosen
// (point, layer) row at every token — the one observation path, no second forward pass.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "glass/report.h"
#include "model/model.h"

namespace gb::cli {

struct CapturedTensor {
  HookPoint point;
  int32_t layer;  // -1 for embed, final_norm, logits
  int64_t width = 0;
  std::vector<float> data;  // [n_tokens, width], rows in position order
};

// Runs ids through m once and returns, keyed by hook_key ("layers.3.resid_post", "logits"), the
// rows of every (point, layer) asked for (layer ignored for global points). layer_time (may be
// null): the same run's time per layer (observe.layer_time).
Result<std::map<std::string, CapturedTensor>> capture_hidden_states(
    Model& m, const std::vector<int32_t>& ids, const std::vector<std::pair<HookPoint, int32_t>>& keys,
    LayerTime* layer_time = nullptr);

}  // namespace gb::cli

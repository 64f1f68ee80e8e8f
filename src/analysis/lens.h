// The logit lens (nostalgebraist 2020; the picture the tuned lens refines): every layer's
// resid_post at every position of a prompt put through the model's own output head (final
// RMSNorm, lm_head): the top-k next tokens with their probabilities, and the entropy of that
// distribution. The hidden states come from one engine request that captures them; at the last
// layer the lens is the model's own next-token distribution.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/run.h"
#include "engine/sampler.h"

namespace gb::analysis {

struct LensCell {
  std::vector<TokenLogprob> top;  // most likely first (logprobs)
  double entropy = 0;             // nats
};
// [layer][position]
using LensGrid = std::vector<std::vector<LensCell>>;

// The final norm and lm_head applied to x[n, n_embd] → logits[n, vocab] (Model::output_head).
using OutputHead = std::function<Status(const float* x, int64_t n, float* logits)>;

// Runs the prompt with resid_post captured at every layer and position and applies the head.
Result<LensGrid> run_lens(const Runner& run, const ModelConfig& c, const std::vector<int32_t>& prompt,
                          const OutputHead& head, int32_t top_k);

// {"tokens": [{id, text}], "layers": [{layer, point, positions: [{top: [{id, text, prob}], entropy}]}]}
nlohmann::json lens_json(const LensGrid& g, const std::vector<int32_t>& prompt,
                         const std::function<std::string(int32_t id)>& text);

}  // namespace gb::analysis

// The logit lens (lens.h).
#include "analysis/lens.h"

#include <algorithm>
#include <cmath>
#include <span>

namespace gb::analysis {

Result<LensGrid> run_lens(const Runner& run, const ModelConfig& c, const std::vector<int32_t>& prompt,
                          const OutputHead& head, int32_t top_k) {
  if (prompt.empty()) return Status::error("the prompt encodes to no tokens");
  std::vector<std::pair<HookPoint, int32_t>> keys;
  for (int32_t l = 0; l < c.n_layers; ++l) keys.emplace_back(HookPoint::kResidPost, l);
  const auto n = static_cast<int64_t>(prompt.size());
  GB_ASSIGN_OR_RETURN(auto spec, capture_spec(c, static_cast<int32_t>(n), keys));
  std::vector<GenerationRequest> reqs;
  reqs.push_back(observe_request("lens", prompt, spec));
  GB_ASSIGN_OR_RETURN(std::vector<RunOutput> outs, run(std::move(reqs)));
  if (outs.empty() || outs[0].glass == nullptr) return Status::error("the engine returned no glass report");
  GB_ASSIGN_OR_RETURN(CapturedTensors captured, captured_tensors(*outs[0].glass));

  // The head runs on a few rows at a time: the logits buffer stays [kRows, vocab].
  constexpr int64_t kRows = 16;
  const int64_t vocab = c.vocab;
  std::vector<float> logits(static_cast<size_t>(std::min(n, kRows) * vocab)), lp(static_cast<size_t>(vocab));
  LensGrid cells(static_cast<size_t>(c.n_layers), std::vector<LensCell>(static_cast<size_t>(n)));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const CapturedTensor& t = captured.at(hook_key(HookPoint::kResidPost, l));
    for (int64_t p0 = 0; p0 < n; p0 += kRows) {
      const int64_t rows = std::min(kRows, n - p0);
      GB_RETURN_IF_ERROR(head(t.data.data() + p0 * t.width, rows, logits.data()));
      for (int64_t i = 0; i < rows; ++i) {
        log_softmax(std::span<const float>(logits.data() + i * vocab, static_cast<size_t>(vocab)), lp);
        LensCell& cell = cells[static_cast<size_t>(l)][static_cast<size_t>(p0 + i)];
        top_logprobs(lp, top_k, &cell.top);
        for (float v : lp) cell.entropy -= v > -INFINITY ? std::exp(static_cast<double>(v)) * v : 0.0;
      }
    }
  }
  return cells;
}

nlohmann::json lens_json(const LensGrid& g, const std::vector<int32_t>& prompt,
                         const std::function<std::string(int32_t id)>& text) {
  nlohmann::json j;
  j["tokens"] = nlohmann::json::array();
  for (int32_t id : prompt) j["tokens"].push_back({{"id", id}, {"text", text(id)}});
  j["layers"] = nlohmann::json::array();
  for (size_t l = 0; l < g.size(); ++l) {
    nlohmann::json positions = nlohmann::json::array();
    for (const LensCell& cell : g[l]) {
      nlohmann::json top = nlohmann::json::array();
      for (const TokenLogprob& a : cell.top)
        top.push_back({{"id", a.token}, {"text", text(a.token)}, {"prob", std::exp(static_cast<double>(a.logprob))}});
      positions.push_back({{"top", top}, {"entropy", cell.entropy}});
    }
    j["layers"].push_back({{"layer", l}, {"point", "resid_post"}, {"positions", positions}});
  }
  return j;
}

}  // namespace gb::analysis

// capture_hidden_states (capture.h).
#include "cli/capture.h"

#include <algorithm>

namespace gb::cli {

Result<CapturedTensors> capture_hidden_states(Model& m, const std::vector<int32_t>& ids,
                                              const std::vector<std::pair<HookPoint, int32_t>>& keys,
                                              std::shared_ptr<const GlassSpec> steer) {
  const auto n = static_cast<int32_t>(ids.size());
  GB_ASSIGN_OR_RETURN(std::shared_ptr<const GlassSpec> spec, analysis::capture_spec(m.config(), n, keys));
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      analysis::local_engine(m, 1, std::min(n, m.config().max_pos - 1)));
  std::vector<GenerationRequest> reqs;
  reqs.push_back(analysis::observe_request("capture", ids, spec));
  GB_ASSIGN_OR_RETURN(
      std::vector<analysis::RunOutput> outs,
      analysis::with_interventions(analysis::local_runner(*engine), std::move(steer), m.config())(std::move(reqs)));
  if (outs.empty() || outs[0].glass == nullptr) return Status::error("the engine returned no glass report");
  return analysis::captured_tensors(*outs[0].glass);
}

}  // namespace gb::cli

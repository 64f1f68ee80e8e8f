// capture_hidden_states (capture.h).
#include "cli/capture.h"

#include <algorithm>

#include "engine/engine.h"

namespace gb::cli {

Result<std::map<std::string, CapturedTensor>> capture_hidden_states(
    Model& m, const std::vector<int32_t>& ids, const std::vector<std::pair<HookPoint, int32_t>>& keys,
    LayerTime* layer_time) {
  const ModelConfig& c = m.config();
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.layers = {0};
  spec.observe.detect_massive = false;
  spec.observe.layer_time = layer_time != nullptr;
  const int32_t n = static_cast<int32_t>(ids.size());
  for (const auto& [p, l] : keys) {
    for (int32_t pos = 0; pos < n; ++pos) spec.observe.captures.push_back({p, is_layer_point(p) ? l : -1, pos});
  }
  spec.observe.max_capture_floats = INT64_MAX;  // a local tool: every requested row
  GB_ASSIGN_OR_RETURN(std::shared_ptr<const GlassSpec> resolved, resolve_glass_spec(std::move(spec), c));

  EngineConfig ec;
  ec.scheduler.max_num_seqs = 1;
  ec.scheduler.max_num_batched_tokens = m.max_batch_tokens();
  ec.max_model_len = std::min(n + 1, c.max_pos);  // the prompt and the one token the engine samples after it
  GB_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(&m, ec));
  GenerationRequest request;
  request.id = "capture";
  request.prompt = ids;
  request.max_tokens = 1;
  request.sampling.temperature = 0;
  request.ignore_eos = true;
  request.glass = resolved;
  auto channel = std::make_shared<RequestChannel>();
  GB_RETURN_IF_ERROR(engine->submit(std::move(request), channel));
  GB_RETURN_IF_ERROR(engine->run_until_idle());
  std::shared_ptr<const GlassReport> report;
  for (GenerationEvent ev; channel->pop(&ev, std::chrono::milliseconds(0));) {
    if (ev.finish == FinishReason::kError) return Status::error(ev.error);
    if (ev.glass != nullptr) report = ev.glass;
  }
  if (report == nullptr) return Status::error("the engine returned no glass report");
  if (layer_time != nullptr) *layer_time = report->layer_time;

  std::map<std::string, CapturedTensor> tensors;
  for (const Capture& cap : report->captures) {
    if (!cap.filled)
      return Status::error("no " + hook_key(cap.point, cap.layer) + " row for token " + std::to_string(cap.position));
    CapturedTensor& t = tensors[hook_key(cap.point, cap.layer)];
    t.point = cap.point;
    t.layer = cap.layer;
    t.width = static_cast<int64_t>(cap.data.size());
    t.data.insert(t.data.end(), cap.data.begin(), cap.data.end());  // captures are in position order per key
  }
  return tensors;
}

}  // namespace gb::cli

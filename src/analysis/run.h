// Running the requests of an analysis: each analysis is a set of ordinary engine requests with a
// glass spec (observation, captures, interventions), run to their end on whatever engine the
// caller has — a local one for the CLI, the serving engine for POST /v1/glassbox/analyze. A Runner
// hides which; the analyses only build requests and fold what comes back.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace gb::analysis {

// What one request produced.
struct RunOutput {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::vector<GeneratedToken> prompt_logprobs;
  std::shared_ptr<const GlassReport> glass;  // null without a glass spec
};

// Runs the requests (together or in any order) to their end; outputs in request order. A request
// that ends in an error fails the whole run with its message.
using Runner = std::function<Result<std::vector<RunOutput>>(std::vector<GenerationRequest>)>;

// A runner that adds the interventions of spec (resolved against c; null or none: run as is) to
// every request, after the request's own: the analyses of a steered model (the CLI's --glassbox).
// spec's observation is not used; each analysis observes what it needs.
Runner with_interventions(Runner run, std::shared_ptr<const GlassSpec> spec, const ModelConfig& c);

// Folds one event of a request into *out; an error event becomes the error.
Status absorb_event(GenerationEvent ev, RunOutput* out);
// Folds the events of a finished request's channel into *out.
Status collect_events(RequestChannel& channel, RunOutput* out);

// A runner over a local engine (submit all, step until every request ended). With a label and
// stderr a terminal, a progress line ("label: 3 / 16 requests, 12 s") while it runs.
Runner local_runner(Engine& engine, std::string progress_label = "");
// A local engine on m for prompts of up to max_len tokens (+ one generated), max_seqs at once.
Result<std::unique_ptr<Engine>> local_engine(Model& m, int32_t max_seqs, int32_t max_len);

// A request that runs prompt once under spec: greedy, one token (never computed), EOS ignored.
GenerationRequest observe_request(std::string id, std::vector<int32_t> prompt, std::shared_ptr<const GlassSpec> spec);
// A request that scores prompt (prompt logprobs, no token generated) under spec (null: none).
GenerationRequest score_request(std::string id, std::vector<int32_t> prompt, std::shared_ptr<const GlassSpec> spec);

// Captures of hidden states: every (point, layer) of keys at each of the first n_tokens positions.
struct CapturedTensor {
  HookPoint point = HookPoint::kResidPost;
  int32_t layer = 0;  // -1 for embed, final_norm, logits
  int64_t width = 0;
  std::vector<float> data;  // [n_tokens, width], rows in position order
};
using CapturedTensors = std::map<std::string, CapturedTensor>;  // by hook_key ("layers.3.resid_post")
// The spec that captures them (no statistics, no events; the capture cap lifted: only the local
// tools and the analyses, which bound their own sizes, use it).
Result<std::shared_ptr<const GlassSpec>> capture_spec(const ModelConfig& c, int32_t n_tokens,
                                                      const std::vector<std::pair<HookPoint, int32_t>>& keys);
// The captured rows of a report, by key; an error when a row was never computed.
Result<CapturedTensors> captured_tensors(const GlassReport& report);

// exp(−mean log p) over every scored token of the outputs (score_request).
Result<double> perplexity(const std::vector<RunOutput>& outs);

}  // namespace gb::analysis

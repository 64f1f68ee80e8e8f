// Runners, request builders and captures of the analyses (run.h).
#include "analysis/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include <unistd.h>

namespace gb::analysis {

Status absorb_event(GenerationEvent ev, RunOutput* out) {
  for (const GeneratedToken& t : ev.tokens) out->tokens.push_back(t.token);
  for (GeneratedToken& t : ev.prompt_logprobs) out->prompt_logprobs.push_back(std::move(t));
  if (ev.glass != nullptr) out->glass = std::move(ev.glass);
  if (ev.finish != FinishReason::kNone) out->finish = ev.finish;
  if (ev.finish == FinishReason::kError) return Status::error(ev.error);
  return Status::ok();
}

Status collect_events(RequestChannel& channel, RunOutput* out) {
  for (GenerationEvent ev; channel.pop(&ev, std::chrono::milliseconds(0));) {
    GB_RETURN_IF_ERROR(absorb_event(std::move(ev), out));
  }
  return Status::ok();
}

Runner local_runner(Engine& engine, std::string progress_label) {
  const bool tty = !progress_label.empty() && isatty(2) != 0;
  return [&engine, tty,
          label = std::move(progress_label)](std::vector<GenerationRequest> reqs) -> Result<std::vector<RunOutput>> {
    std::vector<std::shared_ptr<RequestChannel>> channels;
    for (GenerationRequest& r : reqs) {
      channels.push_back(std::make_shared<RequestChannel>());
      GB_RETURN_IF_ERROR(engine.submit(std::move(r), channels.back()));
    }
    std::vector<RunOutput> outs(channels.size());
    const auto start = std::chrono::steady_clock::now();
    size_t done = 0, shown = SIZE_MAX;
    auto show = [&] {
      if (!tty || done == shown) return;
      shown = done;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "\r%s: %zu / %zu requests, %.0f s", label.c_str(), done, outs.size(), s);
    };
    show();
    for (bool worked = true; done < outs.size();) {
      if (!worked) return Status::error("the engine went idle with requests unfinished");
      GB_ASSIGN_OR_RETURN(worked, engine.step());
      done = 0;
      for (size_t i = 0; i < channels.size(); ++i) {
        GB_RETURN_IF_ERROR(collect_events(*channels[i], &outs[i]));
        done += outs[i].finish != FinishReason::kNone;
      }
      show();
    }
    if (tty) std::fprintf(stderr, "\n");
    return outs;
  };
}

Runner with_interventions(Runner run, std::shared_ptr<const GlassSpec> spec, const ModelConfig& c) {
  if (spec == nullptr || spec->interventions.empty()) return run;
  return [run = std::move(run), spec = std::move(spec), &c](std::vector<GenerationRequest> reqs) {
    for (GenerationRequest& r : reqs) {
      GlassSpec merged = r.glass != nullptr ? *r.glass : GlassSpec{};
      merged.interventions.insert(merged.interventions.end(), spec->interventions.begin(), spec->interventions.end());
      r.glass = seal_resolved_spec(std::move(merged), c);
    }
    return run(std::move(reqs));
  };
}

Result<std::unique_ptr<Engine>> local_engine(Model& m, int32_t max_seqs, int32_t max_len) {
  if (max_len + 1 > m.config().max_pos)
    return Status::error("a prompt of " + std::to_string(max_len) + " tokens does not fit the model's context of " +
                         std::to_string(m.config().max_pos));
  EngineConfig ec;
  ec.scheduler.max_num_seqs = std::max(1, max_seqs);
  ec.scheduler.max_num_batched_tokens = m.max_batch_tokens();
  ec.max_model_len = max_len + 1;
  return Engine::create(&m, ec);
}

GenerationRequest observe_request(std::string id, std::vector<int32_t> prompt, std::shared_ptr<const GlassSpec> spec) {
  GenerationRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = 1;  // the prompt is what is observed; the one sampled token is never computed
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.glass = std::move(spec);
  return r;
}

GenerationRequest score_request(std::string id, std::vector<int32_t> prompt, std::shared_ptr<const GlassSpec> spec) {
  GenerationRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = 0;
  r.prompt_logprobs = 0;
  r.sampling.temperature = 0;
  r.glass = std::move(spec);
  return r;
}

Result<std::shared_ptr<const GlassSpec>> capture_spec(const ModelConfig& c, int32_t n_tokens,
                                                      const std::vector<std::pair<HookPoint, int32_t>>& keys) {
  GlassSpec spec;
  spec.observe.enabled = true;
  spec.observe.layers = {0};
  spec.observe.detect_massive = false;
  for (const auto& [p, l] : keys) {
    for (int32_t pos = 0; pos < n_tokens; ++pos) spec.observe.captures.push_back({p, is_layer_point(p) ? l : -1, pos});
  }
  spec.observe.max_capture_floats = INT64_MAX;
  return resolve_glass_spec(std::move(spec), c);
}

Result<CapturedTensors> captured_tensors(const GlassReport& report) {
  CapturedTensors tensors;
  for (const Capture& cap : report.captures) {
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

Result<double> perplexity(const std::vector<RunOutput>& outs) {
  double logp = 0;
  int64_t n = 0;
  for (const RunOutput& o : outs) {
    for (const GeneratedToken& t : o.prompt_logprobs) logp += t.logprob, ++n;
  }
  if (n == 0) return Status::error("the prompts have no token after the first to score");
  return std::exp(-logp / static_cast<double>(n));
}

}  // namespace gb::analysis

// The contract between the server and the engine: what a generation request is, and the
// events the engine thread streams back through a per-request channel (llama.cpp server's
// shape: HTTP threads enqueue, one engine thread batches, per-request channels stream back).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/monitor.h"
#include "engine/sampler.h"
#include "glass/glass.h"

namespace gb {

namespace patch {
struct Patch;
}

using Clock = std::chrono::steady_clock;

enum class FinishReason { kNone, kStop, kLength, kCancelled, kTimeout, kError };

inline const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kTimeout: return "timeout";
    case FinishReason::kError: return "error";
  }
  return "?";
}

// Why the engine refused or failed a request, for the server to map to a status (the message says
// it for people). Set by EngineApi::submit (kInvalidRequest, kQueueFull, kDraining) and on a last
// event whose finish is not kStop / kLength.
enum class EngineErrorCode : uint8_t {
  kNone,
  kInvalidRequest,  // submit: the request cannot run on this engine (prompt, max_tokens, sampling, glass spec) → 400
  kQueueFull,       // submit: max_queue requests are waiting → 429
  kDraining,        // submit: the engine is shutting down; or a running request cancelled at the drain deadline → 503
  kCancelled,       // the consumer cancelled (RequestChannel::cancel) → 499, the client left
  kTimeout,         // GenerationRequest::deadline passed → 504 (or the answer so far with finish "timeout")
  kNonFinite,       // a hidden state or the logits became NaN/Inf (the message names the layer and point) →
                    // 400 when the request had interventions (they did it), else 500
  kInternal,        // the forward pass failed (an engine defect) → 500
};
// "none", "invalid_request", ...
inline const char* engine_error_code_name(EngineErrorCode c) {
  switch (c) {
    case EngineErrorCode::kNone: return "none";
    case EngineErrorCode::kInvalidRequest: return "invalid_request";
    case EngineErrorCode::kQueueFull: return "queue_full";
    case EngineErrorCode::kDraining: return "draining";
    case EngineErrorCode::kCancelled: return "cancelled";
    case EngineErrorCode::kTimeout: return "timeout";
    case EngineErrorCode::kNonFinite: return "non_finite";
    case EngineErrorCode::kInternal: return "internal";
  }
  return "?";
}

struct GenerationRequest {
  std::string id;               // unique; used in logs and metrics, never the prompt
  std::vector<int32_t> prompt;  // token ids, already templated and tokenized
  SamplingParams sampling;
  int32_t max_tokens = 16;  // > 0 (0 with prompt_logprobs: score the prompt only); prompt + max_tokens <= max model len
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // stop on these besides the model's EOS ids
  int32_t top_logprobs = -1;            // -1: no logprobs; k >= 0: sampled token's logprob + k alternatives
  // -1: none; k >= 0: the logprob of every prompt token after the first given the ones before it,
  // + k alternatives (vLLM's prompt_logprobs; scoring a text). Every prompt row is computed: no
  // prefix-cache hits for it.
  int32_t prompt_logprobs = -1;
  uint64_t cache_salt = 0;  // mixed into prefix-cache block hashes (the engine mixes in the glass spec's)
  // The weight variant the request runs on: 0 = the base, else an id from Model::add_variant
  // (validated at submit). The engine mixes it into cache_salt: no KV block is shared across variants.
  int32_t variant = 0;
  Clock::time_point deadline = Clock::time_point::max();  // cancelled with kTimeout when passed
  // The glass box for this request (observation + interventions), made by resolve_glass_spec
  // against this engine's model; null: none (the request runs exactly as a plain one). Shared and
  // immutable: many requests may point at one spec.
  std::shared_ptr<const GlassSpec> glass;
};

// One message from the engine thread to the request's consumer.
struct GenerationEvent {
  std::vector<GeneratedToken> tokens;  // new tokens since the previous event
  // With prompt_logprobs: prompt tokens 1, 2, ... (token = the prompt token, its logprob given the
  // tokens before it, top alternatives), continuing across events, all before the first token.
  std::vector<GeneratedToken> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;            // set on the last event only
  std::string error;                                    // with kError: what went wrong
  EngineErrorCode error_code = EngineErrorCode::kNone;  // on the last event: why it ended, unless kStop / kLength
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
  // On the last event of a request that had a glass spec (whatever the finish reason): its
  // statistics per (layer, point), massive-activation events, captures and the interventions as
  // applied. Null otherwise.
  std::shared_ptr<const GlassReport> glass;
};

// Single producer (engine thread), single consumer (an HTTP thread). The consumer cancels by
// setting cancelled; the engine notices at its next step and frees the sequence's blocks.
class RequestChannel {
 public:
  void push(GenerationEvent event) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(std::move(event));
    }
    cv_.notify_one();
  }

  // Waits until an event arrives or the timeout passes; false on timeout. A zero timeout only
  // looks: condition_variable::wait_for(0) still enters the kernel (a futex wait on an expired
  // deadline), and on a KVM guest that measured ~70 µs a call (Zen 5) — paid once per token by
  // every caller that drains the channel between engine steps (generate, bench, scoring).
  bool pop(GenerationEvent* out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto ready = [&] { return !events_.empty(); };
    if (timeout.count() <= 0 ? !ready() : !cv_.wait_for(lock, timeout, ready)) return false;
    *out = std::move(events_.front());
    events_.pop_front();
    return true;
  }

  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
  std::atomic<bool> cancelled_{false};
};

// Engine step durations since start, in fixed buckets (Prometheus histogram semantics: the
// server exports it as glassbox_engine_step_duration_seconds).
struct StepHistogram {
  static constexpr std::array<double, 13> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
  std::array<uint64_t, kBounds.size() + 1> buckets{};  // per bucket (not cumulative); the last is +Inf
  uint64_t count = 0;
  double sum = 0;

  void observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    ++buckets[i];
    ++count;
    sum += seconds;
  }
};

// A snapshot of the engine's state for /metrics and /ready.
struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, found
  int64_t preemptions = 0;
  StepHistogram step_seconds;
  int64_t monitor_steps = 0;     // steps the massive-activation monitor sampled
  int64_t massive_events = 0;    // events the monitor counted (all layers)
  int64_t glass_requests = 0;    // requests run with a glass spec (observation or interventions)
  int64_t state_slots_used = 0;  // hybrid models: recurrent-state slots held by running sequences
  // Per weight variant (index = GenerationRequest::variant, 0 the base): sequences running / waiting.
  std::vector<int64_t> running_by_variant, waiting_by_variant;
};

// A weight variant the engine serves beside the base (GenerationRequest::variant = id).
struct VariantStatus {
  int32_t id = 0;       // 1, 2, ...
  std::string name;     // the `model` clients send
  std::string source;   // "patch", "peft", "gguf-lora", "checkpoint"
  std::string path;     // where it was loaded from
  std::string version;  // the patch manifest's version ("" for adapters and checkpoints)
  std::string sha256;   // its identity: the manifest's, the adapter file's or the edited checkpoint's hash
  int64_t bytes = 0;    // memory its deltas take beside the base weights
  int32_t edits = 0;    // matrices it edits
  // Prompts with the greedy tokens the variant must give (its patch manifest's `golden`).
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> golden;
};

// What the server sees of the engine.
class EngineApi {
 public:
  virtual ~EngineApi() = default;
  // Queues a request. Errors: an invalid request (400), queue full (429) or draining (503); *code
  // (when given) says which: kInvalidRequest, kQueueFull or kDraining (kNone on success).
  virtual Status submit(GenerationRequest request, std::shared_ptr<RequestChannel> channel,
                        EngineErrorCode* code = nullptr) = 0;
  virtual EngineStats stats() const = 0;
  // The massive-activation monitor's counters (empty when the engine has none).
  virtual MonitorSnapshot monitor() const { return {}; }
  // The served model's shape, for resolving glass-box specs; null: the engine has none.
  virtual const ModelConfig* model_config() const { return nullptr; }
  // The weight variants served beside the base, by id.
  virtual std::vector<VariantStatus> variants() const { return {}; }
  // Serves one more variant while running: resolved against the model on the calling thread,
  // made servable between two steps. Its id (never reused); an error names what does not fit.
  virtual Result<int32_t> load_variant(const patch::Patch& patch, const std::string& name, double scale) {
    return Status::error("this engine cannot load weight variants");
  }
  // Stops serving a variant at once (new requests naming it are refused); its memory is freed
  // once no sequence runs on it.
  virtual Status unload_variant(int32_t id) { return Status::error("this engine serves no weight variants"); }
  // The model's output head (final norm, lm_head) on x[n, n_embd] → logits[n, vocab], callable
  // from any thread while the engine runs (the logit lens of POST /v1/glassbox/analyze).
  virtual Status output_head(const float* x, int64_t n, float* logits) const {
    return Status::error("this engine has no model to apply an output head");
  }
};

}  // namespace gb

// The contract between the server and the engine: what a generation request is, and the
// events the engine thread streams back through a per-request channel (llama.cpp server's
// shape: HTTP threads enqueue, one engine thread batches, per-request channels stream back).
#pragma once

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
#include "engine/sampler.h"

namespace gb {

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

struct GenerationRequest {
  std::string id;               // unique; used in logs and metrics, never the prompt
  std::vector<int32_t> prompt;  // token ids, already templated and tokenized
  SamplingParams sampling;
  int32_t max_tokens = 16;      // > 0; prompt + max_tokens <= max model length (checked by the server)
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // stop on these besides the model's EOS ids
  int32_t top_logprobs = -1;    // -1: no logprobs; k >= 0: sampled token's logprob + k alternatives
  uint64_t cache_salt = 0;      // mixed into prefix-cache block hashes (interventions use it)
  Clock::time_point deadline = Clock::time_point::max();  // cancelled with kTimeout when passed
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct GeneratedToken {
  int32_t token;
  float logprob = 0.0f;            // of the sampled token under the model's distribution
  std::vector<TokenLogprob> top;   // top_logprobs alternatives, most likely first
};

// One message from the engine thread to the request's consumer.
struct GenerationEvent {
  std::vector<GeneratedToken> tokens;  // new tokens since the previous event
  FinishReason finish = FinishReason::kNone;  // set on the last event only
  std::string error;                   // with kError: what went wrong
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;    // prompt tokens served from the prefix cache
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

  // Waits until an event arrives or the timeout passes; false on timeout.
  bool pop(GenerationEvent* out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
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

// A snapshot of the engine's state for /metrics and /ready.
struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits = 0;     // of those, found
  int64_t preemptions = 0;
  int64_t state_slots_used = 0;      // hybrid models: recurrent-state slots held by running sequences
  double last_step_seconds = 0;
};

// What the server sees of the engine.
class EngineApi {
 public:
  virtual ~EngineApi() = default;
  // Queues a request. Errors: queue full (the server answers 429) or draining (503).
  virtual Status submit(GenerationRequest request, std::shared_ptr<RequestChannel> channel) = 0;
  virtual EngineStats stats() const = 0;
};

}  // namespace gb

// Test doubles for the server: a byte-level TextCodec and a FakeEngine that streams a
// deterministic script through RequestChannels on its own thread, like the real engine loop.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/monitor.h"
#include "engine/request.h"
#include "server/text_codec.h"

namespace gb::server::test {

// Ids: 0 <unk>, 1 <s> (BOS), 2 </s> (EOS), 3 + b for byte b.
class FakeCodec : public TextCodec {
 public:
  static constexpr int32_t kBos = 1, kEos = 2, kByte0 = 3;
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
  std::unique_ptr<StreamDetokenizer> stream(std::span<const int32_t> prompt = {}) const override;
  // "<|role|>content\n" per message, then "<|assistant|>". A message with content
  // "{% raise %}" makes the template fail (for the error path).
  Result<std::string> render_chat(const nlohmann::json& messages, bool add_generation_prompt) const override;
  int32_t vocab_size() const override { return 259; }
};

struct FakeEngineOptions {
  std::string script = "Hello world. The end.";  // output (unless seeded and sampled), then EOS
  std::chrono::milliseconds token_delay{1};      // one step per delay
  int tokens_per_event = 1;
  bool queue_full = false;                                 // submit() fails
  std::string fail_with;                                   // non-empty: first step ends with kError
  EngineErrorCode fail_code = EngineErrorCode::kInternal;  // ... carrying this code
  int64_t waiting = 0;                                     // reported in stats()
  MonitorSnapshot monitor;                                 // what monitor() reports (default: off)
  // The model shape glass-box specs resolve against (a 4-layer, 8-wide model with an MLP of 16);
  // the fake applies nothing, and reports the interventions as applied (and, for attention
  // sinks, per observed layer and each of 2 heads: mean 1 / (2 + h), max 1 at token 0).
  ModelConfig model = [] {
    ModelConfig c;
    c.n_layers = 4;
    c.n_embd = 8;
    c.n_ff = 16;
    c.n_heads = 2;
    return c;
  }();
};

class FakeEngine : public EngineApi {
 public:
  explicit FakeEngine(FakeEngineOptions options = {});
  ~FakeEngine() override;

  Status submit(GenerationRequest request, std::shared_ptr<RequestChannel> channel,
                EngineErrorCode* code = nullptr) override;
  EngineStats stats() const override;
  const ModelConfig* model_config() const override { return &options_.model; }
  MonitorSnapshot monitor() const override { return options_.monitor; }

  void set_queue_full(bool v) { queue_full_.store(v); }
  void set_waiting(int64_t v) { waiting_.store(v); }
  // Requests seen so far (copies), in submission order.
  std::vector<GenerationRequest> submitted() const;
  int cancelled_count() const { return cancelled_.load(); }
  int active_count() const;
  // Waits until cancelled_count() >= n; false on timeout.
  bool wait_cancelled(int n, std::chrono::milliseconds timeout) const;

 private:
  struct Active {
    GenerationRequest request;
    std::shared_ptr<RequestChannel> channel;
    std::mt19937_64 rng;
    int32_t produced = 0;
    bool announced = false;
  };
  void loop();
  GeneratedToken next_token(Active& a);

  FakeEngineOptions options_;
  std::atomic<bool> queue_full_;
  std::atomic<int64_t> waiting_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::vector<std::unique_ptr<Active>> active_;
  std::vector<GenerationRequest> submitted_;
  std::atomic<int> cancelled_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gb::server::test

// The engine: owns the scheduler, the model runner (KV cache storage, batch, glass table) and the
// sampling of every running sequence, and runs steps — one flat batch of prefill chunks and decode
// tokens from many requests per forward. A step has three parts, as in nano-vllm: schedule (the
// scheduler picks the work), run (ModelRunner: batch, glass table, forward) and post-process
// (sampling, logprobs, stop checks, finishing). Runs on its own thread (start) behind EngineApi, or
// stepped synchronously (step / run_until_idle) by the CLI and tests — the same step either way.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace gb {

// The KV cache when EngineConfig::kv_cache_bytes is 0: enough for max_num_seqs sequences of
// max_model_len, at most this many bytes.
inline constexpr int64_t kAutoKvCacheMaxBytes = int64_t{4} << 30;

struct EngineConfig {
  SchedulerConfig scheduler;
  int32_t block_size = 16;
  int64_t kv_cache_bytes = 0;  // 0: enough for max_num_seqs sequences of max_model_len (kAutoKvCacheMaxBytes at most)
  // K/V element type: f32, bf16 or f16 (half the KV memory and traffic; K/V rounded to nearest
  // even when stored). A hybrid model's linear-attention state stays f32.
  DType kv_cache_dtype = DType::kF32;
  int32_t max_model_len = 0;  // 0: the model's max_position_embeddings
  int32_t max_queue = 256;    // waiting requests beyond this are refused (the server answers 429)
  MonitorConfig monitor;      // the massive-activation monitor (off by default; the server turns it on)
};

// Bytes of one KV block: K and V in `dtype` of block_size tokens in every attention layer (a hybrid
// model's linear-attention layers keep a fixed-size recurrent state per sequence instead).
int64_t kv_block_bytes(const ModelConfig& config, int32_t block_size, DType dtype = DType::kF32);

// "f32" | "bf16" | "f16" -> the KV cache element type; false for anything else.
bool parse_kv_cache_dtype(std::string_view name, DType* out);

class Engine : public EngineApi {
 public:
  // The model must outlive the engine. Sizes the KV cache and checks the configuration.
  static Result<std::unique_ptr<Engine>> create(Model* model, const EngineConfig& config);
  ~Engine() override;

  Status submit(GenerationRequest request, std::shared_ptr<RequestChannel> channel,
                EngineErrorCode* code = nullptr) override;
  EngineStats stats() const override;
  MonitorSnapshot monitor() const override;
  const ModelConfig* model_config() const override { return &model_->config(); }
  std::vector<VariantStatus> variants() const override;
  Result<int32_t> load_variant(const patch::Patch& patch, const std::string& name, double scale) override;
  Status unload_variant(int32_t id) override;
  // On the calling thread (one call at a time; never the engine's pool, which its thread owns).
  Status output_head(const float* x, int64_t n, float* logits) const override;
  // Replaces the monitor configuration from the next step on (thread-safe).
  void set_monitor(const MonitorConfig& config);

  // Background mode: a thread that steps while there is work and sleeps otherwise.
  void start();
  // Stops accepting work; running requests finish (or are cancelled at the deadline), then
  // the thread exits.
  void drain(Clock::time_point deadline);
  void stop();

  // Synchronous mode (no thread): one step; false when there was nothing to do.
  Result<bool> step();
  Status run_until_idle();

  const EngineConfig& config() const { return config_; }
  int32_t max_model_len() const { return config_.max_model_len; }
  const Model& model() const { return *model_; }

 private:
  mutable std::mutex head_mutex_;
  mutable ThreadPool head_pool_{1};  // output_head's matmul: the calling thread alone
  // A sequence leaving the engine this step, and why.
  struct Done {
    Sequence* seq;
    FinishReason reason;
    EngineErrorCode code = EngineErrorCode::kNone;
    std::string error = {};
  };

  Engine(Model* model, const EngineConfig& config, std::unique_ptr<KvCache> cache);
  // submit's checks of a request against this engine (the errors are kInvalidRequest).
  Status validate(const GenerationRequest& request) const;
  void take_inbox();
  // Between steps, on the engine's thread: queued control tasks (variant commits), then frees the
  // retired variants no sequence runs on any more.
  void run_control();
  // Under mutex_: the served variants as the server sees them, from the model's table.
  void refresh_variants_locked();
  void reap_cancelled();
  // The three parts of a step. schedule: the scheduler's pick, the queue-wait events of newly
  // admitted sequences, a new monitor configuration. post_process: sampling, logprobs, stop
  // checks, committing the step and finishing sequences (all of them, with the forward's error,
  // when it failed).
  const std::vector<ScheduledSeq>& schedule();
  void post_process(const std::vector<ScheduledSeq>& scheduled, const Status& forward);
  // A sequence whose logits came out non-finite: where it happened, as the failure message.
  std::string non_finite_error(Sequence* seq);
  void finish(Sequence* seq, FinishReason reason, EngineErrorCode code = EngineErrorCode::kNone,
              const std::string& error = {});
  void loop();
  // Copies the scheduler's counters into stats_ (step_seconds < 0: no step ran).
  void publish_stats(double step_seconds);
  // Folds a sampled step's monitor results into monitor_state_.
  void record_monitor(const std::vector<ScheduledSeq>& scheduled);

  Model* model_;
  EngineConfig config_;
  BlockManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  std::vector<float> logprobs_;  // [vocab] f32 scratch
  // A step's samples, drawn on the model's pool before post_process's serial pass.
  struct SampleJob {
    Sequence* seq;
    float* logits;
    bool finite = true;  // false: non-finite logits, nothing drawn
    GeneratedToken gen{0, 0.0f, {}, 0};
  };
  std::vector<SampleJob> sample_jobs_;
  std::vector<float> sample_scratch_;  // [pool size × vocab] f32, one row per pool task
  void sample_step(const std::vector<ScheduledSeq>& scheduled);
  std::vector<int32_t> eos_ids_;
  std::vector<Done> done_;  // per-step scratch

  mutable std::mutex mutex_;  // guards inbox_, stats_ and the flags below
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Sequence>> inbox_;
  EngineStats stats_;
  MonitorSnapshot monitor_state_;
  bool monitor_changed_ = false;              // set_monitor since the last step: the runner takes monitor_state_.config
  std::vector<std::function<void()>> tasks_;  // run by run_control on the engine thread
  std::vector<int32_t> retiring_;             // variants unloaded, freed when no sequence uses them
  std::vector<VariantStatus> variants_;       // servable variants (a copy of the model's table)
  bool accepting_ = true;
  bool stop_ = false;
  Clock::time_point drain_deadline_ = Clock::time_point::max();
  std::thread thread_;
};

}  // namespace gb

// The run part of an engine step (nano-vllm's ModelRunner): the scheduled sequences become one flat
// batch and its glass-box table, one forward pass runs on the model, and one logits row is left
// per sequence that samples. Owns the KV cache storage, the batch, the logits and the step's
// glass table; everything is sized at creation or grow-only, so a warmed-up run allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "model/model.h"

namespace gb {

// Where a sequence's activations first became NaN or Inf.
struct NonFiniteSite {
  bool found = false;
  HookPoint point = HookPoint::kLogits;
  int32_t layer = -1;     // -1 for embed, final_norm, logits
  int32_t position = -1;  // the token position of the row
};

class ModelRunner {
 public:
  // cache: the KV storage for this model; max_num_seqs: the most sequences in one step (one
  // logits row each).
  ModelRunner(Model* model, std::unique_ptr<KvCache> cache, int32_t max_num_seqs, int32_t block_size,
              const MonitorConfig& monitor);

  // Builds the batch and glass table of the scheduled sequences and runs the forward pass. The
  // monitor samples this step when it is on and its period says so.
  Status run(const std::vector<ScheduledSeq>& scheduled);

  // After run: logits [vocab] f32 of the i-th sequence that samples, in scheduled order. The
  // sampler may edit them.
  float* logits(int32_t i) { return logits_.data() + static_cast<size_t>(sample_rows_[i]) * model_->config().vocab; }
  // After run: the logits [vocab] of the j-th prompt-logprob row of the i-th scheduled sequence
  // (its row at position prompt_logprob_range(...).begin + j, which scores the prompt token after it).
  float* prompt_logits(int32_t i, int32_t j) {
    return logits_.data() + static_cast<size_t>(prompt_rows_[i] + j) * model_->config().vocab;
  }
  // Whether the last run sampled the monitor, and what it saw.
  bool monitored() const { return monitored_; }
  const MonitorStep& monitor_step() const { return monitor_step_; }
  // Replaces the monitor configuration (between steps); its period restarts.
  void set_monitor(const MonitorConfig& config);

  // The rare path after a sequence's logits came out non-finite: recomputes its first n_tokens
  // tokens (its interventions applied as before, its observation untouched) with every hook point
  // checked, and returns the first (layer, point, position) in forward order whose row is not
  // finite. Rewrites the sequence's own KV and recurrent state with the values they already hold.
  Result<NonFiniteSite> locate_non_finite(const Sequence& seq, int32_t n_tokens);

  const KvCache& cache() const { return *cache_; }
  const Model& model() const { return *model_; }

 private:
  Model* model_;
  std::unique_ptr<KvCache> cache_;
  int32_t block_size_;
  Batch batch_;
  // [n_out, vocab] f32: one row per sampling sequence (max_num_seqs at most), plus the rows that
  // final_norm / logits captures ask for (grown on demand, only when such captures run).
  std::vector<float> logits_;
  std::vector<int32_t> sample_rows_;    // [i]: logits row of the i-th sampling sequence
  std::vector<int32_t> prompt_rows_;    // [i]: logits row of the i-th scheduled sequence's first prompt-logprob row
  std::vector<int32_t> out_positions_;  // scratch: one sequence's captured output positions
  GlassStep glass_step_;                // this step's glass table (rebuilt every step, grow-only buffers)
  Hooks hooks_;                         // no observers; carries glass_step_ into the forward pass
  MonitorConfig monitor_config_;        // the monitor configuration in force
  MonitorStep monitor_step_;            // what the last sampled step saw
  int64_t monitor_counter_ = 0;         // steps since the monitor was configured
  bool monitored_ = false;
};

// A NaN or Inf in x[n] (a bit test per value: no arithmetic, so it cannot raise or be reordered).
bool all_finite(const float* x, int64_t n);

// "non-finite activations (NaN or Inf) first at layer 3 resid_post, token position 7 (where
// interventions[0] (scale) applies)" — the message of a kNonFinite failure.
std::string non_finite_message(const NonFiniteSite& site, const GlassSpec* spec);

}  // namespace gb

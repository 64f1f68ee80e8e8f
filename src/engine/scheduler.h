// One scheduling rule over a token budget per step (vLLM v1 / nano-vllm): running sequences
// first (a decode token each, or their next prefill chunk), then waiting ones while the budget,
// max_num_seqs and free KV blocks allow. No separate prefill and decode phases; a long prompt
// is prefilled in chunks. When blocks run out, the newest running sequence is preempted and
// later recomputed (its blocks freed; prefix-cache hits make the recompute cheap).
// Hybrid models (SchedulerConfig::recurrent_state): every running sequence also holds one of
// max_num_seqs recurrent-state slots, taken at admission and returned on preemption or finish
// (a recompute starts again at position 0, which resets the state); prefix caching is off,
// because a cached KV block does not carry the recurrent state at its end.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/request.h"

namespace gb {

struct Sequence {
  GenerationRequest request;
  std::shared_ptr<RequestChannel> channel;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<GlassAccumulator> glass;  // with request.glass: what its forward passes observed
  // Observation must compute the prompt itself: no prefix-cache hits (its blocks are still published).
  bool skip_prefix_lookup = false;

  std::vector<int32_t> tokens;  // prompt + generated so far
  int32_t n_prompt = 0;
  int32_t n_computed = 0;              // leading tokens whose K/V are in the cache
  std::vector<int32_t> block_table;    // physical KV blocks in position order
  int32_t state_slot = -1;             // hybrid models: recurrent-state slot while running, else -1
  std::vector<uint64_t> block_hashes;  // chained hashes of the leading full blocks published so far
  int32_t n_cached_prompt = 0;         // prompt tokens served by the prefix cache (first admission)
  int32_t next_prompt_logprob = 1;     // with request.prompt_logprobs: the next prompt token to score
  bool admitted_once = false;

  Clock::time_point arrival;
  Clock::time_point first_token_time;  // default until the first token
  int32_t n_generated() const { return static_cast<int32_t>(tokens.size()) - n_prompt; }
};

struct SchedulerConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 512;
  // The model has recurrent (linear-attention) layers: every running sequence holds one of the
  // block manager's state slots (it has at least max_num_seqs), and prefix caching is off.
  bool recurrent_state = false;
  // Logits rows per step for prompt logprobs (each a vocab-wide row): a scoring sequence's prefill
  // chunks are cut to fit, so the runner's logits buffer stays bounded.
  int32_t max_prompt_logprob_rows = 64;
};

// The prompt positions [begin, end) of a chunk [start, start + n) whose rows give prompt logprobs
// (the row at position p scores prompt token p + 1); empty without prompt_logprobs.
struct PromptLogprobRange {
  int32_t begin = 0, end = 0;
  int32_t size() const { return end - begin; }
};
PromptLogprobRange prompt_logprob_range(const Sequence& seq, int32_t start, int32_t n);

struct ScheduledSeq {
  Sequence* seq;
  int32_t start;         // first token index (= position) computed this step
  int32_t n_tokens;      // tokens computed this step
  bool samples;          // reaches the end of the known tokens: the step's logits sample the next one
  bool first_admission;  // leaves the queue for the first time this step (ends its queue wait)
};

class Scheduler {
 public:
  // With config.recurrent_state, blocks must have at least max_num_seqs state slots.
  Scheduler(const SchedulerConfig& config, BlockManager* blocks);

  void add(std::unique_ptr<Sequence> seq);

  // Picks this step's work. The returned pointers stay valid until finish() of that sequence.
  const std::vector<ScheduledSeq>& schedule();

  // After the step ran: advances n_computed of the scheduled sequences and publishes their
  // newly full blocks in the prefix cache.
  void commit();

  // Removes a sequence (finished, cancelled, failed) and frees its blocks.
  void finish(Sequence* seq);

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  int64_t preemptions() const { return preemptions_; }
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  int32_t state_slots_used() const { return blocks_->n_state_slots_used(); }

 private:
  void preempt_last();
  void publish_full_blocks(Sequence* seq);
  void release_state_slot(Sequence* seq);

  SchedulerConfig config_;
  BlockManager* blocks_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::deque<std::unique_ptr<Sequence>> waiting_;   // FCFS; preempted sequences go to the front
  std::vector<ScheduledSeq> scheduled_;
  int64_t preemptions_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace gb

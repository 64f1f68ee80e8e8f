// Session: one sequence on a model — its KV blocks (and recurrent-state slot for hybrid models), prefill (chunked to the model's batch size)
// and decode one token at a time. For the CLI and tests; the server batches sequences itself.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace gb {

class Session {
 public:
  Session(Model& model, KvCache& cache);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends ids at positions n_past().., in forwards of at most max_batch_tokens tokens.
  // Afterwards logits() holds the logits of the last token, or of every fed token if all_logits.
  // Out of KV blocks or past the model's context: an error, and nothing is appended.
  Status feed(std::span<const int32_t> ids, const Hooks* hooks = nullptr, bool all_logits = false);

  // [n_rows, vocab] f32 from the last feed (n_rows = 1, or ids.size() with all_logits).
  std::span<const float> logits() const { return logits_; }
  // Logits of the last fed token: [vocab] f32.
  std::span<const float> last_logits() const;

  int32_t n_past() const { return n_past_; }
  const std::vector<int32_t>& block_table() const { return blocks_; }
  // Forgets the sequence and returns its blocks to the cache.
  void reset();

 private:
  Model& model_;
  KvCache& cache_;
  std::vector<int32_t> blocks_;  // physical KV blocks in position order
  int32_t state_slot_ = -1;      // hybrid models: the recurrent-state slot held from the first feed to reset()
  int32_t n_past_ = 0;
  Batch batch_;
  std::vector<float> logits_;  // [n_rows, vocab] f32
};


}  // namespace gb

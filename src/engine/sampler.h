// Turns one row of logits into the next token: logit bias, then repetition / presence /
// frequency penalties, temperature, top-k, min-p, top-p and a seeded random draw.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace gb {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// A sampled token, with its log-probability under the model's distribution when asked for.
struct GeneratedToken {
  int32_t token;
  float logprob = 0.0f;           // of the sampled token under the model's distribution
  std::vector<TokenLogprob> top;  // top_logprobs alternatives, most likely first
  int32_t rank = 0;               // prompt logprobs: 1 + the number of tokens more likely than it (0: not computed)
};

struct SamplingParams {
  float temperature = 1.0f;             // 0 = greedy (argmax, lowest id on ties)
  int32_t top_k = 0;                    // 0 or < 0 = off
  float top_p = 1.0f;                   // 1 = off
  float min_p = 0.0f;                   // 0 = off; keeps tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;      // HF: logit / r if > 0 else logit * r, on prompt + output tokens
  float presence_penalty = 0.0f;        // OpenAI: - presence * (count > 0), output tokens
  float frequency_penalty = 0.0f;       // OpenAI: - frequency * count, output tokens
  std::map<int32_t, float> logit_bias;  // added to the logit before everything else
  uint64_t seed = 0;
  bool has_seed = false;  // without a seed each sampler draws from a fresh random seed

  // Checks ranges; the message names the offending field as the API spells it.
  Status validate(int32_t vocab_size) const;
  bool is_greedy() const { return temperature <= 0.0f; }
};

// Per-sequence sampling state. Buffers are sized once for the vocabulary: sampling a token
// allocates nothing.
class Sampler {
 public:
  Sampler(const SamplingParams& params, int32_t vocab_size);

  // Records prompt tokens (the repetition penalty covers them) — call once before sampling.
  void set_prompt(std::span<const int32_t> prompt);

  // Picks the next token from logits [vocab] (modified in place by penalties and bias) and
  // records it as an output token.
  int32_t sample(float* logits);

  // The same, and with top_logprobs >= 0 also the log-probabilities of the model's distribution
  // (logits as given, before bias and penalties edit them): the sampled token's and the
  // top_logprobs most likely tokens. scratch: [vocab] f32 workspace.
  GeneratedToken sample(float* logits, int32_t top_logprobs, std::span<float> scratch);

  // Records a token chosen elsewhere (e.g. forced) as an output token.
  void accept(int32_t token);

  const SamplingParams& params() const { return params_; }

 private:
  void apply_penalties(float* logits) const;
  // The non-greedy choice from logits after bias and penalties.
  int32_t draw(const float* logits);
  // candidates_ = every (logit / T, id) with logit / T > floor, in id order.
  void collect_above(const float* logits, float inv_t, float floor);
  // Top-p over a flat row: candidates_ = the tokens surely in the nucleus of mass `share` (in id
  // order; their count is returned), then those that decide its edge, sorted most likely first.
  size_t nucleus_bulk(const float* logits, float inv_t, float mx, double share);

  // top_k up to this selects with a heap; larger ones sort a copy of the row.
  static constexpr size_t kHeapTopK = 256;
  // top-p sorts the tokens within 8 nats of the maximum when there are at most this many.
  static constexpr size_t kSortedHead = 4096;

  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<int32_t> output_counts_;                 // [vocab] occurrences in the output
  std::vector<uint8_t> in_prompt_;                     // [vocab] 1 if the token occurs in the prompt
  std::vector<int32_t> seen_;                          // tokens with a count or prompt flag (sparse penalty pass)
  std::vector<std::pair<float, int32_t>> candidates_;  // [vocab] scratch: (logit / T, id)
  std::vector<double> block_sums_;                     // scratch: a draw's partial sums per 1024 ids
  std::vector<float> terms_;                           // scratch: one such block's weights
};

// log-softmax of logits into out (both [vocab]); used for logprobs.
void log_softmax(std::span<const float> logits, std::span<float> out);

// The k most likely tokens of logprobs [vocab] into *top, most likely first (the lower id first on
// ties): insertion into a short sorted list, one pass, no sort of the vocabulary.
void top_logprobs(std::span<const float> logprobs, int32_t k, std::vector<TokenLogprob>* top);

}  // namespace gb
